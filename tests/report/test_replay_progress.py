"""Replay progress: percent and ETA redrawn on a terminal; one summary line otherwise."""

from __future__ import annotations

import io
import re

import pytest

from agent.engine import replay_cmd
from agent.engine.replay_cmd import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


T0 = 1_717_200_000.0  # 2024-06-01 00:00 UTC


def test_terminal_progress_shows_percent_and_eta(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([100.0, 110.0, 120.0, 130.0])
    monkeypatch.setattr(replay_cmd.time, "monotonic", lambda: next(clock))
    out = Terminal()
    progress = Progress(out, total_bytes=1000)  # starts at t = 100 s
    progress.update(5000, T0 + 3600, pos=250)  # 10 s for a quarter: 30 s to go
    progress.update(10000, T0 + 7200, pos=500)  # 20 s for a half: 20 s to go
    progress.done()
    frames = out.getvalue().split("\r")[1:]
    assert len(frames) == 2
    assert " 25.0 %" in frames[0] and "ETA 30.0 s" in frames[0] and "2024-06-01 01:00 UTC" in frames[0]
    assert " 50.0 %" in frames[1] and "ETA 20.0 s" in frames[1] and "10,000 rows" in frames[1]
    assert out.getvalue().endswith("\n")


def test_not_a_terminal_gets_one_final_line(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter([0.0, *[float(i) for i in range(1, 50)], 95.0])
    monkeypatch.setattr(replay_cmd.time, "monotonic", lambda: next(clock))
    out = io.StringIO()
    progress = Progress(out, total_bytes=1000)
    for i in range(1, 50):
        progress.update(i * 3600, T0 + i * 3600, pos=i * 20)
    assert out.getvalue() == ""
    progress.done()
    text = out.getvalue()
    assert text.count("\n") == 1 and "\r" not in text
    assert re.fullmatch(
        r"rackwatt replay: 176,400 rows up to 2024-06-03 01:00 UTC in 1:35\n", text
    ), text


def test_a_failed_replay_prints_no_summary() -> None:
    out = io.StringIO()
    progress = Progress(out, total_bytes=10)
    progress.update(10, T0, pos=5)
    progress.done(finished=False)
    assert out.getvalue() == ""
