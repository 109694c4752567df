"""Streaming trace reader (``docs/spec/trace-format.md``, whose rules it enforces): CSV → ``TraceChunk``s.

``open_trace(path)`` reads the metadata and header at once (a bad header fails early); iterating
yields chunks of ``chunk_rows`` rows, parsed in bulk (``agent.trace.cells``), and re-reads the file
on each iteration. A violation raises ``TraceFormatError`` naming the file line. With
``strict=False`` rows whose ``ts`` does not increase are passed on: the engine's ``RowTimes`` drops
and counts them, so one logger hiccup does not cost the whole replay. ``skip`` names numeric
columns whose cells are not converted (their rows are still counted field by field): the replay
skips those the engine never reads, a third of a GPU rack's cells.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import BinaryIO

import numpy as np

from agent.trace.cells import classify, delimiters, parse_table
from agent.trace.model import STAGE_LABEL_RULE, TEXT_COLUMNS, TraceChunk, TraceMeta, is_stage_label

_CRAC_SHARE = re.compile(r"crac\.([^.]*)\.share")
_CRAC_ID = re.compile(r"[a-z0-9_]+")
PARSE_BLOCK_ROWS = 4096  # rows parsed at once: cache-sized temporaries (measured faster than whole chunks)


class TraceFormatError(ValueError):
    """A malformed trace: ``line`` is the 1-based file line, ``reason`` says what is wrong."""

    def __init__(self, path: Path | str, line: int, reason: str) -> None:
        self.path = Path(path)
        self.line = line
        self.reason = reason
        super().__init__(f"{self.path}: line {line}: {reason}")


class TraceReader:
    """A reader over ``path``: ``.meta``, ``.columns``, and iteration yielding ``TraceChunk``s."""

    def __init__(
        self, path: Path | str, chunk_rows: int = 65536, strict: bool = True,
        skip: Callable[[str], bool] | None = None,
    ) -> None:
        if chunk_rows < 1:
            raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
        self.path = Path(path)
        self.strict = strict  # False: rows whose ts does not increase are passed on, not refused
        self.chunk_rows = chunk_rows
        self.meta = TraceMeta()
        self.columns: list[str] = []
        self.data_line = 0  # file line number of the first data row
        self.position = 0  # bytes of the file read so far (replay's progress: percent and time left)
        try:
            with open(self.path, "rb") as stream:
                self._data_offset, self.data_line = self._read_head(stream)
        except OSError as exc:
            raise TraceFormatError(self.path, 0, f"cannot read: {exc.strerror or exc}") from None
        self._text_index = {name: i for i, name in enumerate(self.columns) if name in TEXT_COLUMNS}
        # the columns whose cells are converted ("ts" among them), in file order; each name's row
        # in a chunk's (parsed columns × rows) array
        self._parsed = np.array([
            i for i, name in enumerate(self.columns)
            if name not in TEXT_COLUMNS and (name == "ts" or skip is None or not skip(name))
        ], dtype=np.int64)
        parsed_names = [self.columns[i] for i in self._parsed.tolist()]
        self._ts_index = parsed_names.index("ts")
        self._numeric_index = {name: k for k, name in enumerate(parsed_names) if name != "ts"}

    # -- head ------------------------------------------------------------------------------
    def _read_head(self, stream: BinaryIO) -> tuple[int, int]:
        """Parse metadata lines and the header; return (byte offset, line number) of the first row."""
        line_no = 0
        while True:
            raw = stream.readline()
            line_no += 1
            if not raw:
                raise TraceFormatError(
                    self.path, line_no, "no header line (expected a line starting with ts)"
                )
            if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise TraceFormatError(self.path, line_no, "not UTF-8 text") from None
            if not text:
                continue
            if text.startswith("#"):
                self._metadata(text[1:].strip(), line_no)
                continue
            self._header(text, line_no)
            return stream.tell(), line_no + 1

    def _metadata(self, body: str, line_no: int) -> None:
        if "=" not in body:
            return  # a plain comment
        key, value = (part.strip() for part in body.split("=", 1))

        def bad(reason: str) -> TraceFormatError:
            return TraceFormatError(self.path, line_no, f"bad metadata {reason}")

        if not key:
            raise bad(f"line: no key before '=' in {body!r}")
        share = _CRAC_SHARE.fullmatch(key)
        if key in ("rack", "site"):
            if not value:
                raise bad(f"value: {key} is empty")
            setattr(self.meta, key, value)
        elif share:
            if not _CRAC_ID.fullmatch(share.group(1)):
                raise bad(f"key {key!r}: crac id must match [a-z0-9_]+")
            number = _number(value)
            if number is None or not 0 < number <= 1:  # NaN fails this too
                raise bad(f"value: {key} must be a number in (0, 1], got {value!r}")
            self.meta.crac_shares[share.group(1)] = number
        elif key == "interval_s":
            number = _number(value)
            if number is None or not 0 < number < math.inf:
                raise bad(f"value: interval_s must be a number > 0, got {value!r}")
            self.meta.interval_s = number
        else:
            self.meta.extra[key] = value

    def _header(self, text: str, line_no: int) -> None:
        names = [name.strip() for name in text.split(",")]
        seen: set[str] = set()
        for position, name in enumerate(names, start=1):
            if not name:
                raise TraceFormatError(self.path, line_no, f"header: column {position} has no name")
            if name in seen:
                raise TraceFormatError(self.path, line_no, f"header: duplicate column {name!r}")
            seen.add(name)
        if "ts" not in seen:
            raise TraceFormatError(self.path, line_no, f"header: no ts column (header starts {text[:60]!r})")
        self.columns = names

    # -- data ------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[TraceChunk]:
        last_ts = -math.inf
        line_no = self.data_line
        try:
            stream = open(self.path, "rb")  # noqa: SIM115 - closed in finally, also when the caller stops early
        except OSError as exc:
            raise TraceFormatError(self.path, line_no, f"cannot read: {exc.strerror or exc}") from None
        try:
            stream.seek(self._data_offset)
            self.position = self._data_offset
            while True:
                lines = list(islice(stream, self.chunk_rows))
                if not lines:
                    return
                self.position += sum(map(len, lines))
                chunk = self._parse_lines(lines, line_no, last_ts)
                line_no += len(lines)
                last_ts = float(chunk.ts[-1])
                yield chunk
        finally:
            stream.close()

    def _parse_lines(self, lines: list[bytes], first_line: int, last_ts: float) -> TraceChunk:
        """One chunk, parsed in blocks of ``PARSE_BLOCK_ROWS`` lines (temporaries stay cache-sized)."""
        rows = len(lines)
        columns = np.empty((len(self._parsed), rows))
        texts: dict[str, list[np.ndarray]] = {name: [] for name in self._text_index}
        for lo in range(0, rows, PARSE_BLOCK_ROWS):
            hi = min(rows, lo + PARSE_BLOCK_ROWS)
            block_texts = self._parse_block(
                b"".join(lines[lo:hi]), hi - lo, first_line + lo, last_ts, columns[:, lo:hi]
            )
            for name, labels in block_texts.items():
                texts[name].append(labels)
            last_ts = float(columns[self._ts_index, hi - 1])
        empty = np.full(rows, "", dtype=object)
        joined = {name: np.concatenate(p) if len(p) > 1 else p[0] for name, p in texts.items()}
        return TraceChunk(
            ts=columns[self._ts_index],
            numeric={name: columns[j] for name, j in self._numeric_index.items()},
            stage=joined.get("stage", empty),
            job=joined.get("job", empty.copy()),
            first_line=first_line,
        )

    def _parse_block(
        self, block: bytes, rows: int, first_line: int, last_ts: float, into: np.ndarray
    ) -> dict[str, np.ndarray]:
        """Parse complete lines into ``into`` (columns × rows); return the text columns.

        On several problems the one on the earliest line is reported.
        """
        if not block.endswith(b"\n"):
            block += b"\n"
        if b"\r" in block:
            block = block.replace(b"\r\n", b"\n")
        ncols = len(self.columns)
        classes = classify(block)
        ends = delimiters(classes)
        starts = np.concatenate(([0], ends[:-1] + 1))
        lengths = ends - starts
        self._check_field_counts(block, ends, ncols, first_line, last_ts)
        lengths_2d = lengths.reshape(rows, ncols)
        starts_2d = starts.reshape(rows, ncols)
        problems: list[tuple[int, str]] = []  # (row, reason); the smallest row is raised
        texts: dict[str, np.ndarray] = {}
        for name, j in self._text_index.items():
            column, problem = self._text_column(block, starts_2d[:, j], lengths_2d[:, j], name)
            texts[name] = column
            if problem:
                problems.append(problem)
        starts_2d = np.take(starts_2d, self._parsed, axis=1)  # the parsed columns' cells
        lengths_2d = np.take(lengths_2d, self._parsed, axis=1)
        table, fallback = parse_table(classes, starts_2d.ravel(), lengths_2d.ravel(), len(self._parsed))
        if fallback.any():
            problem = self._fallback(block, starts_2d.ravel(), lengths_2d.ravel(), table, fallback)
            if problem:
                problems.append(problem)
        ts = table[self._ts_index]
        checked_rows = min([row for row, _ in problems], default=rows)  # ts after a bad cell is unknown
        problem = self._ts_problem(ts[:checked_rows], last_ts)
        if problem:
            problems.append(problem)
        if problems:
            row, reason = min(problems, key=lambda p: p[0])
            raise TraceFormatError(self.path, first_line + row, reason)
        into[...] = table
        return texts

    def _check_field_counts(
        self, block: bytes, ends: np.ndarray, ncols: int, first_line: int, last_ts: float
    ) -> None:
        line_ends = np.flatnonzero(np.frombuffer(block, dtype=np.uint8)[ends] == ord("\n"))
        counts = np.diff(line_ends, prepend=-1)
        wrong = np.flatnonzero(counts != ncols)
        if not wrong.size:
            return
        row = int(wrong[0])
        got = int(counts[row])
        line_start = int(ends[line_ends[row - 1]]) + 1 if row else 0
        if row:  # the rows before are well formed: a problem there comes first
            before = np.empty((len(self._parsed), row))
            self._parse_block(block[:line_start], row, first_line, last_ts, before)
        if got == 1 and block[line_start : line_start + 1] == b"\n":
            reason = f"empty line (expected {ncols} fields)"
        else:
            reason = f"wrong field count: expected {ncols} fields, got {got}"
        raise TraceFormatError(self.path, first_line + row, reason)

    def _text_column(
        self, block: bytes, starts: np.ndarray, lengths: np.ndarray, name: str
    ) -> tuple[np.ndarray, tuple[int, str] | None]:
        """The labels of a text column, and the first problem (row, reason) if any."""
        cells = [block[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)]
        problem = None
        try:
            labels = [cell.decode("utf-8") for cell in cells]
        except UnicodeDecodeError:
            labels = [cell.decode("utf-8", errors="replace") for cell in cells]
            # the first cell the replacement changed (a valid one encodes back to itself)
            row = next(i for i, cell in enumerate(cells) if labels[i].encode("utf-8") != cell)
            problem = (row, f"{name}: not UTF-8 text")
        if name == "stage":
            bad = {label for label in set(labels) if label and not is_stage_label(label)}
            if bad:
                row = next(i for i, label in enumerate(labels) if label in bad)
                if problem is None or row < problem[0]:
                    problem = (row, f"bad stage label {labels[row][:80]!r}: must {STAGE_LABEL_RULE}")
        out = np.empty(len(labels), dtype=object)
        out[:] = labels
        return out, problem

    def _fallback(
        self, block: bytes, starts: np.ndarray, lengths: np.ndarray, table: np.ndarray, fallback: np.ndarray,
    ) -> tuple[int, str] | None:
        """Convert the cells the bulk parser left alone (``nan``, exponents); the first bad one.

        ``starts``, ``lengths`` and ``fallback`` are in cell order (row by row over the parsed
        columns); ``table`` is the block's (parsed columns × rows)."""
        cache: dict[bytes, float | None] = {}
        for index in np.flatnonzero(fallback).tolist():
            start = int(starts[index])
            cell = block[start : start + int(lengths[index])]
            if cell in cache:
                number = cache[cell]
            else:
                number = cache[cell] = _number(cell)
            row, k = divmod(index, len(self._parsed))
            if number is None:
                shown = cell.decode("utf-8", errors="replace")
                return row, f"bad number {shown!r} in column {self.columns[int(self._parsed[k])]}"
            table[k, row] = number
        return None

    def _ts_problem(self, ts: np.ndarray, last_ts: float) -> tuple[int, str] | None:
        """The first row whose ts is missing or (``strict``) not above the previous row's."""
        previous = np.concatenate(([last_ts], ts[:-1]))
        wrong = np.isnan(ts)
        if self.strict:
            wrong |= (ts <= previous) | np.isnan(previous)
        bad = np.flatnonzero(wrong)
        if not bad.size:
            return None
        row = int(bad[0])
        if math.isnan(ts[row]):
            return row, "ts is empty or nan (every row needs a ts)"
        return (
            row,
            f"ts not increasing: {ts[row]:.15g} after {previous[row]:.15g} (ts must strictly increase)",
        )


def _number(value: str | bytes) -> float | None:
    """A decimal number as the trace format allows it (``nan`` included), or None."""
    try:
        text = value.decode("ascii") if isinstance(value, bytes) else value
        return None if "_" in text else float(text)
    except ValueError:  # UnicodeDecodeError included
        return None


open_trace = TraceReader  # the entry point callers and docs name
