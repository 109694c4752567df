"""One rack as a Sparkplug B edge node: which metrics, and the session rules (births, seq, bdSeq).

Metrics are the agent's summary (docs/mqtt.md); a figure the agent does not know is ``is_null``,
never 0. Sparkplug B 3.0: NBIRTH carries every metric, ``seq`` 0 and the ``bdSeq`` of this session's
will; NDATA only what changed, ``seq`` 1…255, 0…; NDEATH only ``bdSeq``. Metrics cannot be added
after a birth, so a new one (a stage seen for the first time) causes a rebirth.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.payload import number, section, total
from agent.sparkplug.payload import BOOLEAN, DOUBLE, STRING, UINT64, Metric, Value, encode_payload
from agent.trace.model import J_PER_KWH

NAMESPACE = "spBv1.0"


def summary_metrics(summary: Mapping[str, Any]) -> dict[str, tuple[int, Value]]:
    """name → (datatype, value) for one summary payload."""
    power = section(summary, "power_w")
    out: dict[str, tuple[int, Value]] = {
        "stage": (STRING, summary.get("stage")),
        "job": (STRING, summary.get("job")),
        "warm": (BOOLEAN, bool(summary.get("warm"))),
    }
    for key in ("gpu", "it", "it_expected", "cooling", "cooling_expected"):
        out[f"power/{key}_w"] = (DOUBLE, number(power.get(key)))
    out["power/facility_w"] = (DOUBLE, total(power.get("it"), power.get("cooling")))
    for key in ("tau_s", "dead_s"):
        out[f"lag/{key}"] = (DOUBLE, number(section(summary, "lag").get(key)))
    for stage, entry in sorted(section(summary, "stages").items()):
        out[f"baseline/{stage}/level_w"] = (DOUBLE, number((entry or {}).get("level_w")))
    for stage, parts in sorted(section(summary, "energy_kwh").items()):
        for part in ("it", "cooling"):
            kwh = number((parts or {}).get(part))
            out[f"energy/{stage}/{part}_j"] = (DOUBLE, kwh * J_PER_KWH if kwh is not None else None)
    for cause in sorted(summary.get("held") or ()):
        out[f"drift/{cause}/held"] = (BOOLEAN, True)
    return out


class EdgeNode:
    """Builds the (topic, payload) messages of one edge node from the agent's summaries."""

    def __init__(self, group_id: str, edge_node_id: str) -> None:
        self.group_id, self.edge_node_id = group_id, edge_node_id
        self.bd_seq = 0  # the will's bdSeq for the current MQTT session
        self._seq = 0
        self._born: dict[str, tuple[int, Value]] | None = None  # metrics as last sent

    def topic(self, kind: str) -> str:
        return f"{NAMESPACE}/{self.group_id}/{kind}/{self.edge_node_id}"

    @property
    def born(self) -> bool:
        return self._born is not None

    def death(self, ts_ms: int) -> tuple[str, bytes]:
        """The NDEATH for the current session (the will, or sent when the rack agent goes offline)."""
        return self.topic("NDEATH"), encode_payload(ts_ms, [Metric("bdSeq", UINT64, self.bd_seq)], None)

    def new_session(self) -> None:
        """A new MQTT session: the next bdSeq (0…255), and a birth is due."""
        self.bd_seq = (self.bd_seq + 1) % 256
        self._born = None

    def died(self) -> None:
        self._born = None

    def update(self, summary: Mapping[str, Any], ts_ms: int) -> tuple[str, bytes] | None:
        """The NBIRTH (first, or the metric set changed) or NDATA (changes only; None if none)."""
        now = summary_metrics(summary)
        if self._born is None or set(now) - set(self._born):
            if self._born is not None:
                now = {**{k: (t, None) for k, (t, _v) in self._born.items()}, **now}  # keep what was born
            self._born, self._seq = now, 0
            metrics = [Metric("bdSeq", UINT64, self.bd_seq)]
            metrics += [Metric(k, t, v) for k, (t, v) in now.items()]
            return self.topic("NBIRTH"), encode_payload(ts_ms, metrics, 0)
        changed = {
            k: (t, now[k][1] if k in now else None)
            for k, (t, v) in self._born.items()
            if (now[k][1] if k in now else None) != v
        }
        if not changed:
            return None
        self._born.update(changed)
        self._seq = (self._seq + 1) % 256
        return self.topic("NDATA"), encode_payload(ts_ms, [Metric(k, t, v) for k, (t, v) in changed.items()],
                                                   self._seq)
