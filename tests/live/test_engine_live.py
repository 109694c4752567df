"""The real engine in the live loop: twin devices, a virtual clock, a real broker, schemas checked."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path

import jsonschema
import pytest

from agent.config.model import AgentSection, Config, CracConfig, MqttSection, PduConfig, StagesSection
from agent.live.clock import VirtualClock
from agent.live.engine_link import EngineLink
from agent.live.loop import LiveAgent
from agent.live.store import Store
from agent.sim.scenarios import make_scenario
from agent.sim.twin import RackTwin
from tests.live.conftest import SCHEMA_DIR, Broker, Subscriber, load_schema
from tests.live.fakes import twin_drivers

T0 = 1767225600.0  # 2026-01-01 00:00 UTC
HOURS = 1.0


@pytest.mark.slow
def test_real_engine_publishes_valid_summaries_baselines_and_restorable_state(
    tmp_path: Path, broker: Broker, subscribe: Callable[..., Subscriber]
) -> None:
    sub = subscribe(broker.port)
    scenario = make_scenario("steady", days=0.2, gpus=4, seed=3, start_ts=T0)
    twin = RackTwin(scenario)
    clock = VirtualClock(start=T0)
    interval_s = 10.0
    rack = scenario.rack
    config = Config(
        agent=AgentSection(site="s1", rack="r1", state_dir=tmp_path / "state", tick_s=interval_s),
        mqtt=MqttSection(host="127.0.0.1", port=broker.port, keepalive_s=5),
        pdus=tuple(PduConfig(id=p, host="127.0.0.1", interval_s=interval_s) for p in rack.pdu_ids),
        cracs=(
            CracConfig(
                id=rack.cooling.crac_id, host="127.0.0.1", interval_s=interval_s, share=rack.cooling.share
            ),
        ),
        stages=StagesSection(socket_path=None, udp_port=None, mqtt_hints=False),
    )
    agent = LiveAgent(
        config,
        clock=clock,
        driver_factory=lambda c: list(twin_drivers(twin, clock, interval_s)),
        baseline_interval_s=900.0,
        engine_batch_s=300.0,
    )

    async def hints_then_stop() -> None:
        last = None
        while clock.time() < T0 + HOURS * 3600:
            stage, job = twin.stage()
            if (stage, job) != last and agent.intake is not None:
                hint = {"stage": stage, "ts": clock.time()} | ({"job": job} if job else {})
                agent.intake.receive(json.dumps(hint).encode(), "udp", "test")
                last = (stage, job)
            await clock.sleep(20.0)
        agent.request_stop()

    async def scenario_run() -> None:
        keeper = asyncio.create_task(clock.run())
        feeder = asyncio.create_task(hints_then_stop())
        try:
            assert await asyncio.wait_for(agent.run(), 120) == 0
        finally:
            feeder.cancel()
            keeper.cancel()

    asyncio.run(scenario_run())
    time.sleep(0.5)
    assert agent.engine is not None and agent.tally.engine_errors == 0, agent.tally.last_engine_error
    summaries = [m.json() for m in sub.on("/summary")]
    assert len(summaries) >= HOURS * 3600 / config.mqtt.summary_interval_s * 0.9
    baselines = [m for m in sub.snapshot() if "/baseline/" in m.topic]
    assert len({m.topic for m in baselines}) >= 2, "baselines for several stages"
    late = Subscriber(broker.port).start()
    try:
        time.sleep(0.3)
        retained = [m for m in late.snapshot() if "/baseline/" in m.topic]
        assert {m.topic for m in retained} == {m.topic for m in baselines} and all(m.retain for m in retained)
    finally:
        late.stop()
    schemas = {
        kind: load_schema(kind)
        for kind in ("status", "event", "summary", "baseline")
        if (SCHEMA_DIR / f"{kind}.schema.json").exists()
    }
    assert {"status", "event"} <= set(schemas)
    for msg in sub.snapshot():
        kind = "baseline" if "/baseline/" in msg.topic else msg.topic.rsplit("/", 1)[1]
        body = msg.json()
        assert body["v"] == 1 and isinstance(body["seq"], int)
        if kind in schemas:
            jsonschema.validate(body, schemas[kind])
    seqs = [m.json()["seq"] for m in sub.snapshot() if not m.topic.endswith("/status")]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), "one counter, no gaps, in order"
    # The state written on exit restores into a fresh engine.
    fresh = EngineLink.from_config(config)
    store = Store.open(tmp_path / "state", 1 << 20)
    blob = store.load_state("engine")
    assert fresh is not None and blob is not None
    fresh.restore(blob)
    store.close()
