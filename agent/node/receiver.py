"""``NodeReceiver``: the rack agent's UDP endpoint for its node agents; decides which datagrams to trust.

One socket for every ``[[node]]``. A datagram is accepted only if, in this order, it is well formed,
names a configured node, carries that node's HMAC, is newer (session, seq) than the last accepted
from it, and was sent within ``max_skew_s`` of its arrival. Refusals are counted by reason and per
node, and logged with the sender's address at the 1st, 10th, 100th … time.

Clock skew: the least ``arrival − sent_ts`` of the last ``SKEW_WINDOW`` datagrams is the node's
offset estimate; readings are re-timed onto this host's clock by it. Only the newest reading per
node is kept, for its driver (``agent.node.source``) to take at its poll.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agent.config.secrets import SecretError, read_secret
from agent.live.logsetup import worth_logging
from agent.node import wire
from agent.node.config import NodeLinkSection, NodeSection

log = logging.getLogger("rackwatt.node_link")

# The offset estimate is the least (arrival − sent) of the last 60 datagrams (a minute at 1 s):
# on a LAN one datagram a minute crosses with no queueing at all, and a minute follows a
# slewing clock (NTP slews at most 0.5 ms/s) to within 30 ms.
SKEW_WINDOW = 60
REASONS = ("malformed", "unknown_node", "bad_mac", "replayed", "skewed")
MAX_UNKNOWN_IDS = 64  # distinct unknown node ids remembered for log rate-limiting (bounded memory)


@dataclass
class NodePeer:
    """What the receiver knows about one configured node."""

    section: NodeSection
    key: bytes | None = None
    key_error: str | None = None
    last_id: tuple[int, int] | None = None  # (session, seq) of the last accepted datagram
    offsets: collections.deque[float] = field(default_factory=lambda: collections.deque(maxlen=SKEW_WINDOW))
    last_accept_ts: float | None = None  # this host's clock
    last_addr: str | None = None
    reading: wire.NodeReading | None = None  # newest accepted, not yet taken
    sessions: int = 0
    accepted: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    last_refusal: str | None = None
    arrived: asyncio.Event = field(default_factory=asyncio.Event)  # set by the first accepted datagram

    @property
    def skew_s(self) -> float | None:
        """The node's clock offset estimate (this host minus the node), s."""
        return min(self.offsets) if self.offsets else None

    def take(self) -> wire.NodeReading | None:
        reading, self.reading = self.reading, None
        return reading


class NodeReceiver(asyncio.DatagramProtocol):
    """The shared UDP endpoint; ``ensure_open()`` binds it (at the first poll, inside the loop)."""

    def __init__(self, link: NodeLinkSection, nodes: Iterable[NodeSection], *,
                 clock: Callable[[], float] = time.time) -> None:
        self.link = link
        self.clock = clock
        self.peers: dict[str, NodePeer] = {}
        for section in nodes:
            peer = NodePeer(section)
            try:
                peer.key = read_secret(section.key_file).encode("utf-8")
            except SecretError as exc:
                peer.key_error = f"cannot read its key: {exc}"
            self.peers[section.id] = peer
        self.counters: dict[str, int] = {"accepted": 0, **dict.fromkeys(REASONS, 0)}
        self.open_error: str | None = None
        self.bound: tuple[str, int] | None = None
        self._transport: asyncio.DatagramTransport | None = None
        self._opening: asyncio.Lock | None = None
        self._unknown: dict[str, int] = {}
        self.users = 0  # drivers sharing this receiver; the socket closes with the last one

    # ---- lifecycle -------------------------------------------------------------------------
    async def ensure_open(self) -> str | None:
        """Bind the socket if not yet bound; the error text if it cannot be (retried next poll)."""
        if self._transport is not None:
            return None
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._transport is not None:
                return None
            where = f"{self.link.address}:{self.link.port}"
            try:
                loop = asyncio.get_running_loop()
                transport, _ = await loop.create_datagram_endpoint(
                    lambda: self, local_addr=(self.link.address, self.link.port))
            except OSError as exc:
                self.open_error = f"node link: cannot listen on UDP {where}: {exc.strerror or exc}"
                return self.open_error
            self._transport = transport
            sockname = transport.get_extra_info("sockname")
            self.bound = (str(sockname[0]), int(sockname[1]))
            self.open_error = None
            log.info("node link: listening on UDP %s for %d node(s)", where, len(self.peers))
            return None

    def release(self) -> None:
        """One sharing driver closed; the last one closes the socket."""
        self.users = max(0, self.users - 1)
        if self.users == 0 and self._transport is not None:
            self._transport.close()
            self._transport = None

    # ---- datagrams -------------------------------------------------------------------------
    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        where = f"{addr[0]}:{addr[1]}"
        now = self.clock()
        try:
            claimed = wire.node_id_of(data)
        except wire.WireError as exc:
            self._refuse(None, "malformed", f"datagram from {where}: {exc}")
            return
        peer = self.peers.get(claimed)
        if peer is None:
            self._refuse_unknown(claimed, where)
            return
        if peer.key is None or not wire.verify(data, peer.key):
            why = peer.key_error or "its HMAC does not match the key in this rack's key_file (keys differ?)"
            self._refuse(peer, "bad_mac", f"node '{claimed}' ({where}): datagram refused: {why}")
            return
        try:
            reading = wire.decode(data)
        except wire.WireError as exc:
            self._refuse(peer, "malformed", f"node '{claimed}' ({where}): {exc}")
            return
        ident = (reading.session, reading.seq)
        if peer.last_id is not None and ident <= peer.last_id:
            self._refuse(peer, "replayed", f"node '{claimed}' ({where}): session {reading.session} seq "
                         f"{reading.seq} is not newer than the last accepted ({peer.last_id[0]} seq "
                         f"{peer.last_id[1]}): a replay or a duplicate")
            return
        offset = now - reading.sent_ts
        if abs(offset) > self.link.max_skew_s:
            side = "behind" if offset > 0 else "ahead of"
            self._refuse(peer, "skewed", f"node '{claimed}' ({where}): its clock is {abs(offset):.1f} s "
                         f"{side} this gateway's (limit max_skew_s = {self.link.max_skew_s:g} s): "
                         "readings refused; check NTP/chrony on the node (or a datagram delayed that long)")
            return
        if peer.last_id is None or reading.session != peer.last_id[0]:
            peer.sessions += 1
            if peer.sessions > 1:
                log.info("node '%s' (%s): new session (the node agent restarted)", claimed, where)
        peer.last_id = ident
        peer.offsets.append(offset)
        peer.last_accept_ts = now
        peer.last_addr = where
        peer.reading = reading
        peer.accepted += 1
        peer.arrived.set()
        self.counters["accepted"] += 1

    def error_received(self, exc: Exception) -> None:
        log.debug("node link: socket error: %s", exc)

    def _refuse(self, peer: NodePeer | None, reason: str, message: str) -> None:
        self.counters[reason] += 1
        count = self.counters[reason]
        if peer is not None:
            peer.refused[reason] = peer.refused.get(reason, 0) + 1
            peer.last_refusal = message
            count = peer.refused[reason]
        if worth_logging(count):
            log.error("%s (%d time(s))", message, count)

    def _refuse_unknown(self, claimed: str, where: str) -> None:
        self.counters["unknown_node"] += 1
        if claimed not in self._unknown and len(self._unknown) >= MAX_UNKNOWN_IDS:
            return  # counted; logging stays bounded
        count = self._unknown[claimed] = self._unknown.get(claimed, 0) + 1
        if worth_logging(count):
            log.error("node link: datagram from %s names node %r, which is not one of this rack's [[node]] "
                      "tables: refused (%d time(s))", where, claimed, count)

    # ---- status ----------------------------------------------------------------------------
    def status(self) -> dict[str, object]:
        """For the agent's ``status``: the link's counters and each node's state."""
        now = self.clock()
        nodes: dict[str, object] = {}
        for node_id, peer in self.peers.items():
            skew = peer.skew_s
            nodes[node_id] = {
                "accepted": peer.accepted,
                "refused": dict(peer.refused),
                "last_seen_s": None if peer.last_accept_ts is None else round(now - peer.last_accept_ts, 1),
                "skew_s": None if skew is None else round(skew, 4),
                "sessions": peer.sessions,
                "address": peer.last_addr,
            }
        return {"listening": None if self.bound is None else f"{self.bound[0]}:{self.bound[1]}",
                "error": self.open_error, "counters": dict(self.counters), "nodes": nodes}
