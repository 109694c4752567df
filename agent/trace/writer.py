"""Streaming trace CSV writer (``docs/spec/trace-format.md``), used by ``rackwatt sim`` and ``record``.

It writes the ``# key=value`` metadata lines, one header row, then each ``TraceChunk`` as it
comes, so nothing needs the whole trace in memory. NaN (and ±inf) cells are written empty
("not sampled"), never as zero. Numbers are rounded to a per-column resolution and written
compactly (``64.2`` not ``64.20000001``, ``700`` not ``700.0``).

Speed matters (a 3-day 16-GPU trace is ~30 M cells): each chunk is rounded with numpy, and each
row is formatted by one C-level ``%`` over a whole-row format string.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO

import numpy as np

from agent.trace.model import TEXT_COLUMNS, TraceChunk, TraceMeta

# Default resolution (decimal places) by column name suffix; the first match wins.
DEFAULT_DECIMALS: tuple[tuple[str, int], ...] = (
    (".energy_kwh", 3),
    (".energy_j", 3),
    (".power_w", 1),
    (".cooling_w", 0),
    (".temp_c", 1),
    ("_temp_c", 1),
    (".setpoint_c", 1),
    (".util_pct", 0),
    (".mem_util_pct", 0),
    (".fan_pct", 1),
    (".rh_pct", 1),
    (".sm_clock_mhz", 0),
    (".voltage_v", 1),
    (".current_a", 2),
    (".pf", 3),
    ("work_rate", 1),
)
FALLBACK_DECIMALS = 4
TS_DECIMALS = 3
_TEXT_FORBIDDEN = re.compile(r"[,\"\r\n]")
_META_KEY = re.compile(r"^[A-Za-z0-9_.\-]+$")


class TraceWriteError(ValueError):
    """A chunk or metadata that cannot be written as a valid trace (the message says which)."""


def decimals_for(column: str, overrides: Mapping[str, int] | None = None) -> int:
    """Resolution (decimal places) the writer uses for a numeric column."""
    if overrides and column in overrides:
        return overrides[column]
    for suffix, places in DEFAULT_DECIMALS:
        if column.endswith(suffix):
            return places
    return FALLBACK_DECIMALS


def meta_lines(meta: TraceMeta) -> list[str]:
    """The ``# key=value`` lines for a TraceMeta, in the spec's order."""
    lines = [f"# rack={meta.rack}", f"# site={meta.site}"]
    for crac_id, share in meta.crac_shares.items():
        lines.append(f"# crac.{crac_id}.share={share:g}")
    if meta.interval_s is not None:
        lines.append(f"# interval_s={meta.interval_s:g}")
    for key, value in meta.extra.items():
        if not _META_KEY.match(key) or "\n" in value:
            raise TraceWriteError(f"metadata key {key!r}: keys match [A-Za-z0-9_.-]+, values are one line")
        lines.append(f"# {key}={value}")
    return lines


class TraceWriter:
    """Write a trace CSV chunk by chunk.

    ``columns`` is the full header in order and must start with ``ts``; ``stage`` and ``job`` are
    taken from the chunk's text arrays, every other column from ``chunk.numeric`` (a column the
    chunk lacks is written empty). Use as a context manager or call ``close()``.
    """

    def __init__(
        self,
        path: str | Path,
        meta: TraceMeta,
        columns: Iterable[str],
        decimals: Mapping[str, int] | None = None,
        flush_interval_s: float | None = 5.0,
    ) -> None:
        self.path = Path(path)
        self.flush_interval_s = flush_interval_s  # live recording: at most this much is lost on a crash
        self._last_flush = time.monotonic()
        self.columns = list(columns)
        if not self.columns or self.columns[0] != "ts":
            raise TraceWriteError(f"{self.path}: the first column must be 'ts', got {self.columns[:1]}")
        if len(set(self.columns)) != len(self.columns):
            raise TraceWriteError(f"{self.path}: duplicate column names in {self.columns}")
        for name in self.columns:
            if not name or _TEXT_FORBIDDEN.search(name) or name != name.strip():
                raise TraceWriteError(f"{self.path}: bad column name {name!r}")
        self._numeric = [c for c in self.columns[1:] if c not in TEXT_COLUMNS]
        self._decimals = {c: decimals_for(c, decimals) for c in self._numeric}
        self._row_format = ",".join("%s" if c in TEXT_COLUMNS else "%.15g" for c in self.columns)
        self._last_ts = -math.inf
        self.rows_written = 0
        self._file: IO[str] | None = open(self.path, "w", encoding="utf-8", newline="\n")  # noqa: SIM115
        header = [*meta_lines(meta), ",".join(self.columns)]
        self._file.write("\n".join(header) + "\n")

    def write(self, chunk: TraceChunk) -> None:
        """Append a chunk's rows; ``ts`` must keep strictly increasing across chunks."""
        if self._file is None:
            raise TraceWriteError(f"{self.path}: write after close")
        n = len(chunk)
        if n == 0:
            return
        ts = np.round(np.asarray(chunk.ts, dtype=np.float64), TS_DECIMALS)
        if not np.all(np.isfinite(ts)):
            raise TraceWriteError(f"{self.path}: non-finite ts in chunk starting at row {self.rows_written}")
        if ts[0] <= self._last_ts or (n > 1 and np.any(np.diff(ts) <= 0)):
            bad = self.rows_written + (0 if ts[0] <= self._last_ts else int(np.argmax(np.diff(ts) <= 0)) + 1)
            raise TraceWriteError(f"{self.path}: ts not strictly increasing at data row {bad + 1}")
        cols: list[list[object]] = []
        text_has_nan = False
        for name in self.columns:
            if name == "ts":
                cols.append(ts.tolist())
            elif name in TEXT_COLUMNS:
                values = chunk.stage if name == "stage" else chunk.job
                labels = _check_text(values, name, self.path, n)
                text_has_nan = text_has_nan or any("nan" in label for label in labels)
                cols.append([str(v) for v in values.tolist()])
            else:
                cols.append(self._numeric_column(chunk, name, n).tolist())
        fmt = self._row_format
        if text_has_nan:  # rare: a label containing "nan"; blank NaN cells per numeric field instead
            lines = [",".join(_cell(v) for v in row) for row in zip(*cols, strict=True)]
            text = "\n".join(lines)
        else:
            text = "\n".join([fmt % row for row in zip(*cols, strict=True)]).replace("nan", "")
        self._file.write(text + "\n")
        self._last_ts = float(ts[-1])
        self.rows_written += n
        if self.flush_interval_s is not None and time.monotonic() - self._last_flush >= self.flush_interval_s:
            self.flush()

    def flush(self) -> None:
        """Push written rows to the operating system (the file stays open)."""
        if self._file is not None:
            self._file.flush()
        self._last_flush = time.monotonic()

    def _numeric_column(self, chunk: TraceChunk, name: str, n: int) -> np.ndarray:
        values = chunk.numeric.get(name)
        if values is None:
            return np.full(n, np.nan)
        arr = np.asarray(values, dtype=np.float64)
        if arr.shape != (n,):
            raise TraceWriteError(f"{self.path}: column {name!r} has shape {arr.shape}, expected ({n},)")
        out = np.round(arr, self._decimals[name])
        out[~np.isfinite(out)] = np.nan  # ±inf is not a measurement; positive NaN formats as "nan"
        out[out == 0] = 0.0  # no "-0"
        return out

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> TraceWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _check_text(values: np.ndarray, name: str, path: Path, n: int) -> set[str]:
    if len(values) != n:
        raise TraceWriteError(f"{path}: column {name!r} has {len(values)} rows, expected {n}")
    labels = {str(v) for v in set(values.tolist())}
    for label in labels:
        if _TEXT_FORBIDDEN.search(label):
            raise TraceWriteError(f"{path}: {name} label {label!r} contains a comma, quote or newline")
    return labels


def _cell(value: object) -> str:
    if isinstance(value, float):
        return "" if math.isnan(value) else f"{value:.15g}"
    return str(value)
