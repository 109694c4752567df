"""Live frames: one trace row per tick, batched into ``TraceChunk``s for the engine.

A row holds only what was sampled since the previous tick (NaN = not sampled, never a stale copy:
holding is the engine's job, docs/spec/trace-format.md). Batches, because ``Engine.process`` costs
milliseconds per call: the loop hands it a chunk every ``batch_s`` (one 15 s engine bin); the
engine looks 30 s ahead anyway, so nothing is published later.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from agent.trace.model import TraceChunk


@dataclass(frozen=True)
class Row:
    ts: float
    signals: dict[str, float]
    stage: str  # "" = no current hint (the engine infers the stage)
    job: str
    work_rate: float


class FrameBuilder:
    """Remembers every signal name seen (the columns) and buffers rows until taken as a chunk."""

    def __init__(self) -> None:
        self.columns: dict[str, None] = {}  # insertion-ordered set of numeric signal names
        self._rows: list[Row] = []

    def add(self, row: Row) -> None:
        self.columns.update(dict.fromkeys(row.signals))  # a name seen before keeps its place
        self._rows.append(row)

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def first_ts(self) -> float:
        return self._rows[0].ts if self._rows else math.nan

    def take_chunk(self) -> TraceChunk:
        """All buffered rows as one chunk (the buffer is emptied)."""
        rows, self._rows = self._rows, []
        return self.chunk(rows)

    def chunk(self, rows: list[Row]) -> TraceChunk:
        n = len(rows)
        numeric = {name: np.full(n, np.nan) for name in self.columns}
        for i, row in enumerate(rows):
            for name, value in row.signals.items():
                numeric[name][i] = value
        numeric["work_rate"] = np.array([r.work_rate for r in rows], dtype=np.float64)
        return TraceChunk(ts=np.array([r.ts for r in rows], dtype=np.float64), numeric=numeric,
                          stage=np.array([r.stage for r in rows], dtype=object),
                          job=np.array([r.job for r in rows], dtype=object))
