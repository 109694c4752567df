"""``RowTimes``: which rows may enter the engine, judged by their timestamp alone.

A row is refused and counted when its ``ts`` is not finite, is before ``TS_FLOOR_S`` or more than
``MAX_AHEAD_S`` ahead of the wall clock (a clock never set, a garbled cell), or is not later than
every row already admitted (duplicated, out of order, a clock stepped back). The first refused file
lines of each kind are kept for the log. Long gaps between admitted rows are ``RowBinner``'s.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from agent.trace.model import TraceChunk

# 2000-01-02 00:00 UTC. A clock never set reads 1970-01-01 or 2000-01-01 (the reset value of the
# battery-less RTCs on gateway boards); a day of margin refuses a board that ran for hours on it
# before NTP answered. No real measurement is older.
TS_FLOOR_S = 946771200.0
# A row from the future is a wrong clock; a day of margin covers a recording host that ran ahead or
# wrote local time instead of UTC (offsets reach +14 h).
MAX_AHEAD_S = 86400.0
FIRST_LINES_KEPT = 10  # file lines named in the log per kind of refusal (fixed memory)


class RowTimes:
    """Admits rows whose timestamps are sane and move forward; counts and locates the others."""

    def __init__(self, wall_clock: Callable[[], float] = time.time) -> None:
        self.wall_clock = wall_clock
        self.bad_ts_rows = 0  # not finite, before the floor, or far in the future
        self.out_of_order_rows = 0  # not later than a row already admitted
        self.bad_ts_lines: list[int] = []  # the first few file lines (replay; live rows have none)
        self.out_of_order_lines: list[int] = []

    def admit(self, chunk: TraceChunk, last_ts: float) -> TraceChunk:
        """The rows of ``chunk`` that may enter, given the last admitted row's ``last_ts`` (NaN: none)."""
        if not len(chunk):
            return chunk
        ts = chunk.ts
        with np.errstate(invalid="ignore"):
            sane = np.isfinite(ts) & (ts >= TS_FLOOR_S) & (ts <= self.wall_clock() + MAX_AHEAD_S)
        self.bad_ts_rows += self._note(~sane, chunk.first_line, self.bad_ts_lines)
        start = -math.inf if math.isnan(last_ts) else last_ts
        prior = np.maximum.accumulate(np.concatenate(([start], np.where(sane, ts, -math.inf))))
        forward = ~sane | (ts > prior[:-1])
        self.out_of_order_rows += self._note(~forward, chunk.first_line, self.out_of_order_lines)
        keep = sane & forward
        return chunk if keep.all() else chunk.take(keep)

    @staticmethod
    def _note(refused: np.ndarray, first_line: int, lines: list[int]) -> int:
        """Count refused rows; remember the first few file lines (a chunk's rows are consecutive lines)."""
        n = int(refused.sum())
        if n and first_line > 0 and len(lines) < FIRST_LINES_KEPT:
            idx = np.flatnonzero(refused)[: FIRST_LINES_KEPT - len(lines)]
            lines.extend(int(first_line + i) for i in idx)
        return n

    def state(self) -> dict[str, object]:
        return {"bad_ts_rows": self.bad_ts_rows, "out_of_order_rows": self.out_of_order_rows,
                "bad_ts_lines": list(self.bad_ts_lines), "out_of_order_lines": list(self.out_of_order_lines)}

    def load(self, state: dict[str, object]) -> None:
        def count(key: str) -> int:
            value = state.get(key, 0)
            return int(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0

        def lines(key: str) -> list[int]:
            value = state.get(key)
            items = value if isinstance(value, list) else []
            return [int(v) for v in items if isinstance(v, int)][:FIRST_LINES_KEPT]

        self.bad_ts_rows, self.out_of_order_rows = count("bad_ts_rows"), count("out_of_order_rows")
        self.bad_ts_lines, self.out_of_order_lines = lines("bad_ts_lines"), lines("out_of_order_lines")
