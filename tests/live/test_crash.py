"""kill -9 at arbitrary moments (with and without the broker): state and spool always load,
nothing published is lost, seq never goes back, and a corrupt state file never causes a crash loop."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.live.conftest import Broker, Subscriber, wait_until
from tests.live.test_agent_mqtt import check_no_loss_in_order, data_seqs

AGENT_PROC = Path(__file__).with_name("agent_proc.py")


def spawn(state_dir: Path, port: int, log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "ab") as log_file:
        return subprocess.Popen(
            [sys.executable, str(AGENT_PROC), str(state_dir), str(port)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )


def summaries(sub: Subscriber) -> list[dict]:
    return [m.json() for m in sub.on("/summary")]


@pytest.mark.slow
def test_kill_9_mid_run_restores_state_and_delivers_the_spool(
    tmp_path: Path, broker: Broker, subscribe: Callable[..., Subscriber]
) -> None:
    rng = random.Random(7)
    sub = subscribe(broker.port)
    state_dir = tmp_path / "state"
    log_path = tmp_path / "agent.log"
    procs: list[subprocess.Popen[bytes]] = []
    try:
        saved_frames = 0
        for round_no in range(3):
            spooled_before = _max_spooled_seq(state_dir) if round_no else 0
            max_seq_before = max([spooled_before, *data_seqs(sub)])
            proc = spawn(state_dir, broker.port, log_path)
            procs.append(proc)

            def new_summaries(floor: int = max_seq_before) -> list[dict]:
                return [s for s in summaries(sub) if s["seq"] > floor]

            wait_until(lambda: len(new_summaries()) >= 5, 20, f"summaries in round {round_no}")
            # The engine resumed from the state saved before the kill, and seq never went back.
            assert new_summaries()[0]["frames"] == saved_frames + 1
            outage = round_no == 1
            if outage:
                broker.stop()
                time.sleep(0.8)  # the agent spools while the broker is away
            time.sleep(rng.uniform(0, 0.3))
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=5)
            saved = json.loads((state_dir / "engine.state").read_bytes())  # atomic: always whole
            assert saved["frames"] > saved_frames
            saved_frames = saved["frames"]
            if outage:
                assert list((state_dir / "spool").glob("seg-*.log")), "the outage was spooled to disk"
                sub.connected.clear()
                broker.start()
                assert sub.connected.wait(10)
                time.sleep(0.2)
        # Final run: everything spooled before the kills arrives, then a clean stop.
        last_spooled = _max_spooled_seq(state_dir)
        proc = spawn(state_dir, broker.port, log_path)
        procs.append(proc)
        wait_until(lambda: data_seqs(sub) and max(data_seqs(sub)) > last_spooled + 3, 20, "the spool backlog")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGUSR1)
                time.sleep(0.5)
                p.kill()
                p.wait(timeout=5)
    time.sleep(0.3)
    seqs = data_seqs(sub)
    check_no_loss_in_order(seqs, max(seqs))
    log = log_path.read_text()
    assert "Traceback" not in log, log[-3000:]
    assert sub.on("/status")[-1].json()["state"] == "offline"


def _max_spooled_seq(state_dir: Path) -> int:
    """The highest seq on disk (read-only: the torn tail, if any, is simply not counted)."""
    from agent.live.spool import Spool

    best = 0
    for path in (state_dir / "spool").glob("seg-*.log"):
        records, _end, _bad = Spool._scan(path.read_bytes())
        best = max([best, int(path.stem[4:]) - 1, *(r[0] for r in records)])
    return best


def test_corrupt_state_file_is_set_aside_and_the_agent_starts_fresh(
    tmp_path: Path, broker: Broker, subscribe: Callable[..., Subscriber]
) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "engine.state").write_bytes(b'{"frames": 12, "power_sum')  # torn by a crash
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
    assert list(state_dir.glob("engine.state.bad-*")), "the bad file is kept aside"
    log = log_path.read_text()
    assert "cannot be loaded" in log and "started fresh" in log
    assert "Traceback" not in log
