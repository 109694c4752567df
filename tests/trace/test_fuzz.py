"""Property tests: mutated copies of sample-trace.csv either read, identically to a plain reference
reader (csv splitting + float()), or raise TraceFormatError naming a line — never anything else."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.trace import reader as reader_module
from agent.trace.model import is_stage_label
from agent.trace.reader import TraceFormatError, open_trace

SAMPLE = (Path(__file__).resolve().parents[2] / "docs" / "spec" / "sample-trace.csv").read_bytes()
SHORT = b"\n".join(SAMPLE.split(b"\n")[:45]) + b"\n"  # metadata, header, 40 rows: fast examples
PIECES = [
    b",",
    b"\n",
    b"\r\n",
    b".",
    b"-",
    b"e",
    b"nan",
    b"#",
    b"=",
    b" ",
    b"\r",
    b"\xff",
    b"\xc3\xa9",
    b"0",
    b"9",
    b"1e999",
    b"inf",
    b"idle",
    b"Idle",
    b"ts",
    b",,",
    b"1_0",
    b'"',
    b"x",
    "\ufeff".encode(),
]


def _mutate(data: bytes, draw: st.DataObject) -> bytes:
    for _ in range(draw.draw(st.integers(1, 3))):
        kind = draw.draw(st.sampled_from(["replace", "insert", "delete", "duplicate_line", "swap_lines"]))
        start = draw.draw(st.integers(0, len(data)))
        end = min(len(data), start + draw.draw(st.integers(0, 12)))
        if kind in ("replace", "insert"):
            piece = draw.draw(st.one_of(st.sampled_from(PIECES), st.binary(max_size=4)))
            data = data[:start] + piece + data[end if kind == "replace" else start :]
        elif kind == "delete":
            data = data[:start] + data[end:]
        else:
            lines = data.split(b"\n")
            i, j = draw.draw(st.integers(0, len(lines) - 1)), draw.draw(st.integers(0, len(lines) - 1))
            if kind == "swap_lines":
                lines[i], lines[j] = lines[j], lines[i]
            else:
                lines.insert(j, lines[i])
            data = b"\n".join(lines)
    return data


def _number(cell: bytes) -> float | None:
    try:
        text = cell.decode("ascii")
    except UnicodeDecodeError:
        return None
    if "_" in text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _reference(raw: bytes, columns: list[str], data_line: int) -> list[list[object]] | int:
    """Rows as lists (str for stage/job, float otherwise), or the line number of the first problem."""
    lines = raw.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    ts_at = columns.index("ts")
    last = -math.inf
    rows: list[list[object]] = []
    for offset, line in enumerate(lines[data_line - 1 :]):
        line_no = data_line + offset
        if line.endswith(b"\r"):
            line = line[:-1]
        cells = line.split(b",")
        if len(cells) != len(columns):
            return line_no
        row: list[object] = []
        for name, cell in zip(columns, cells, strict=True):
            if name in ("stage", "job"):
                try:
                    text = cell.decode("utf-8")
                except UnicodeDecodeError:
                    return line_no
                if name == "stage" and text and not is_stage_label(text):
                    return line_no
                row.append(text)
            else:
                value = math.nan if cell == b"" else _number(cell)
                if value is None:
                    return line_no
                row.append(value)
        ts = row[ts_at]
        assert isinstance(ts, float)
        if math.isnan(ts) or ts <= last:
            return line_no
        last = ts
        rows.append(row)
    return rows


def _check(raw: bytes, chunk_rows: int, block_rows: int = 4096) -> None:
    saved = reader_module.PARSE_BLOCK_ROWS
    reader_module.PARSE_BLOCK_ROWS = block_rows  # small blocks: exercise block boundaries inside a chunk
    try:
        _check_with(raw, chunk_rows)
    finally:
        reader_module.PARSE_BLOCK_ROWS = saved


def _check_with(raw: bytes, chunk_rows: int) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.csv"
        path.write_bytes(raw)
        line_count = raw.count(b"\n") + 1
        try:
            reader = open_trace(path, chunk_rows=chunk_rows)
        except TraceFormatError as exc:
            assert 1 <= exc.line <= line_count and exc.reason
            return
        expected = _reference(raw, reader.columns, reader.data_line)
        try:
            chunks = list(reader)
        except TraceFormatError as exc:
            assert exc.line == expected, f"reader: line {exc.line}: {exc.reason}; reference: {expected}"
            return
        assert not isinstance(expected, int), f"reader accepted, reference rejects line {expected}"
        assert sum(len(c) for c in chunks) == len(expected)
        for j, name in enumerate(reader.columns):
            if name in ("stage", "job"):
                got = [label for c in chunks for label in getattr(c, name).tolist()]
                assert got == [row[j] for row in expected], name
            else:
                values = np.concatenate([c.ts if name == "ts" else c.numeric[name] for c in chunks])
                want = np.array([row[j] for row in expected], dtype=np.float64)
                assert np.array_equal(values, want, equal_nan=True), name


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), chunk_rows=st.sampled_from([1, 3, 16, 65536]))
def test_mutated_sample_reads_like_the_reference_or_names_a_line(
    data: st.DataObject, chunk_rows: int
) -> None:
    _check(_mutate(SHORT, data), chunk_rows)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_full_sample(data: st.DataObject) -> None:
    _check(_mutate(SAMPLE, data), 64)


def test_unmutated_sample_agrees_with_the_reference() -> None:
    _check(SAMPLE, 50)
