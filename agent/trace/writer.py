"""Streaming trace CSV writer (``docs/spec/trace-format.md``), used by ``rackwatt sim`` and ``record``.

NaN (and ±inf) cells are written empty ("not sampled"), never as zero; numbers are rounded to a
per-column resolution and written compactly (``64.2``, ``700``). Speed matters (a 3-day 16-GPU
trace is ~30 M cells): every column of a chunk becomes a fixed-width byte matrix (integer digit
arithmetic, pad bytes for leading/trailing zeros and empty cells), the matrices are stacked with
commas and newlines and the pad bytes dropped in one pass. Beyond 15 significant digits a column
is written with Python's shortest exact ``repr``.
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
    (".energy_kwh", 3), (".energy_j", 3), (".power_w", 1), (".cooling_w", 0),
    (".temp_c", 1), ("_temp_c", 1), (".setpoint_c", 1),
    (".util_pct", 0), (".mem_util_pct", 0), (".fan_pct", 1), (".rh_pct", 1), (".sm_clock_mhz", 0),
    (".voltage_v", 1), (".current_a", 2), (".pf", 3), ("work_rate", 1),
)
FALLBACK_DECIMALS = 4
TS_DECIMALS = 3
_TEXT_FORBIDDEN = re.compile(r"[,\"\r\n\x00]")
_FAST_LIMIT = 1e15  # scaled integers below this are formatted with numpy (15 significant digits)
_PAD = 0  # byte dropped when a formatted block is flattened
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
    """Write a trace CSV chunk by chunk: ``columns`` is the header, starting with ``ts``; a numeric column
    the chunk lacks is written empty. Use as a context manager or call ``close()``."""

    def __init__(
        self, path: str | Path, meta: TraceMeta, columns: Iterable[str],
        decimals: Mapping[str, int] | None = None, flush_interval_s: float | None = 5.0,
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
        self._decimals = {c: decimals_for(c, decimals) for c in self.columns[1:] if c not in TEXT_COLUMNS}
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
        self._file.write(self._format(chunk, ts, n))
        self._last_ts = float(ts[-1])
        self.rows_written += n
        if self.flush_interval_s is not None and time.monotonic() - self._last_flush >= self.flush_interval_s:
            self.flush()

    def _format(self, chunk: TraceChunk, ts: np.ndarray, n: int) -> str:
        """All rows of a chunk as text, built column-wise as byte matrices."""
        comma = np.full((n, 1), ord(","), dtype=np.uint8)
        blocks: list[np.ndarray] = []
        for name in self.columns:
            if blocks:
                blocks.append(comma)
            if name == "ts":
                block = _column_block(ts, TS_DECIMALS)
            elif name in TEXT_COLUMNS:
                values = chunk.stage if name == "stage" else chunk.job
                _check_text(values, name, self.path, n)
                block = _strings_block([str(v) for v in values.tolist()])  # NUL-padded on the right
            else:
                values = self._numeric_column(chunk, name, n)
                block = _column_block(values, self._decimals[name])
            blocks.append(block)
        blocks.append(np.full((n, 1), ord("\n"), dtype=np.uint8))
        flat = np.hstack(blocks).ravel()
        text: str = flat[flat != _PAD].tobytes().decode("utf-8")
        return text

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
        with np.errstate(over="ignore", invalid="ignore"):  # overflow → inf → empty below
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


def _check_text(values: np.ndarray, name: str, path: Path, n: int) -> None:
    if len(values) != n:
        raise TraceWriteError(f"{path}: column {name!r} has {len(values)} rows, expected {n}")
    for label in {str(v) for v in set(values.tolist())}:
        if _TEXT_FORBIDDEN.search(label):
            raise TraceWriteError(f"{path}: {name} label {label!r} contains a comma, quote or newline")


def _column_block(values: np.ndarray, places: int) -> np.ndarray:
    block = _number_block(values, places)
    if block is None:  # beyond 15 significant digits: Python's shortest exact repr (``1e+16``), NaN empty
        return _strings_block(["" if math.isnan(v) else repr(v).removesuffix(".0") for v in values.tolist()])
    return block


def _strings_block(cells: list[str]) -> np.ndarray:
    encoded = [cell.encode("utf-8") for cell in cells]
    width = max(1, max(len(e) for e in encoded))
    return np.array(encoded, dtype=f"S{width}").view(np.uint8).reshape(len(encoded), width)


def _number_block(values: np.ndarray, places: int) -> np.ndarray | None:
    """Rounded values as an (n, width) byte matrix (sign, digits, point, fraction) whose leading zeros,
    trailing fraction zeros, bare point and NaN cells are pad bytes (``700.0`` → ``700``, NaN → empty);
    None when a value has more than 15 significant digits at this resolution."""
    d = max(places, 0)
    finite = np.isfinite(values)
    magnitude = np.rint(np.abs(np.where(finite, values, 0.0)) * 10.0**d)
    if magnitude.size and float(magnitude.max()) >= _FAST_LIMIT:
        return None
    a = magnitude.astype(np.int64)
    negative = finite & (values < 0) & (a > 0)
    ndigits = max(len(str(int(a.max()))) if a.size else 1, d + 1)
    position = np.arange(ndigits - 1, -1, -1, dtype=np.int64)  # decimal position of each column
    power = 10**position
    chars = ((a[:, None] // power[None, :]) % 10 + ord("0")).astype(np.uint8)
    chars[(position[None, :] > d) & (a[:, None] < power[None, :])] = _PAD  # leading zeros
    if d > 0:
        chars[(position[None, :] < d) & (a[:, None] % (power * 10)[None, :] == 0)] = _PAD  # trailing zeros
        point = np.where(a % 10**d == 0, _PAD, ord(".")).astype(np.uint8)[:, None]
        chars = np.hstack([chars[:, : ndigits - d], point, chars[:, ndigits - d :]])
    sign = np.where(negative, ord("-"), _PAD).astype(np.uint8)[:, None]
    block = np.hstack([sign, chars])
    block[~finite] = _PAD
    return block
