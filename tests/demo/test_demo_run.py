"""``rackwatt demo`` end to end, as a subprocess without a terminal (plain lines), bounded in time.

The demo's own devices, config, agent and engine all run for real; these tests only read its
output, its MQTT messages and its exit status.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from agent.live.demo.session import FAULT_WARMUP_H
from tests.conftest import REPO_ROOT, open_terminal
from tests.live.conftest import Broker, load_schema, wait_until

pytestmark = pytest.mark.slow


class DemoProcess:
    """``python -m agent demo …`` with stdout collected line by line (a pipe: no terminal)."""

    def __init__(self, args: list[str], tmpdir: Path) -> None:
        env = {**os.environ, "TMPDIR": str(tmpdir), "PYTHONUNBUFFERED": "1"}
        env.pop("CI", None)
        self.stderr_path = tmpdir / "demo.stderr"
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "agent", "demo", *args],
                cwd=REPO_ROOT,
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
                env=env,
            )
        self.lines: list[str] = []
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            with self._lock:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))

    def output(self) -> list[str]:
        with self._lock:
            return list(self.lines)

    def wait_for(self, predicate: Callable[[str], bool], timeout_s: float, what: str) -> str:
        def found() -> str | None:
            if self.proc.poll() is not None:
                self._reader.join(2)
            return next((line for line in self.output() if predicate(line)), None)

        try:
            return str(wait_until(found, timeout_s, what, step_s=0.2))
        except AssertionError:
            raise AssertionError(
                f"{what} not seen; output so far:\n"
                + "\n".join(self.output()[-40:])
                + "\nstderr:\n"
                + self.stderr()[-3000:]
            ) from None

    def finish(self, timeout_s: float) -> int:
        code = self.proc.wait(timeout=timeout_s)
        self._reader.join(5)
        return code

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)


@pytest.fixture
def start_demo(tmp_path: Path) -> Iterator[Callable[..., DemoProcess]]:
    started: list[DemoProcess] = []

    def start(*args: str) -> DemoProcess:
        demo = DemoProcess(list(args), tmp_path)
        started.append(demo)
        return demo

    yield start
    for demo in started:
        demo.kill()


def _device_ok(lines: list[str], device: str) -> bool:
    return any(f"] device {device} " in line and " ok " in line for line in lines)


def _no_temp_dirs_left(tmp_path: Path) -> bool:
    return not list(tmp_path.glob("rackwatt-demo-*"))


@pytest.mark.serial  # several agents against wall-clock bounds: needs the cores to itself
def test_demo_runs_for_its_duration_and_shows_devices_summaries_and_baselines(
    start_demo: Callable[..., DemoProcess], tmp_path: Path
) -> None:
    demo = start_demo("--duration", "40", "--speed", "120", "--no-mqtt")
    code = demo.finish(timeout_s=120)
    lines = demo.output()
    text = "\n".join(lines)
    assert code == 0, text + demo.stderr()[-3000:]
    assert "\x1b" not in text  # no terminal: plain lines, no ANSI
    for device in ("pdu.a", "pdu.b", "crac.1", "nvml"):
        assert _device_ok(lines, device), f"{device} never reported ok:\n{text}"
    summaries = [line for line in lines if "] summary seq " in line]
    assert summaries, text
    baselines = [line for line in lines if "baselines now for: " in line]
    assert baselines, text
    stages = baselines[-1].split("baselines now for: ", 1)[1].split(", ")
    assert len(stages) >= 2, baselines[-1]  # which ones depends on the engine's stage handling
    assert "would publish" in summaries[-1]  # no broker: shows what it would publish
    # The default warm-up makes the run predict: a from-scratch run of 120 s ended before the first.
    predicting = [s for s in summaries if "warm true" in s and " expected —" not in s]
    assert predicting and predicting[0] == summaries[0], summaries[0]
    assert lines[-1].startswith("rackwatt demo: duration of 40 s reached")
    assert "temporary files removed" in lines[-1]
    assert _no_temp_dirs_left(tmp_path)


def test_demo_publishes_to_a_broker_and_stops_cleanly_on_ctrl_c(
    start_demo: Callable[..., DemoProcess], broker: Broker, subscribe: Callable[..., Any], tmp_path: Path
) -> None:
    sub = subscribe(broker.port)
    demo = start_demo("--speed", "120", "--mqtt", f"127.0.0.1:{broker.port}")
    wait_until(lambda: sub.on("/summary"), 60, "a summary on the broker")
    wait_until(
        lambda: any(json.loads(m.payload).get("state") == "online" for m in sub.on("/status")),
        30,
        "the retained online status",
    )
    demo.proc.send_signal(signal.SIGINT)
    assert demo.finish(timeout_s=40) == 0, demo.stderr()[-3000:]
    wait_until(
        lambda: any(json.loads(m.payload).get("state") == "offline" for m in sub.on("/status")),
        10,
        "the offline status after the stop",
    )
    summary_schema, baseline_schema = load_schema("summary"), load_schema("baseline")
    for message in sub.on("/summary"):
        jsonschema.validate(message.json(), summary_schema)
    for message in sub.snapshot():
        if "/baseline/" in message.topic:
            jsonschema.validate(message.json(), baseline_schema)
    status = [m.json() for m in sub.on("/status") if m.json().get("state") == "online"][-1]
    assert {"pdu.a", "pdu.b", "crac.1", "nvml"} <= set(status["devices"])
    lines = demo.output()
    assert any("mqtt 127.0.0.1:" in line and "connected" in line for line in lines), "\n".join(lines)
    assert lines[-1].startswith("rackwatt demo: interrupted")
    assert _no_temp_dirs_left(tmp_path)


@pytest.mark.serial  # several agents against wall-clock bounds: needs the cores to itself
def test_an_injected_fault_is_found_and_attributed(
    start_demo: Callable[..., DemoProcess], tmp_path: Path
) -> None:
    """``--fault hotspot``: an onset event with cause thermal, within the test's bounded time.

    ``--fault cooling`` is not used here: the current engine reports a 15 % COP loss only hours
    after its onset (docs/demo.md), longer than a test should run.
    """
    demo = start_demo("--speed", "120", "--fault", "hotspot", "--no-mqtt")
    started = time.monotonic()
    onset = demo.wait_for(lambda line: "ONSET cause=thermal" in line, 100, "an onset with cause thermal")
    found_after_s = time.monotonic() - started
    demo.proc.send_signal(signal.SIGINT)
    assert demo.finish(timeout_s=40) == 0, demo.stderr()[-3000:]
    lines = demo.output()
    assert any("injected: hotspot" in line for line in lines)
    assert any(line.startswith(f"warm-up: replayed {FAULT_WARMUP_H:g} simulated hours") for line in lines)
    assert "stage=" in onset and found_after_s < 100
    assert _no_temp_dirs_left(tmp_path)


def test_on_a_terminal_the_view_is_redrawn_in_place(tmp_path: Path) -> None:
    """A pseudo-terminal on stdout and stderr: the full-screen ANSI view, then a clean exit."""
    master, slave, env = open_terminal()
    env["TMPDIR"] = str(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent", "demo", "--duration", "6", "--no-mqtt"],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert proc.wait(timeout=90) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        reader.join(5)
        os.close(master)
    text = b"".join(chunks).decode(errors="replace")
    assert text.count("\x1b[2J") == 1 and text.count("\x1b[H") >= 3  # cleared once, redrawn from home
    assert "facility power measured" in text and "no broker: showing what would be published" in text
    assert "\x1b[?25h" in text  # the cursor is given back
    assert "temporary files removed" in text.rsplit("\x1b[J", 1)[-1]
    assert _no_temp_dirs_left(tmp_path)
