"""The MQTT topic contract (``docs/mqtt.md``): one place that spells every topic.

``<topic_root>/<site>/<rack>/``: outbound ``status`` and ``baseline/<stage>`` (retained),
``summary``, ``event``; inbound ``hint`` and ``cmd/accept``.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.live.envelope import MessageKind

SCHEMA_VERSION = 1  # the "v" field of every payload


def site_prefix(topic_root: str, site: str) -> str:
    """``<topic_root>/<site>/``: what every rack of one site publishes under."""
    return f"{topic_root.rstrip('/')}/{site}/"


@dataclass(frozen=True)
class Topics:
    root: str  # "rackwatt/v1/<site>/<rack>"; "…/<site>/+" gives a site's wildcard filters

    @classmethod
    def for_rack(cls, topic_root: str, site: str, rack: str) -> Topics:
        return cls(site_prefix(topic_root, site) + rack)

    @property
    def status(self) -> str:
        return f"{self.root}/status"

    @property
    def summary(self) -> str:
        return f"{self.root}/summary"

    @property
    def event(self) -> str:
        return f"{self.root}/event"

    @property
    def hint(self) -> str:
        return f"{self.root}/hint"

    @property
    def cmd_accept(self) -> str:
        return f"{self.root}/cmd/accept"

    def baseline(self, stage: str) -> str:
        return f"{self.root}/baseline/{stage}"

    def for_message(self, kind: MessageKind, stage: str | None = None) -> tuple[str, bool]:
        """(topic, retained) of an outbound data message; a baseline needs its stage."""
        if kind == "baseline":
            if not stage:
                raise ValueError("a baseline message needs its stage")
            return self.baseline(stage), True
        return (self.summary if kind == "summary" else self.event), False

    def kind_of(self, topic: str) -> str | None:
        """The kind (``status``, ``baseline``, ``cmd/accept``…) of one of our topics, else None."""
        prefix = self.root + "/"
        if not topic.startswith(prefix):
            return None
        rest = topic[len(prefix) :]
        if rest.startswith("baseline/"):
            return "baseline"
        return rest if rest in ("status", "summary", "event", "hint", "cmd/accept") else None
