"""Where every hint datagram enters, whatever its transport: rate limit, parse, count, apply.

``HintIntake.receive`` never raises: a bad or excess datagram is dropped and counted under its
reason. The rate limit comes first, so a flood costs a dictionary lookup per datagram, never a
JSON parse. Fixed memory: at most ``max_senders`` per-sender token buckets (least recently seen
evicted) plus a global one, so one local flooder only spends its own allowance. Commands are taken
only from the Unix socket and a sender the ``CommandPolicy`` permits (``cmd/accept`` over MQTT is
a separate path, guarded by the broker's ACL).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable

from agent.live.logsetup import worth_logging
from agent.stages.energy_query import Query, parse_query
from agent.stages.hints import DROP_REASONS, MAX_DATAGRAM_BYTES, Command, HintError, parse_datagram
from agent.stages.peers import CommandPolicy, PeerCred
from agent.stages.timeline import NodeTimelines, StageTimeline

log = logging.getLogger(__name__)


class TokenBucket:
    """Allows ``rate_per_s`` events per second on average, bursts up to ``burst``."""

    __slots__ = ("burst", "rate_per_s", "tokens", "updated")

    def __init__(self, rate_per_s: float, burst: float, now: float):
        self.rate_per_s = rate_per_s
        self.burst = burst
        self.tokens = burst
        self.updated = now

    def take(self, now: float) -> bool:
        elapsed = now - self.updated
        if elapsed > 0:
            self.tokens = min(self.burst, self.tokens + elapsed * self.rate_per_s)
            self.updated = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


class HintIntake:
    """Rate-limits, parses and applies hint datagrams; counts every drop by reason."""

    def __init__(
        self,
        timeline: StageTimeline,
        rate_limit_per_s: float = 50.0,
        on_command: Callable[[Command], None] | None = None,
        clock: Callable[[], float] = time.time,
        max_senders: int = 256,
        command_policy: CommandPolicy | None = None,
        on_query: Callable[[Query], bytes] | None = None,
        nodes: NodeTimelines | None = None,
    ):
        if rate_limit_per_s <= 0:
            raise ValueError(f"stages.rate_limit_per_s must be > 0, got {rate_limit_per_s}")
        self.timeline = timeline
        self.nodes = nodes if nodes is not None else NodeTimelines(timeline)
        self.rate_limit_per_s = rate_limit_per_s
        self.on_command = on_command
        self.on_query = on_query  # energy queries (energy_query.py): Query → reply datagram
        self.clock = clock
        self.max_senders = max_senders
        self.command_policy = command_policy or CommandPolicy.from_config(None, None)
        self._kernel_drops: dict[str, int] = {}  # per transport, as the kernel counts them
        self._buckets: OrderedDict[str, TokenBucket] = OrderedDict()
        # all senders together may use a few times one sender's allowance
        self._global = TokenBucket(rate_limit_per_s * 4, rate_limit_per_s * 4, clock())
        self._counts: dict[str, int] = dict.fromkeys(("accepted", "commands", "queries", *DROP_REASONS), 0)
        self.last_error = ""  # the latest drop's message, for `status`

    @property
    def counters(self) -> dict[str, int]:
        """Accepted hints, commands and drops by reason (a copy, JSON-ready)."""
        counts = dict(self._counts)
        counts["expired"] = self.timeline.expired
        for source, drops in self._kernel_drops.items():
            counts[f"kernel_drops_{source}"] = drops
        return counts

    def note_kernel_drops(self, source: str, total: int) -> None:
        """The kernel's running count of datagrams it dropped on ``source``'s full receive queue."""
        previous = self._kernel_drops.get(source, 0)
        if total > previous:
            self._kernel_drops[source] = total
            if previous == 0 or total // 1000 > previous // 1000:
                log.warning(
                    "stage hints: the kernel dropped %d datagram(s) on the %s socket so far "
                    "(receive queue full: a sender floods it)", total, source
                )

    def receive(
        self,
        data: bytes,
        source: str,
        sender: str = "",
        peer: PeerCred | None = None,
        reply: Callable[[bytes], None] | None = None,
    ) -> bool:
        """Handle one datagram from ``source`` (transport) / ``sender`` (peer). True if used.

        ``peer`` is the kernel-verified identity of a Unix-socket sender; commands need one.
        ``reply`` sends a datagram back to the sender (Unix socket only): energy queries need it.
        """
        now = self.clock()
        key = f"{source}:{sender}"
        if not self._allow(key, now):
            self._drop("flood", f"{key}: over {self.rate_limit_per_s:g} hints/s")
            return False
        if len(data) > MAX_DATAGRAM_BYTES:
            self._drop("too_large", f"{key}: datagram of {len(data)} bytes")
            return False
        try:
            message = parse_query(data) or parse_datagram(data, source, now)
        except HintError as exc:
            self._drop(exc.reason, f"{key}: {exc}")
            return False
        except Exception as exc:  # parsing must never take the agent down
            self._drop("malformed", f"{key}: {type(exc).__name__}: {exc}")
            return False
        if isinstance(message, Query):
            return self._answer(message, key, source, peer, reply)
        if isinstance(message, Command):
            if source != "unix" or not self.command_policy.permits(peer):
                who = f"uid {peer.uid}" if peer is not None else f"{source} sender {sender or '?'}"
                self._drop(
                    "unauthorized",
                    f"{key}: command {message.name!r} from {who} refused "
                    f"(commands are taken only over the Unix socket from {self.command_policy.describe()})",
                )
                return False
            self._counts["commands"] += 1
            if self.on_command is not None:
                try:
                    self.on_command(message)
                except Exception:
                    log.exception("stage intake: command handler failed for %s", message)
            return True
        if now - message.ts > self.timeline.ttl_s:
            age_s = now - message.ts
            self._drop("stale", f"{key}: hint is {age_s:.0f} s old (ttl {self.timeline.ttl_s:g} s)")
            return False
        if message.node is not None and not self.nodes.knows(message.node):
            known = ", ".join(sorted(self.nodes.nodes)[:8]) or "none: the rack lists no [[node]] or [[dcgm]]"
            self._drop("unknown_node", f"{key}: hint for node {message.node!r}, not a node of this rack "
                                       f"(known: {known})")
            return False
        self.nodes.apply(message)
        self._counts["accepted"] += 1
        return True

    def _answer(
        self,
        query: Query,
        key: str,
        source: str,
        peer: PeerCred | None,
        reply: Callable[[bytes], None] | None,
    ) -> bool:
        """Answer an energy query over the Unix socket (the only transport with a reply path and a
        kernel-verified sender); any other is dropped as ``unauthorized``."""
        if source != "unix" or peer is None or reply is None or self.on_query is None:
            why = "no query handler" if self.on_query is None else "queries only over the Unix socket"
            self._drop("unauthorized", f"{key}: energy query refused ({why})")
            return False
        self._counts["queries"] += 1
        try:
            reply(self.on_query(query))
        except Exception as exc:  # the sender left, or an engine without a ledger: never the loop's problem
            log.debug("stage intake: energy query from %s not answered: %s", key, exc)
            return False
        return True

    def _allow(self, key: str, now: float) -> bool:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(self.rate_limit_per_s, max(1.0, self.rate_limit_per_s), now)
            self._buckets[key] = bucket
            if len(self._buckets) > self.max_senders:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        return bucket.take(now) and self._global.take(now)

    def _drop(self, reason: str, message: str) -> None:
        self._counts[reason] = self._counts.get(reason, 0) + 1
        self.last_error = message
        if worth_logging(self._counts[reason]):
            log.warning("stage hint dropped (%s, %d so far): %s", reason, self._counts[reason], message)
