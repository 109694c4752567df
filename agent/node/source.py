"""``NodeSourceDriver``: one ``[[node]]`` as a GPU source of the rack agent (device ``node.<id>``).

Like a ``[[dcgm]]`` node it owns a fixed range ``gpu.<first_gpu>`` …; its poll takes the newest
reading the shared ``NodeReceiver`` accepted from it. A node silent for ``SILENT_INTERVALS`` send
intervals fails its poll (its GPUs are missing, never zero, and ``status`` names them); its next
datagram makes it healthy again: nothing to restart on either side.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence

from agent.node.config import NodeLinkSection, NodeSection
from agent.node.receiver import NodePeer, NodeReceiver
from drivers.base import PollResult

# A node is missing after 3 send intervals without an accepted datagram: one or two lost UDP
# datagrams (normal on a busy network) never mark it missing, a stopped node shows within 3 s.
SILENT_INTERVALS = 3.0
# The first poll waits for the node's first datagram up to just over one send interval, so that a
# running node is heard at once (`rackwatt poll --once`, the agent's start) instead of reported as
# "no datagram yet" until the next poll.
FIRST_WAIT_INTERVALS = 1.2


class NodeSourceDriver:
    """One node's GPUs, from the shared receiver; ``poll`` never raises and does no network I/O
    beyond binding the shared socket the first time."""

    def __init__(self, section: NodeSection, first_gpu: int, receiver: NodeReceiver) -> None:
        self.section = section
        self.device = f"node.{section.id}"
        self.interval_s = section.interval_s
        self.first_gpu = first_gpu
        self.receiver = receiver
        self.silent_after_s = SILENT_INTERVALS * section.interval_s
        self._first_poll = True
        receiver.users += 1

    @property
    def deadline_s(self) -> float:
        """Room for the first poll's wait; later polls only read memory."""
        return (FIRST_WAIT_INTERVALS + 0.3) * self.interval_s

    @property
    def gpu_range(self) -> str:
        return f"gpu.{self.first_gpu}..gpu.{self.first_gpu + self.section.gpu_count - 1}"

    @property
    def where(self) -> str:
        return f"node '{self.section.id}'"

    async def poll(self) -> PollResult:
        started = time.perf_counter()
        now = self.receiver.clock()
        peer = self.receiver.peers[self.section.id]
        error = await self.receiver.ensure_open()
        if error is None and self._first_poll and peer.last_accept_ts is None and peer.key is not None:
            with contextlib.suppress(TimeoutError):  # ends at the first datagram
                await asyncio.wait_for(peer.arrived.wait(), FIRST_WAIT_INTERVALS * self.interval_s)
            now = self.receiver.clock()
        self._first_poll = False
        error = error or self._unhealthy(peer, now)
        signals: dict[str, float] = {}
        estimated: frozenset[str] = frozenset()
        ts = now
        problems: list[str] = []
        if error is None:
            reading = peer.take()
            if reading is not None:
                ts = reading.read_ts + (peer.skew_s or 0.0)  # onto this host's clock
                problems = self._map(reading.gpus, signals)
                if not reading.gpus:  # the node is up but read none of its GPUs
                    error = (f"{self.where}: answers but sends none of its {self.section.gpu_count} GPUs "
                             f"({self.gpu_range} missing; NVML failing on the node? see its log)")
                if reading.energy_estimated:
                    estimated = frozenset(name for name in signals if name.endswith(".energy_j"))
        text = error or (f"{self.where}: " + "; ".join(problems) if problems else None)
        return PollResult(device=self.device, ts=ts, signals=signals, ok=error is None,
                          elapsed_ms=(time.perf_counter() - started) * 1000.0, profile="rackwatt node",
                          error=text, estimated=estimated)

    async def close(self) -> None:
        self.receiver.release()

    def _unhealthy(self, peer: NodePeer, now: float) -> str | None:
        """Why this node's GPUs are missing now, or None while it is healthy."""
        if peer.key_error:
            return f"{self.where}: {peer.key_error}"
        refused = f"; last refusal: {peer.last_refusal}" if peer.last_refusal else ""
        if peer.last_accept_ts is None:
            listening = self.receiver.bound or (self.receiver.link.address, self.receiver.link.port)
            return (f"{self.where}: no datagram accepted from it yet ({self.gpu_range} missing; is its agent "
                    f"running with [uplink] gateway and port = {listening[1]}?){refused}")
        silent_s = now - peer.last_accept_ts
        if silent_s > self.silent_after_s:
            return (f"{self.where} ({peer.last_addr}): silent for {silent_s:.0f} s: {self.gpu_range} "
                    f"missing{refused}")
        return None

    def _map(self, gpus: dict[int, dict[str, float]], signals: dict[str, float]) -> list[str]:
        """The node's GPU ordinals onto this node's rack-wide range; problems worth reporting."""
        problems: list[str] = []
        count = self.section.gpu_count
        for ordinal, values in sorted(gpus.items()):
            if ordinal >= count:
                problems.append(f"sends GPU {ordinal} but gpu_count = {count}; ignored")
                continue
            prefix = f"gpu.{self.first_gpu + ordinal}."
            signals.update({prefix + name: value for name, value in values.items()})
        if len(gpus) < count:
            problems.append(f"sends {len(gpus)} of {count} GPUs; the others are missing")
        return problems


def build_node_drivers(link: NodeLinkSection, nodes: Sequence[tuple[NodeSection, int]], *,
                       clock: Callable[[], float] = time.time) -> list[NodeSourceDriver]:
    """One driver per ``(node, first_gpu)``, all sharing one receiver."""
    receiver = NodeReceiver(link, [section for section, _ in nodes], clock=clock)
    return [NodeSourceDriver(section, first, receiver) for section, first in nodes]


def node_link_status(drivers: Sequence[object]) -> dict[str, object] | None:
    """The shared receiver's status, when one of ``drivers`` is a node source (for ``status``)."""
    for driver in drivers:
        if isinstance(driver, NodeSourceDriver):
            return driver.receiver.status()
    return None
