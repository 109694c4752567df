"""``systemctl reload`` fails when the agent rejects the configuration: ``rackwatt reload`` (the
unit's ExecReload) against a real ``rackwatt run``, as systemd runs both (RUNTIME_DIRECTORY set)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.live import reload_ack
from tests.live.conftest import REPO_ROOT, wait_until


def _config(state_dir: Path, tick_s: str = "0.2") -> str:
    return (f'[agent]\nsite = "s1"\nrack = "r1"\nstate_dir = "{state_dir}"\ntick_s = {tick_s}\n\n'
            "[mqtt]\nenabled = false\n\n[nvml]\nenabled = false\n\n[stages]\nsocket_path = false\n")


def _env(runtime: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RUNTIME_DIRECTORY"}
    env["PYTHONPATH"] = str(REPO_ROOT)
    if runtime is not None:
        env["RUNTIME_DIRECTORY"] = str(runtime)
    return env


def _reload(pid: int, runtime: Path | None, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent", "reload", "--pid", str(pid), *extra],
                          env=_env(runtime), capture_output=True, text=True, timeout=60)


@pytest.fixture
def running_agent(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path, Path]]:
    runtime = tmp_path / "run"
    runtime.mkdir()
    cfg = tmp_path / "agent.toml"
    cfg.write_text(_config(tmp_path / "state"))
    log_path = tmp_path / "agent.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen([sys.executable, "-m", "agent", "run", "--config", str(cfg)],
                                env=_env(runtime), stdout=log_file, stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        wait_until(lambda: "device" in log_path.read_text() or proc.poll() is not None, 30, "agent start")
        assert proc.poll() is None, log_path.read_text()[-2000:]
        yield proc, cfg, runtime
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=20)
    assert "Traceback" not in log_path.read_text()


@pytest.mark.slow
def test_reload_succeeds_then_a_rejected_one_fails(
    running_agent: tuple[subprocess.Popen[bytes], Path, Path], tmp_path: Path
) -> None:
    proc, cfg, runtime = running_agent
    cfg.write_text(_config(tmp_path / "state", tick_s="0.5"))
    good = _reload(proc.pid, runtime)
    assert good.returncode == 0, good.stderr
    assert "applied" in good.stdout

    cfg.write_text(_config(tmp_path / "state", tick_s='"fast"'))
    bad = _reload(proc.pid, runtime)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "rejected, still running the previous configuration" in bad.stderr
    assert "agent.tick_s" in bad.stderr  # names what was wrong
    assert proc.poll() is None, "a rejected reload keeps the agent running"

    cfg.write_text(_config(tmp_path / "state"))
    again = _reload(proc.pid, runtime)  # the verdict is the new one, not the previous rejection
    assert again.returncode == 0, again.stderr


def test_no_verdict_in_time_fails(tmp_path: Path) -> None:
    # A process that ignores SIGHUP and never writes a verdict: the reload must not pass.
    child = subprocess.Popen([sys.executable, "-c",
                              "import signal, time; signal.signal(signal.SIGHUP, signal.SIG_IGN); "
                              "print('ready', flush=True); time.sleep(30)"], stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline() == b"ready\n"
        start = time.monotonic()
        result = _reload(child.pid, tmp_path, "--wait-s", "0.5")
        assert result.returncode == 1
        assert "gave no verdict on the reload within" in result.stderr
        assert time.monotonic() - start < 20
    finally:
        child.kill()
        child.wait(timeout=5)


def test_cannot_ask_says_why(tmp_path: Path) -> None:
    no_runtime = _reload(os.getpid(), None)
    assert no_runtime.returncode == 2 and "RUNTIME_DIRECTORY is not set" in no_runtime.stderr
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(timeout=10)  # a pid that no longer exists
    gone = _reload(child.pid, tmp_path)
    assert gone.returncode == 2 and f"no process {child.pid}" in gone.stderr
    assert "Traceback" not in gone.stderr + no_runtime.stderr


def test_verdicts_are_numbered_per_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNTIME_DIRECTORY", f"{tmp_path}:{tmp_path / 'other'}")
    path = reload_ack.status_path()
    assert path == tmp_path / "reload-status"  # the first of several runtime folders
    reload_ack.report(False, "bad")
    first = reload_ack.read(path)
    reload_ack.report(True, "good")
    second = reload_ack.read(path)
    assert first is not None and second is not None
    assert (first.ok, second.ok) == (False, True)
    assert second.seq == first.seq + 1 and second.pid == os.getpid()
    path.write_text("not json")
    assert reload_ack.read(path) is None
    monkeypatch.delenv("RUNTIME_DIRECTORY")
    assert reload_ack.status_path() is None
    reload_ack.report(True, "ignored")  # outside systemd: nothing written, nothing raised
