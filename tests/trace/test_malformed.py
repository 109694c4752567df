"""Every kind of malformed trace is rejected with the file line and the reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.trace.reader import TraceFormatError, open_trace

HEAD = "# rack=r1\nts,stage,job,gpu.0.power_w,pdu.a.power_w\n"  # data starts on line 3
CASES = [
    # (name, file text, chunk_rows, line, reason)
    (
        "bad number",
        HEAD + "1,idle,j,100,\n2,idle,j,1O0,\n",
        100,
        4,
        "bad number '1O0' in column gpu.0.power_w",
    ),
    ("two dots", HEAD + "1,idle,j,1.0.0,\n", 100, 3, "bad number '1.0.0' in column gpu.0.power_w"),
    ("underscore", HEAD + "1,idle,j,1_000,\n", 100, 3, "bad number '1_000' in column gpu.0.power_w"),
    ("quoted cell", HEAD + '1,idle,j,"5",\n', 100, 3, "bad number '\"5\"' in column gpu.0.power_w"),
    (
        "too few fields",
        HEAD + "1,idle,j,100,\n2,idle,j,100\n",
        100,
        4,
        "wrong field count: expected 5 fields, got 4",
    ),
    ("too many fields", HEAD + "1,idle,j,100,,\n", 100, 3, "wrong field count: expected 5 fields, got 6"),
    ("empty line", HEAD + "1,idle,j,100,\n\n2,idle,j,100,\n", 100, 4, "empty line (expected 5 fields)"),
    (
        "ts repeats",
        HEAD + "1,idle,j,1,\n2,idle,j,1,\n2,idle,j,1,\n",
        100,
        5,
        "ts not increasing: 2 after 2 (ts must strictly increase)",
    ),
    (
        "ts goes back across chunks",
        HEAD + "1,idle,j,1,\n5,idle,j,1,\n4,idle,j,1,\n",
        2,
        5,
        "ts not increasing: 4 after 5 (ts must strictly increase)",
    ),
    ("ts empty", HEAD + "1,idle,j,1,\n,idle,j,1,\n", 100, 4, "ts is empty or nan (every row needs a ts)"),
    ("ts nan", HEAD + "nan,idle,j,1,\n", 100, 3, "ts is empty or nan (every row needs a ts)"),
    (
        "bad stage label",
        HEAD + "1,idle,j,1,\n2,Forward,j,1,\n",
        100,
        4,
        "bad stage label 'Forward': must match [a-z][a-z0-9_]*, at most 64 characters",
    ),
    (
        "stage with space",
        HEAD + "1,grad sync,j,1,\n",
        100,
        3,
        "bad stage label 'grad sync': must match [a-z][a-z0-9_]*, at most 64 characters",
    ),
    (
        "earliest problem wins",
        HEAD + "1,idle,j,1,\n2,idle,j,x,\n3,idle,j\n",
        100,
        4,
        "bad number 'x' in column gpu.0.power_w",
    ),
    (
        "missing ts column",
        "# rack=r1\nstage,gpu.0.power_w\nidle,1\n",
        100,
        2,
        "header: no ts column (header starts 'stage,gpu.0.power_w')",
    ),
    ("duplicate column", "ts,a,b,a\n1,2,3,4\n", 100, 1, "header: duplicate column 'a'"),
    ("empty column name", "ts,,b\n1,2,3\n", 100, 1, "header: column 2 has no name"),
    ("no header", "# rack=r1\n# site=s\n", 100, 3, "no header line (expected a line starting with ts)"),
    ("empty file", "", 100, 1, "no header line (expected a line starting with ts)"),
    (
        "share out of range",
        "# crac.1.share=1.5\nts\n1\n",
        100,
        1,
        "bad metadata value: crac.1.share must be a number in (0, 1], got '1.5'",
    ),
    (
        "share not a number",
        "# rack=r\n# crac.1.share=half\nts\n1\n",
        100,
        2,
        "bad metadata value: crac.1.share must be a number in (0, 1], got 'half'",
    ),
    (
        "bad crac id",
        "# crac.East.share=0.5\nts\n",
        100,
        1,
        "bad metadata key 'crac.East.share': crac id must match [a-z0-9_]+",
    ),
    (
        "interval zero",
        "# interval_s=0\nts\n",
        100,
        1,
        "bad metadata value: interval_s must be a number > 0, got '0'",
    ),
    ("empty rack", "# rack=\nts\n", 100, 1, "bad metadata value: rack is empty"),
    ("metadata without key", "# =5\nts\n", 100, 1, "bad metadata line: no key before '=' in '=5'"),
]


@pytest.mark.parametrize(
    ("text", "chunk_rows", "line", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_malformed_trace(tmp_path: Path, text: str, chunk_rows: int, line: int, reason: str) -> None:
    path = tmp_path / "trace.csv"
    path.write_text(text)
    with pytest.raises(TraceFormatError) as info:
        list(open_trace(path, chunk_rows=chunk_rows))
    assert (info.value.line, info.value.reason) == (line, reason)
    assert str(info.value) == f"{path}: line {line}: {reason}"


def test_non_utf8_job_label(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(b"ts,job\n1,ok\n2,caf\xe9\n")
    with pytest.raises(TraceFormatError) as info:
        list(open_trace(path))
    assert (info.value.line, info.value.reason) == (3, "job: not UTF-8 text")


def test_non_utf8_header(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_bytes(b"# rack=r\nts,\xff\n")
    with pytest.raises(TraceFormatError) as info:
        open_trace(path)
    assert (info.value.line, info.value.reason) == (2, "not UTF-8 text")
