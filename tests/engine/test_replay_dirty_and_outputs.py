"""``rackwatt replay`` over a dirty trace (duplicated and reordered rows), and its outputs onto
special files: ``-``, a FIFO, ``/dev/null`` stay what they are; regular files are replaced whole."""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path
from typing import Any

import pytest
import synth

from agent.cli import main
from agent.engine.output_file import open_text_output, write_output

pytest.importorskip("agent.trace.reader")


@pytest.fixture(scope="module")
def clean_lines(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    from agent.trace.writer import TraceWriter

    chunks = synth.chunks(3 / 24, seed=12, chunk_rows=3000)
    path = tmp_path_factory.mktemp("dirty") / "clean.csv"
    with TraceWriter(path, synth.meta(), ["ts", "stage", "job", *chunks[0].numeric]) as writer:
        for c in chunks:
            writer.write(c)
    return path.read_text().splitlines(keepends=True)


def _data_start(lines: list[str]) -> int:
    return next(i for i, line in enumerate(lines) if line.startswith("ts,")) + 1


@pytest.fixture(scope="module")
def dirty(clean_lines: list[str], tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[int]]:
    """The clean trace with one row duplicated and two rows swapped; the file lines to be skipped."""
    lines = list(clean_lines)
    d = _data_start(lines)
    lines.insert(d + 1000, lines[d + 999])  # a logger wrote row 999 twice: file line d+1001 repeats it
    lines[d + 3000], lines[d + 3001] = lines[d + 3001], lines[d + 3000]  # the later row came first
    path = tmp_path_factory.mktemp("dirty") / "dirty.csv"
    path.write_text("".join(lines))
    return path, [d + 1000 + 1, d + 3001 + 1]  # 1-based file lines of the rows that are not later


def _summary(report: Path) -> dict[str, Any]:
    records = [json.loads(line) for line in report.read_text().splitlines()]
    return next(r for r in reversed(records) if r["type"] == "summary")["payload"]


def test_a_dirty_trace_replays_and_says_which_rows_it_skipped(
    dirty: tuple[Path, list[int]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, skipped = dirty
    report, page = tmp_path / "r.jsonl", tmp_path / "r.html"
    assert main(["replay", str(path), "--report", str(report), "--html", str(page)]) == 0
    err = capsys.readouterr().err
    assert "2 rows were not later than the row before them" in err
    assert f"(lines {skipped[0]}, {skipped[1]})" in err, err
    assert _summary(report)["hygiene"]["out_of_order_rows"] == 2
    html = page.read_text()
    inline = html.split('id="rackwatt-data" type="application/json">', 1)[1]
    data = json.loads(inline.split("</script>", 1)[0])
    assert data["input"]["out_of_order_rows"] == 2


def test_strict_refuses_the_dirty_trace_naming_the_line(
    dirty: tuple[Path, list[int]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, skipped = dirty
    report = tmp_path / "r.jsonl"
    assert main(["replay", str(path), "--report", str(report), "--strict"]) == 1
    assert f"line {skipped[0]}: ts not increasing" in capsys.readouterr().err
    assert not report.exists()  # no half report left behind


def test_report_to_stdout(dirty: tuple[Path, list[int]], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(dirty[0]), "--report", "-"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out and all(json.loads(line)["type"] for line in out)
    assert not Path("-").exists()


def test_report_and_state_onto_dev_null_leave_it_a_device(dirty: tuple[Path, list[int]]) -> None:
    assert main(["replay", str(dirty[0]), "--report", os.devnull, "--state-out", os.devnull]) == 0
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


def test_report_into_a_fifo_is_streamed_and_the_fifo_stays(
    dirty: tuple[Path, list[int]], tmp_path: Path
) -> None:
    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def drain() -> None:
        with open(fifo, "rb") as f:
            got.append(f.read())

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    assert main(["replay", str(dirty[0]), "--report", str(fifo)]) == 0
    reader.join(timeout=30)
    assert not reader.is_alive()
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still a FIFO, not a regular file renamed over it
    lines = got[0].decode().splitlines()
    assert lines and json.loads(lines[-1])["type"] == "summary"


def test_html_needs_a_report_it_can_read_back(dirty: tuple[Path, list[int]], tmp_path: Path) -> None:
    assert main(["replay", str(dirty[0]), "--report", "-", "--html", str(tmp_path / "p.html")]) == 2


def test_regular_files_are_replaced_whole_and_symlinks_kept(tmp_path: Path) -> None:
    target = tmp_path / "real.jsonl"
    target.write_text("old\n")
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    with pytest.raises(RuntimeError), open_text_output(link) as out:
        out.write("half\n")
        raise RuntimeError("the writer failed")
    assert target.read_text() == "old\n"  # a failed write keeps the old file
    with open_text_output(link) as out:
        out.write("new\n")
    assert link.is_symlink() and target.read_text() == "new\n"
    write_output(tmp_path / "new.state", b"RWST")
    assert (tmp_path / "new.state").read_bytes() == b"RWST"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.jsonl", "new.state", "real.jsonl"]


def test_a_trace_with_a_gap_replays_marks_it_and_renders(
    clean_lines: list[str], tmp_path: Path, spec_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    lines = list(clean_lines)
    d = _data_start(lines)
    cut = d + len(lines[d:]) // 2
    for i in range(cut, len(lines)):  # the second half six hours later: the agent was off
        ts, rest = lines[i].split(",", 1)
        lines[i] = f"{float(ts) + 6 * 3600:.3f},{rest}"
    path, report, page = tmp_path / "gap.csv", tmp_path / "r.jsonl", tmp_path / "r.html"
    path.write_text("".join(lines))
    assert main(["replay", str(path), "--report", str(report), "--html", str(page)]) == 0
    assert "1 gap(s) of over 4 windows without rows" in capsys.readouterr().err
    records = [json.loads(line) for line in report.read_text().splitlines()]
    validator = jsonschema.Draft202012Validator(json.loads((spec_dir / "report.schema.json").read_text()))
    for rec in records:
        validator.validate(rec)
    (gap,) = [r for r in records if r["type"] == "gap"]
    assert gap["end"] - gap["start"] > 6 * 3600
    assert _summary(report)["hygiene"]["gaps"] == 1
    assert "rackwatt-data" in page.read_text()
