"""Messages the store cannot write (full disk), held in memory in ``seq`` order, bounded by bytes
(a full disk must not become exhausted memory); what does not fit is dropped by the store's own
priority, counted, and logged once per episode.
"""

from __future__ import annotations

import collections
import logging

from agent.live.envelope import Envelope, payload_json

log = logging.getLogger("rackwatt.store")

# 1 MiB is about a day of messages at the default summary interval (~1 KB every 2 min), small
# against the gateway's 1-4 GB.
HOLD_MAX_BYTES = 1 << 20


class MemoryHold:
    def __init__(self, max_bytes: int | None = None) -> None:
        self.max_bytes = HOLD_MAX_BYTES if max_bytes is None else max_bytes
        self._held: collections.OrderedDict[int, Envelope] = collections.OrderedDict()
        self.bytes = 0
        self.dropped = 0  # lost to a full disk, since the start
        self._loss_logged = False

    def add(self, env: Envelope) -> None:
        self._held[env.seq] = env
        self.bytes += len(payload_json(env.payload))
        while self.bytes > self.max_bytes and len(self._held) > 1:
            victim = min(self._held.values(), key=lambda e: (e.priority, e.seq))
            self.pop(victim.seq)
            self.dropped += 1
            if not self._loss_logged:
                self._loss_logged = True
                log.error(
                    "store: disk full and the memory hold (%d KiB) is full: dropping messages, "
                    "summaries and baselines first (seq %d is the first); every drop is counted in "
                    "status.spool.dropped_disk_full",
                    self.max_bytes // 1024,
                    victim.seq,
                )

    def pop(self, seq: int) -> Envelope | None:
        env = self._held.pop(seq, None)
        if env is not None:
            self.bytes -= len(payload_json(env.payload))
        return env

    def envelopes(self) -> list[Envelope]:
        return list(self._held.values())

    def __contains__(self, seq: int) -> bool:
        return seq in self._held

    def __len__(self) -> int:
        return len(self._held)

    def written(self) -> None:
        """Everything held reached the disk: the episode is over."""
        self._held.clear()
        self.bytes = 0
        self._loss_logged = False

    def lose_all(self) -> int:
        """Stopping with messages that never reached the disk: they are lost (counted)."""
        n = len(self._held)
        self.dropped += n
        self._held.clear()
        self.bytes = 0
        return n
