"""Issue 17: ``state_dir`` changed by SIGHUP (reload) or by a restart — ``seq`` continues, nothing
pending is left behind by a reload, and the engine state follows."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.config.model import Config
from agent.live.loop import LiveAgent
from agent.live.store import Store
from tests.live.conftest import Broker, Subscriber, persistent_broker_lines
from tests.live.fakes import FakeDriver, FakeEngine, fake_link, make_config
from tests.live.store_peek import pending_seqs, stored_state
from tests.live.test_agent_mqtt import announced_jumps, await_until, check_no_loss_in_order, data_seqs


def _agent(config: Config, engine: FakeEngine, loader: Callable[[Path], Config] | None = None) -> LiveAgent:
    return LiveAgent(
        config,
        config_path=Path("agent.toml"),
        config_loader=loader,
        engine_batch_s=0,
        driver_factory=lambda c: [FakeDriver("pdu.a", 0.05)],
        engine=fake_link(engine),
        save_interval_s=0.2,
        publisher_options={"reconnect_min_s": 1, "reconnect_max_s": 1},
    )


def _older_store(state_dir: Path, age_s: float) -> int:
    """A store in ``state_dir`` last used ``age_s`` ago, everything delivered; its last seq."""
    store = Store.open(state_dir, 1 << 20, clock=lambda: time.time() - age_s)
    seqs = [store.put("summary", "t", {}, retain=False, qos=1).seq for _ in range(3)]
    for seq in seqs:
        store.ack(seq)
    store.close()
    return seqs[-1]


@pytest.mark.parametrize("new_dir_holds", ["nothing", "an older store"])
def test_a_reload_that_moves_state_dir_moves_pending_messages_state_and_seq(
    tmp_path: Path,
    make_broker: Callable[..., Broker],
    subscribe: Callable[..., Subscriber],
    new_dir_holds: str,
) -> None:
    if new_dir_holds == "an older store":
        _older_store(tmp_path / "new", 3600)
    (tmp_path / "broker").mkdir()
    broker = make_broker(persistent_broker_lines(tmp_path / "broker"))
    sub = subscribe(broker.port, persistent=True)
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    config = make_config(old_dir, broker.port, tick_s=0.05)
    moved = dataclasses.replace(config, agent=dataclasses.replace(config.agent, state_dir=new_dir))
    engine = FakeEngine(summary_every=1, event_every=4)
    agent = _agent(config, engine, loader=lambda p: moved)

    async def scenario() -> None:
        task = asyncio.create_task(agent.run())
        await await_until(lambda: len(data_seqs(sub)) >= 10, 10, "messages before the outage")
        broker.stop()
        await await_until(lambda: agent.store is not None and len(agent.store) >= 10, 10, "a backlog")
        seq_before = agent.store.last_seq if agent.store is not None else 0
        agent.request_reload()
        await await_until(lambda: agent.tally.reloads == 1, 10, "the reload")
        assert agent.store is not None and agent.store.path == new_dir / "rackwatt.db"
        assert pending_seqs(old_dir) == [], "the backlog moved with the store"
        assert agent.store.pending(1)[0].seq <= seq_before < agent.store.next_seq
        broker.start()
        last = agent.store.last_seq
        await await_until(lambda: data_seqs(sub) and max(data_seqs(sub)) > last + 5, 20, "the backlog")
        agent.request_stop()
        assert await asyncio.wait_for(task, 15) == 0

    asyncio.run(scenario())
    time.sleep(0.3)
    check_no_loss_in_order(data_seqs(sub), max(data_seqs(sub)))
    assert pending_seqs(new_dir) == []
    saved = stored_state(new_dir)
    assert saved is not None and json.loads(saved)["frames"] == engine.frames, "the state moved too"


def test_a_restart_with_a_new_state_dir_continues_seq(
    tmp_path: Path, broker: Broker, subscribe: Callable[..., Subscriber]
) -> None:
    sub = subscribe(broker.port)

    async def run(state_dir: Path, messages: int) -> None:
        agent = _agent(make_config(state_dir, broker.port, tick_s=0.05), FakeEngine(summary_every=1))
        task = asyncio.create_task(agent.run())
        target = len(data_seqs(sub)) + messages
        await await_until(lambda: len(data_seqs(sub)) >= target, 10, "messages")
        agent.request_stop()
        assert await asyncio.wait_for(task, 15) == 0

    asyncio.run(run(tmp_path / "a", 30))
    last_a = max(data_seqs(sub))
    count_a = len(data_seqs(sub))
    asyncio.run(run(tmp_path / "b", 5))  # a fresh store: nothing known but the clock
    last_b1 = max(data_seqs(sub))
    asyncio.run(run(tmp_path / "b", 5))  # that store again: it continues past the clock floor
    last_b, count_b = max(data_seqs(sub)), len(data_seqs(sub))
    asyncio.run(run(tmp_path / "a", 5))  # back to the older store, which b has outrun
    seqs = data_seqs(sub)
    assert seqs[count_a] > last_a, "a new state_dir never restarts seq"
    assert min(seqs[count_b:]) > last_b, "an older state_dir never takes seq back"
    assert seqs == sorted(seqs), "seq only goes up, across every restart"
    check_no_loss_in_order(seqs[count_a:], max(seqs), announced_jumps(sub))
    jumps = [m.json() for m in sub.snapshot() if "seq_after" in m.json()]
    assert [j["seq_after"] for j in jumps] == [last_b1, last_a], "each restart's jump is announced"
