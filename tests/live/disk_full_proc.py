"""The agent on a 200 KB tmpfs, for the full-disk test: run inside ``unshare -m`` (see the test).

Usage: python disk_full_proc.py STATE_DIR BROKER_PORT. Reads commands on stdin, one a line:
``fill`` (a filler file takes all free space), ``free`` (it is removed), ``stop``. Each command
is answered with one JSON line on stdout: the store's ``stats()`` and ``last_seq``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import agent.live.memory_hold as memory_hold
from agent.live.logsetup import setup_logging
from agent.live.loop import LiveAgent
from tests.live.fakes import FakeDriver, FakeEngine, fake_link, make_config

# A small memory hold so the test overflows it in seconds, not a day of summaries.
memory_hold.HOLD_MAX_BYTES = 4096


def fill(path: Path) -> None:
    """Write until the filesystem refuses even one more byte (unbuffered: nothing left to flush)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (65536, 4096, 1):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"x" * size)
    finally:
        os.close(fd)


async def main() -> int:
    state_dir, port = Path(sys.argv[1]), int(sys.argv[2])
    setup_logging()
    config = make_config(state_dir / "state", port, tick_s=0.05)
    agent = LiveAgent(
        config,
        engine_batch_s=0,
        driver_factory=lambda c: [FakeDriver("pdu.a", 0.05)],
        engine=fake_link(FakeEngine(summary_every=1, event_every=4)),
        save_interval_s=0.5,
        publisher_options={"reconnect_min_s": 1, "reconnect_max_s": 1},
    )
    task = asyncio.create_task(agent.run())
    loop = asyncio.get_running_loop()
    while True:
        line = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
        if line == "fill":
            fill(state_dir / "filler")
        elif line == "free":
            with contextlib.suppress(FileNotFoundError):
                os.unlink(state_dir / "filler")
        elif line in ("stop", ""):
            agent.request_stop()
            await task
        store = agent.store
        assert store is not None
        st = os.statvfs(state_dir)
        files = {p.name: p.stat().st_size for p in (state_dir / "state").iterdir()}
        answer = {"cmd": line, "last_seq": store.last_seq, "free": st.f_bavail * st.f_frsize, "files": files}
        print(json.dumps({**answer, **store.stats()}), flush=True)
        if line in ("stop", ""):
            return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
