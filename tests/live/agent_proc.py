"""A ``rackwatt run`` stand-in for the crash tests: the real loop, spool, publisher and signal
handling, with a fake device and a fake engine so the test controls what gets published.

Usage: python agent_proc.py STATE_DIR BROKER_PORT [TICK_S]
"""

from __future__ import annotations

import asyncio
import faulthandler
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.live.logsetup import setup_logging
from agent.live.loop import LiveAgent
from agent.live.run_cmd import serve
from tests.live.fakes import FakeDriver, FakeEngine, fake_link, make_config


def main() -> int:
    state_dir, port = Path(sys.argv[1]), int(sys.argv[2])
    tick_s = float(sys.argv[3]) if len(sys.argv) > 3 else 0.05
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


if __name__ == "__main__":
    sys.exit(main())
