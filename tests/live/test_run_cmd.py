"""``rackwatt run`` as systemd runs it: sd_notify, SIGHUP with a bad then a good config, SIGTERM."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.live.conftest import REPO_ROOT, Broker, Subscriber, wait_until


def _config(state_dir: Path, port: int, summary_interval_s: float = 5.0) -> str:
    return f"""
[agent]
site = "s1"
rack = "r1"
state_dir = "{state_dir}"
tick_s = 0.2

[mqtt]
host = "127.0.0.1"
port = {port}
keepalive_s = 5
summary_interval_s = {summary_interval_s}

[nvml]
enabled = false

[stages]
socket_path = false
"""


class Notifications:
    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.settimeout(0.1)
        self.received: list[str] = []

    def drain(self) -> list[str]:
        while True:
            try:
                self.received.append(self.sock.recv(4096).decode())
            except (TimeoutError, BlockingIOError):
                return self.received

    def seen(self, text: str) -> bool:
        return any(text in m for m in self.drain())

    def close(self) -> None:
        self.sock.close()


@pytest.mark.slow
def test_sighup_with_a_bad_config_keeps_running_and_sd_notify(
    tmp_path: Path, broker: Broker, subscribe: Callable[..., Subscriber]
) -> None:
    sub = subscribe(broker.port)
    cfg = tmp_path / "agent.toml"
    cfg.write_text(_config(tmp_path / "state", broker.port))
    notify = Notifications(tmp_path / "notify.sock")
    log_path = tmp_path / "agent.log"
    env = {
        **os.environ,
        "NOTIFY_SOCKET": str(tmp_path / "notify.sock"),
        "WATCHDOG_USEC": "400000",
        "JOURNAL_STREAM": "8:1234",
        "PYTHONPATH": str(REPO_ROOT),
    }
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agent", "run", "--config", str(cfg)],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
        )
    try:
        wait_until(lambda: notify.seen("READY=1"), 20, "READY=1")
        wait_until(lambda: notify.seen("WATCHDOG=1"), 5, "watchdog pings")
        wait_until(lambda: sub.on("/status"), 10, "online status")
        assert sub.on("/status")[-1].json()["state"] == "online"

        cfg.write_text(_config(tmp_path / "state", broker.port).replace("tick_s = 0.2", 'tick_s = "fast"'))
        ready_before = notify.drain().count("READY=1")
        proc.send_signal(signal.SIGHUP)
        wait_until(
            lambda: "still running the previous configuration" in log_path.read_text(), 10, "reload refusal"
        )
        log = log_path.read_text()
        assert "agent.tick_s" in log, log[-2000:]
        wait_until(
            lambda: notify.drain().count("READY=1") > ready_before, 5, "READY=1 after the refused reload"
        )
        assert any("RELOADING=1" in m for m in notify.received)
        assert proc.poll() is None, "the agent keeps running on the old configuration"
        watchdogs = notify.drain().count("WATCHDOG=1")
        wait_until(lambda: notify.drain().count("WATCHDOG=1") > watchdogs + 2, 5, "the loop still ticking")

        cfg.write_text(_config(tmp_path / "state", broker.port, summary_interval_s=7.0))
        proc.send_signal(signal.SIGHUP)
        wait_until(lambda: "applied" in log_path.read_text(), 10, "the good config applied")

        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
        wait_until(lambda: notify.seen("STOPPING=1"), 5, "STOPPING=1")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
        notify.close()
    log = log_path.read_text()
    assert "Traceback" not in log, log[-3000:]
    # issue 18 #7: state and spool private outside systemd too (the test's umask is 022)
    modes = {p.relative_to(tmp_path).as_posix(): stat.S_IMODE(p.stat().st_mode)
             for p in (tmp_path / "state").rglob("*")}
    assert modes and all(m == (0o700 if (tmp_path / p).is_dir() else 0o600) for p, m in modes.items()), modes
    # journald format: priority prefix, no timestamp.
    first = log.splitlines()[0]
    assert first.startswith("<") and not first[3:7].isdigit(), first
    time.sleep(0.3)
    last = sub.on("/status")[-1].json()
    assert last["state"] == "offline" and last["reason"] == "shutdown"
