"""Issue 17: the state_dir on a 200 KB tmpfs that fills up during a run.

Every lost message is counted in ``status.spool`` and the loss is logged once; messages go on
being delivered from memory while the broker is up; delivery and durability resume when space
is freed. The agent runs in its own mount namespace (``unshare -m``) so the tmpfs is private to it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest

from tests.live.conftest import Broker, Subscriber, persistent_broker_lines, wait_until
from tests.live.test_agent_mqtt import data_seqs

PROC = Path(__file__).with_name("disk_full_proc.py")


def _ask(proc: subprocess.Popen[str], command: str) -> dict[str, Any]:
    stdin, stdout = proc.stdin, proc.stdout
    assert stdin is not None and stdout is not None
    stdin.write(command + "\n")
    stdin.flush()
    line = stdout.readline()
    assert line, f"the agent exited before answering {command!r}"
    return dict(json.loads(line))


@pytest.mark.slow
def test_a_full_disk_loses_only_counted_messages_and_delivery_resumes(
    tmp_path: Path, make_broker: Callable[..., Broker], subscribe: Callable[..., Subscriber]
) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("unshare(1) is not installed: cannot give the agent a private tmpfs")
    (tmp_path / "broker").mkdir()
    broker = make_broker(persistent_broker_lines(tmp_path / "broker"))
    sub = subscribe(broker.port, persistent=True)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log_path = tmp_path / "agent.log"
    script = 'mount -t tmpfs -o size=200k tmpfs "$0" || exit 77; exec "$1" "$2" "$0" "$3"'
    with open(log_path, "w") as log_file:
        proc = subprocess.Popen(
            ["unshare", "-m", "sh", "-c", script, str(mnt), sys.executable, str(PROC), str(broker.port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log_file,
            text=True,
        )
    try:
        time.sleep(0.5)
        if proc.poll() == 77:
            pytest.skip(f"cannot mount a tmpfs here (not root?): {log_path.read_text()[-300:]}")
        wait_until(lambda: len(data_seqs(sub)) >= 10, 20, "messages before the disk fills")
        first = min(data_seqs(sub))

        full = _ask(proc, "fill")
        wait_until(lambda: _ask(proc, "stats")["disk_full"], 10, "the store to notice the full disk")
        at_full = _ask(proc, "stats")["last_seq"]
        wait_until(lambda: max(data_seqs(sub)) > at_full + 5, 10, "delivery from memory, broker up")

        broker.stop()
        wait_until(lambda: _ask(proc, "stats")["dropped_disk_full"] > 5, 20, "the memory hold to overflow")
        sub.connected.clear()
        broker.start()
        assert sub.connected.wait(10)
        freed = _ask(proc, "free")
        wait_until(lambda: not _ask(proc, "stats")["disk_full"], 10, "the store to write again")
        resumed = _ask(proc, "stats")["last_seq"]
        wait_until(lambda: max(data_seqs(sub)) > resumed + 5, 20, "delivery after space returned")
        final = _ask(proc, "stop")
        assert proc.wait(timeout=15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=5)
        _close(proc.stdin)
        _close(proc.stdout)
    time.sleep(0.3)
    seen = set(data_seqs(sub))
    missing = set(range(first, final["last_seq"] + 1)) - seen
    counted = final["dropped_disk_full"] + final["dropped_summaries"] + final["dropped_events"]
    assert full["dropped_disk_full"] == 0 and freed["dropped_disk_full"] > 0
    assert len(missing) == counted + final["pending"], (len(missing), final)
    assert final["dropped_disk_full"] > 0, "the test must have overflowed the hold"
    log = log_path.read_text()
    assert log.count("memory hold") == 1, "the loss is logged once"
    assert log.count("holding new messages in memory") == 1, "the full disk is logged once"
    assert "writing to" in log and "again" in log
    assert "Traceback" not in log, log[-3000:]


def _close(stream: IO[str] | None) -> None:
    if stream is not None:
        stream.close()
