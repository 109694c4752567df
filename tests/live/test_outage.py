"""Issue 17: a broker outage of 10 agent minutes (a ``ScaledClock``: 2 real seconds) loses
nothing, duplicates nothing after dedup on ``seq``, keeps order, and marks the backlog ``delayed``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from agent.live.clock import ScaledClock
from agent.live.loop import LiveAgent
from tests.live.conftest import Broker, Subscriber, persistent_broker_lines
from tests.live.fakes import FakeDriver, FakeEngine, fake_link, make_config
from tests.live.test_agent_mqtt import await_until, check_no_loss_in_order, data_seqs

SPEED = 300.0  # simulated seconds per real second
OUTAGE_S = 600.0  # simulated


def test_a_ten_minute_outage_loses_nothing_and_keeps_order(
    tmp_path: Path, make_broker: Callable[..., Broker], subscribe: Callable[..., Subscriber]
) -> None:
    (tmp_path / "broker").mkdir()
    broker = make_broker(persistent_broker_lines(tmp_path / "broker"))
    sub = subscribe(broker.port, persistent=True)
    clock = ScaledClock(SPEED)
    config = make_config(tmp_path / "state", broker.port, tick_s=5.0)
    agent = LiveAgent(
        config,
        clock=clock,
        engine_batch_s=0,
        driver_factory=lambda c: [FakeDriver("pdu.a", 5.0 / SPEED)],
        engine=fake_link(FakeEngine(summary_every=1, event_every=4)),
        status_interval_s=60.0,
        publisher_options={"reconnect_min_s": 1, "reconnect_max_s": 1, "delayed_after_s": 30.0},
    )
    during: list[int] = []

    async def scenario() -> None:
        task = asyncio.create_task(agent.run())
        await await_until(lambda: len(data_seqs(sub)) >= 10, 15, "messages before the outage")
        broker.stop()
        down_at, first_down = clock.time(), (agent.store.last_seq + 1 if agent.store is not None else 0)
        while clock.time() < down_at + OUTAGE_S:
            await asyncio.sleep(0.05)
        assert agent.store is not None
        during.extend(range(first_down, agent.store.last_seq + 1))
        # 150 at full speed (a summary per 5 s tick, an event per 4); a loaded machine skips ticks
        assert len(during) >= 20 and len(agent.store) >= len(during), "the outage was stored"
        broker.start()
        last = agent.store.last_seq
        await await_until(lambda: data_seqs(sub) and max(data_seqs(sub)) > last + 3, 20, "the backlog")
        agent.request_stop()
        assert await asyncio.wait_for(task, 15) == 0

    asyncio.run(scenario())
    time.sleep(0.3)
    seqs = data_seqs(sub)
    check_no_loss_in_order(seqs, max(seqs))
    delayed = {m.json()["seq"] for m in sub.snapshot() if m.json().get("delayed")}
    assert set(during[: len(during) // 2]) <= delayed, "the backlog is marked delayed"
    assert agent.store is not None and agent.store.stats()["dropped_summaries"] == 0
