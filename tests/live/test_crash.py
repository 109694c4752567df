"""kill -9 at arbitrary moments (with and without the broker): the store always opens, nothing
stored is lost or reordered, seq never goes back, and unreadable state never causes a crash loop."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.live.conftest import Broker, Subscriber, persistent_broker_lines, wait_until
from tests.live.store_peek import next_seq, pending_seqs, state_names, stored_state
from tests.live.test_agent_mqtt import announced_jumps, check_no_loss_in_order, data_seqs

AGENT_PROC = Path(__file__).with_name("agent_proc.py")
KILLS = 100
OUTAGE_ROUNDS = range(40, 60)  # the broker is away for these rounds: the store fills across kills


def spawn(state_dir: Path, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(
            [sys.executable, str(AGENT_PROC), str(state_dir), str(port)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )


class Zygote:
    """``agent_proc.py --zygote``: forks real agents on request (no interpreter start-up each)."""

    def __init__(self, log_path: Path) -> None:
        with open(log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                [sys.executable, str(AGENT_PROC), "--zygote"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log_file,
                text=True,
            )

    def _ask(self, line: str) -> int:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return int(self.proc.stdout.readline())

    def spawn(self, state_dir: Path, port: int) -> int:
        return self._ask(f"spawn {state_dir} {port}")

    def reap(self, pid: int) -> int:
        return self._ask(f"reap {pid}")

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=10)
        self.proc.stdout.close()


def summaries(sub: Subscriber) -> list[dict]:
    return [m.json() for m in sub.on("/summary")]


@pytest.mark.slow
def test_100_random_kill_9s_and_an_outage_lose_nothing_and_keep_order(
    tmp_path: Path, make_broker: Callable[..., Broker], subscribe: Callable[..., Subscriber]
) -> None:
    rng = random.Random(17)
    (tmp_path / "broker").mkdir()
    broker = make_broker(persistent_broker_lines(tmp_path / "broker"))
    sub = subscribe(broker.port, persistent=True)
    state_dir = tmp_path / "state"
    log_path = tmp_path / "agent.log"
    progressed, frames_seen = 0, 0
    zygote = Zygote(log_path)
    try:
        for round_no in range(KILLS):
            if round_no == OUTAGE_ROUNDS.start:
                broker.stop()
            if round_no == OUTAGE_ROUNDS.stop:
                broker.start()
            before = next_seq(state_dir)
            pid = zygote.spawn(state_dir, broker.port)
            deadline = time.monotonic() + 5
            while next_seq(state_dir) <= before and time.monotonic() < deadline:
                time.sleep(0.01)  # until the agent is storing messages
            time.sleep(rng.uniform(0, 0.3))  # then mid-commit, mid-publish, mid-save …
            os.kill(pid, signal.SIGKILL)
            assert zygote.reap(pid) == -signal.SIGKILL
            progressed += next_seq(state_dir) > before
            saved = stored_state(state_dir)
            if saved is not None:  # one transaction: always whole, and it only moves forward
                frames = json.loads(saved)["frames"]
                assert frames >= frames_seen
                frames_seen = frames
    finally:
        zygote.close()
    assert progressed >= KILLS * 9 // 10, f"only {progressed} rounds got far enough to store messages"
    # Final run: everything stored before the kills arrives, then a clean stop.
    last_stored = next_seq(state_dir) - 1
    proc = spawn(state_dir, broker.port, log_path)
    try:
        wait_until(lambda: data_seqs(sub) and max(data_seqs(sub)) > last_stored + 3, 30, "the backlog")
        assert summaries(sub)[-1]["frames"] > frames_seen, "the engine resumed from its saved state"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGUSR1)
            time.sleep(0.5)
            proc.kill()
            proc.wait(timeout=5)
    time.sleep(0.3)
    seqs = data_seqs(sub)
    check_no_loss_in_order(seqs, max(seqs), announced_jumps(sub))  # 0 lost, in order; duplicates share a seq
    assert pending_seqs(state_dir) == []
    files = {p.name for p in state_dir.iterdir()}
    assert files <= {"rackwatt.db", "rackwatt.db-wal", "rackwatt.db-shm"}, f"orphaned files: {files}"
    log = log_path.read_text()
    assert "Traceback" not in log, log[-3000:]
    assert sub.on("/status")[-1].json()["state"] == "offline"


def test_unreadable_state_is_set_aside_and_the_agent_starts_fresh(
    tmp_path: Path, broker: Broker, subscribe: Callable[..., Subscriber]
) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "engine.state").write_bytes(b'{"frames": 12, "power_sum')  # an old, torn state file
    sub = subscribe(broker.port)
    log_path = tmp_path / "agent.log"
    proc = spawn(state_dir, broker.port, log_path)
    try:
        wait_until(lambda: len(summaries(sub)) >= 3, 20, "summaries from a fresh start")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
    assert summaries(sub)[0]["frames"] == 1
    assert any(n.startswith("engine.bad-") for n in state_names(state_dir)), "the bad state is kept aside"
    assert not (state_dir / "engine.state").exists(), "the old file was imported into the store"
    log = log_path.read_text()
    assert "cannot be loaded" in log and "started fresh" in log
    assert "Traceback" not in log
