"""``rackwatt replay`` end to end: CSV in, JSON Lines out, state files in and out."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import synth

from agent.cli import main

pytest.importorskip("agent.trace.reader")


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agent.trace.writer import TraceWriter

    chunks = synth.chunks(4 / 24, seed=11, chunk_rows=3000)
    path = tmp_path_factory.mktemp("replay") / "trace.csv"
    cols = ["ts", "stage", "job", *chunks[0].numeric]
    with TraceWriter(path, synth.meta(), cols) as writer:
        for c in chunks:
            writer.write(c)
    return path


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_replay_writes_a_valid_report_and_state(
    trace: Path, tmp_path: Path, spec_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    report, state = tmp_path / "r.jsonl", tmp_path / "e.state"
    assert main(["replay", str(trace), "--report", str(report), "--state-out", str(state)]) == 0
    err = capsys.readouterr().err  # not a terminal: no progress bar, one summary line at the end
    assert err.count("\n") == 1 and err.startswith("rackwatt replay: ") and " rows " in err, err
    lines = _lines(report)
    validator = jsonschema.Draft202012Validator(json.loads((spec_dir / "report.schema.json").read_text()))
    for line in lines:
        validator.validate(line)
    wins = [x for x in lines if x["type"] == "window"]
    assert len(wins) == 16 and any(w["predicted_kwh"] is not None for w in wins)
    assert lines[-1]["type"] == "summary" and lines[-1]["topic"] == "rackwatt/v1/st/rt/summary"
    assert state.read_bytes()[:4] == b"RWST"


def test_window_option_and_state_continuation(trace: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.jsonl"
    state = tmp_path / "e.state"
    assert (
        main(["replay", str(trace), "--report", str(report), "--window", "600", "--state-out", str(state)])
        == 0
    )
    wins = [x for x in _lines(report) if x["type"] == "window"]
    assert {w["end"] - w["start"] for w in wins[:-1]} == {600.0}
    # a second replay starting from the learned state predicts from its first window on
    again = tmp_path / "r2.jsonl"
    later = tmp_path / "later.csv"
    _shift(trace, later, 4 * 3600.0)
    assert (
        main(["replay", str(later), "--report", str(again), "--window", "600", "--state-in", str(state)]) == 0
    )
    start = float(next(x for x in later.read_text().splitlines() if x[:1].isdigit()).split(",")[0])
    first = next(x for x in _lines(again) if x["type"] == "window" and x["start"] >= start)
    assert first["predicted_kwh"] is not None


def test_corrupt_state_is_kept_aside_and_replay_starts_fresh(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "bad.state"
    state.write_bytes(b"definitely not a state file")
    assert main(["replay", str(trace), "--report", str(tmp_path / "r.jsonl"), "--state-in", str(state)]) == 0
    err = capsys.readouterr().err
    assert "bad.state" in err and "starting fresh" in err
    assert list(tmp_path.glob("bad.state.bad-*"))


def test_bad_inputs_give_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["replay", str(tmp_path / "missing.csv"), "--report", str(tmp_path / "r.jsonl")]) != 0
    err = capsys.readouterr().err
    assert "missing.csv" in err and "Traceback" not in err
    assert (
        main(
            ["replay", str(tmp_path / "missing.csv"), "--report", str(tmp_path / "r.jsonl"), "--window", "-5"]
        )
        == 2
    )
    assert "--window" in capsys.readouterr().err


def _shift(src: Path, dst: Path, by_s: float) -> None:
    out = []
    for line in src.read_text().splitlines():
        if line and line[0].isdigit():
            ts, rest = line.split(",", 1)
            line = f"{float(ts) + by_s:.0f},{rest}"
        out.append(line)
    dst.write_text("\n".join(out) + "\n")


def test_html_hook_renders_the_report(trace: Path, tmp_path: Path) -> None:
    pytest.importorskip("agent.report")
    html = tmp_path / "r.html"
    assert main(["replay", str(trace), "--report", str(tmp_path / "r.jsonl"), "--html", str(html)]) == 0
    text = html.read_text()
    assert text.lstrip().lower().startswith("<!doctype html") and len(text) > 1000


def test_a_broken_trace_line_fails_cleanly_without_a_partial_report(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = trace.read_text().splitlines()
    data = [i for i, x in enumerate(lines) if x[:1].isdigit()]
    lines[data[5000]] = "not-a-number," + lines[data[5000]].split(",", 1)[1]
    bad = tmp_path / "bad.csv"
    bad.write_text("\n".join(lines) + "\n")
    report = tmp_path / "r.jsonl"
    assert main(["replay", str(bad), "--report", str(report)]) == 1
    err = capsys.readouterr().err
    assert "bad.csv" in err and "Traceback" not in err
    assert not report.exists() and not list(tmp_path.glob("*.tmp"))


def test_the_replay_keeps_freed_memory_where_glibc_allows() -> None:
    import platform

    from agent.engine.batch_heap import keep_freed_memory

    assert keep_freed_memory() is (platform.libc_ver()[0] == "glibc")
