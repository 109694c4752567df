"""A ``rackwatt run`` stand-in for the crash tests: the real loop, store, publisher and signal
handling, with a fake device and a fake engine so the test controls what gets published.

Usage: python agent_proc.py STATE_DIR BROKER_PORT [TICK_S]
       python agent_proc.py --zygote   (reads ``spawn STATE_DIR PORT`` / ``reap PID`` on stdin)

The zygote has imported everything once and forks an agent per ``spawn`` (it answers with the
child's pid; ``reap`` answers with its exit status), so a test can ``kill -9`` a hundred real
agents in a minute instead of paying the interpreter's start-up each time.
"""

from __future__ import annotations

import asyncio
import faulthandler
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.live.logsetup import setup_logging
from agent.live.loop import LiveAgent
from agent.live.run_cmd import serve
from tests.live.fakes import FakeDriver, FakeEngine, fake_link, make_config


def run_agent(state_dir: Path, port: int, tick_s: float = 0.05) -> int:
    setup_logging()
    faulthandler.register(signal.SIGUSR1)  # the test dumps stacks of a hung agent
    config = make_config(state_dir, port, tick_s=tick_s)
    agent = LiveAgent(
        config,
        engine_batch_s=0,
        driver_factory=lambda c: [FakeDriver("pdu.a", tick_s)],
        engine=fake_link(FakeEngine(summary_every=1, event_every=4)),
        save_interval_s=0.2,
        publisher_options={"reconnect_min_s": 1, "reconnect_max_s": 1},
    )
    return asyncio.run(serve(agent))


def zygote() -> int:
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["spawn"]:
            pid = os.fork()
            if pid == 0:
                os._exit(run_agent(Path(words[1]), int(words[2])))
            print(pid, flush=True)
        elif words[:1] == ["reap"]:
            _, status = os.waitpid(int(words[1]), 0)
            print(os.waitstatus_to_exitcode(status), flush=True)
    return 0


def main() -> int:
    if sys.argv[1:] == ["--zygote"]:
        return zygote()
    tick_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
    return run_agent(Path(sys.argv[1]), int(sys.argv[2]), tick_s)


if __name__ == "__main__":
    sys.exit(main())
