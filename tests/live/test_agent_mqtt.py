"""The live agent against a real mosquitto: schemas, status, outage without loss, inbound topics."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import paho.mqtt.publish as mqtt_publish
import pytest

from agent.live.loop import LiveAgent
from tests.live.conftest import Broker, Subscriber, load_schema
from tests.live.fakes import FakeDriver, FakeEngine, fake_link, make_config
from tests.live.store_peek import stored_state


async def await_until(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def data_seqs(sub: Subscriber) -> list[int]:
    """seq of every summary/event/baseline received, in arrival order."""
    return [m.json()["seq"] for m in sub.snapshot() if not m.topic.endswith("/status")]


def _ranges(seqs: set[int]) -> str:
    """``a..b`` runs of consecutive seqs, relative to the first (seqs are large numbers)."""
    out: list[str] = []
    for s in sorted(seqs):
        if out and s == int(out[-1].split("..")[-1]) + 1:
            out[-1] = f"{out[-1].split('..')[0]}..{s}"
        else:
            out.append(str(s))
    return ", ".join(out[:10])


def announced_jumps(sub: Subscriber) -> list[range]:
    """Seqs a restart skipped, as the first message after each jump announces (``seq_after``)."""
    return [
        range(body["seq_after"] + 1, body["seq"])
        for m in sub.snapshot()
        if not m.topic.endswith("/status") and "seq_after" in (body := m.json())
    ]


def check_no_loss_in_order(seqs: list[int], last: int, skipped: Sequence[range] = ()) -> None:
    """Every seq from the first seen to ``last`` arrived, but those a restart announced it skipped."""
    first_seen: list[int] = []
    seen: set[int] = set()
    for s in seqs:
        if s not in seen:
            seen.add(s)
            first_seen.append(s)
    first = min(seen, default=last + 1)  # a new store starts at its clock floor (agent/live/store.py)
    missing = {s for s in range(first, last + 1) if s not in seen and not any(s in r for r in skipped)}
    assert not missing, f"missing {len(missing)}: {_ranges(missing)}"
    assert first_seen == sorted(first_seen), "messages arrived out of order"


def test_every_message_matches_its_schema_and_status_is_retained(
    tmp_path: Path, broker: Broker, subscribe: Callable[..., Subscriber]
) -> None:
    sub = subscribe(broker.port)
    engine = FakeEngine(summary_every=3, event_every=4)
    config = make_config(tmp_path / "state", broker.port, tick_s=0.05)
    agent = LiveAgent(
        config,
        engine_batch_s=0,
        driver_factory=lambda c: [FakeDriver("pdu.a", 0.05), FakeDriver("crac.x", 0.1, fail=True)],
        engine=fake_link(engine),
        status_interval_s=0.3,
        baseline_interval_s=0.5,
    )

    async def scenario() -> None:
        task = asyncio.create_task(agent.run())
        await await_until(
            lambda: len(sub.on("/event")) >= 3 and sub.on("/baseline/idle") and len(sub.on("/status")) >= 3,
            15,
            "events, a baseline and status refreshes",
        )
        agent.request_stop()
        assert await asyncio.wait_for(task, 10) == 0

    asyncio.run(scenario())
    time.sleep(0.3)
    schemas = {name: load_schema(name) for name in ("status", "event")}
    for msg in sub.snapshot():
        kind = msg.topic.split("/")[4]
        if kind in schemas:
            jsonschema.validate(msg.json(), schemas[kind])
    statuses = [m.json() for m in sub.on("/status")]
    online = [s for s in statuses if s["state"] == "online"]
    assert online[-1]["devices"]["pdu.a"]["ok"] is True
    assert online[-1]["devices"]["crac.x"]["ok"] is False
    assert "crac.x: timeout" in online[-1]["devices"]["crac.x"]["error"]
    assert statuses[-1]["state"] == "offline" and statuses[-1]["reason"] == "shutdown"
    assert statuses[-1]["seq"] == max(data_seqs(sub))
    # Retained: a late subscriber gets the offline status and the baseline at once.
    late = Subscriber(broker.port).start()
    try:
        time.sleep(0.3)
        retained = {m.topic: m for m in late.snapshot()}
        assert retained["rackwatt/v1/s1/r1/status"].json()["state"] == "offline"
        assert retained["rackwatt/v1/s1/r1/status"].retain
        assert "rackwatt/v1/s1/r1/baseline/idle" in retained
    finally:
        late.stop()
    check_no_loss_in_order(data_seqs(sub), max(data_seqs(sub)))
    # The engine state was saved on exit.
    saved = json.loads(stored_state(tmp_path / "state") or b"null")
    assert saved["frames"] == engine.frames > 0


@pytest.mark.slow
def test_broker_outage_loses_nothing_and_keeps_order(
    tmp_path: Path, broker: Broker, subscribe: Callable[..., Subscriber]
) -> None:
    sub = subscribe(broker.port)
    engine = FakeEngine(summary_every=1, event_every=3)
    config = make_config(tmp_path / "state", broker.port, tick_s=0.05)
    # The agent reconnects later than the subscriber, so the subscriber sees the whole backlog.
    agent = LiveAgent(
        config,
        engine_batch_s=0,
        driver_factory=lambda c: [FakeDriver("pdu.a", 0.05)],
        engine=fake_link(engine),
        publisher_options={"reconnect_min_s": 4, "reconnect_max_s": 4, "delayed_after_s": 1.0},
    )

    async def scenario() -> None:
        task = asyncio.create_task(agent.run())
        await await_until(lambda: len(data_seqs(sub)) >= 10, 10, "messages before the outage")
        broker.stop(sig_kill=True)
        await await_until(lambda: not agent.publisher.connected, 5, "the agent to notice the outage")
        await asyncio.sleep(1.5)
        spooled = len(agent.store)
        assert spooled >= 10, "messages made during the outage must wait in the store"
        broker.start()
        await await_until(lambda: sub.connected.is_set(), 5, "subscriber back")
        await await_until(lambda: agent.publisher.connected, 15, "the agent to reconnect")
        agent.request_stop()
        assert await asyncio.wait_for(task, 15) == 0

    sub.connected.clear()
    asyncio.run(scenario())
    assert len(agent.store) == 0
    time.sleep(0.3)
    seqs = data_seqs(sub)
    check_no_loss_in_order(seqs, agent.store.last_seq)
    delayed = [m.json()["seq"] for m in sub.snapshot() if m.json().get("delayed")]
    assert delayed, "messages sent from the spool after the outage are marked delayed"
    events = sub.on("/event")
    assert len(events) == engine.frames // 3


def test_inbound_hint_and_accept_reach_the_timeline_and_engine(
    tmp_path: Path, broker: Broker, subscribe: Callable[..., Subscriber]
) -> None:
    sub = subscribe(broker.port)
    engine = FakeEngine(summary_every=0, event_every=0)
    config = make_config(tmp_path / "state", broker.port, tick_s=0.05)
    agent = LiveAgent(
        config,
        engine_batch_s=0,
        driver_factory=lambda c: [FakeDriver("pdu.a", 0.05)],
        engine=fake_link(engine),
    )
    root = "rackwatt/v1/s1/r1"

    async def scenario() -> None:
        task = asyncio.create_task(agent.run())
        await await_until(lambda: agent.publisher and agent.publisher.connected, 10, "connect")
        await asyncio.sleep(0.2)
        await asyncio.to_thread(
            mqtt_publish.single,
            f"{root}/hint",
            b'{"stage":"checkpoint","job":"j1"}',
            qos=1,
            hostname="127.0.0.1",
            port=broker.port,
        )
        await await_until(
            lambda: agent.stage_now and agent.stage_now.stage == "checkpoint", 5, "hint applied"
        )
        await asyncio.to_thread(
            mqtt_publish.single, f"{root}/hint", b"not json", qos=1, hostname="127.0.0.1", port=broker.port
        )
        await asyncio.to_thread(
            mqtt_publish.single,
            f"{root}/cmd/accept",
            b'{"cause":"cooling","by":"alice"}',
            qos=1,
            hostname="127.0.0.1",
            port=broker.port,
        )
        await await_until(lambda: engine.accepted, 5, "accept reached the engine")
        await await_until(lambda: agent.intake.counters["malformed"] == 1, 5, "bad hint counted")
        await await_until(lambda: sub.on("/event"), 5, "the accept event")
        agent.request_stop()
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    assert engine.accepted == ["cooling"]
    event = sub.on("/event")[0].json()
    jsonschema.validate(event, load_schema("event"))
    assert event["detail"]["by"] == "alice"


def test_a_node_hint_over_mqtt_reaches_that_nodes_timeline(
    tmp_path: Path, broker: Broker, subscribe: Callable[..., Subscriber]
) -> None:
    """The scheduler path: one rack `hint` topic, the node named in the payload (issue 14)."""
    import dataclasses

    import numpy as np

    from agent.node.config import NodeSection

    config = make_config(tmp_path / "state", broker.port, tick_s=0.05)
    config = dataclasses.replace(config, nodes=(NodeSection(id="n1", key_file=tmp_path / "k"),))
    agent = LiveAgent(config, engine_batch_s=0, driver_factory=lambda c: [FakeDriver("pdu.a", 0.05)],
                      engine=fake_link(FakeEngine(summary_every=0, event_every=0)))
    topic = "rackwatt/v1/s1/r1/hint"

    async def scenario() -> None:
        task = asyncio.create_task(agent.run())
        await await_until(lambda: agent.publisher and agent.publisher.connected, 10, "connect")
        for body in (b'{"stage":"checkpoint","job":"j7","node":"n1"}', b'{"stage":"eval","node":"n9"}'):
            await asyncio.to_thread(mqtt_publish.single, topic, body, qos=1, hostname="127.0.0.1",
                                    port=broker.port)
        await await_until(lambda: agent.intake.counters["unknown_node"] == 1, 5, "unknown node counted")
        now = np.array([time.time()])
        assert agent.node_timelines.labels_at("n1", now)[0].tolist() == ["checkpoint"]
        assert agent.stage_now is None or agent.stage_now.stage == ""  # the rack-wide stage is untouched
        agent.request_stop()
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())


def test_a_reload_that_adds_a_node_takes_its_hints_at_once(tmp_path: Path, broker: Broker) -> None:
    """A [[node]] added by SIGHUP (and nothing else changed): its hints are taken without a restart,
    and a node still listed keeps what it had."""
    import dataclasses

    import numpy as np

    from agent.node.config import NodeSection

    base = make_config(tmp_path / "state", broker.port, tick_s=0.05)
    config = dataclasses.replace(base, nodes=(NodeSection(id="n1", key_file=tmp_path / "k"),))
    grown = dataclasses.replace(config, nodes=(*config.nodes, NodeSection(id="n2", key_file=tmp_path / "k")))
    agent = LiveAgent(config, config_path=Path("agent.toml"), config_loader=lambda p: grown,
                      engine_batch_s=0, driver_factory=lambda c: [FakeDriver("pdu.a", 0.05)],
                      engine=fake_link(FakeEngine(summary_every=0, event_every=0)))
    topic = "rackwatt/v1/s1/r1/hint"

    async def hint(body: bytes) -> None:
        await asyncio.to_thread(mqtt_publish.single, topic, body, qos=1, hostname="127.0.0.1",
                                port=broker.port)

    async def scenario() -> None:
        task = asyncio.create_task(agent.run())
        await await_until(lambda: agent.publisher and agent.publisher.connected, 10, "connect")
        await hint(b'{"stage":"checkpoint","node":"n1"}')
        await await_until(lambda: agent.intake.counters["accepted"] == 1, 5, "n1's hint")
        agent.request_reload()
        await await_until(lambda: agent.tally.reloads == 1, 10, "the reload")
        await hint(b'{"stage":"eval","node":"n2"}')

        def n2_label() -> str | None:
            known = agent.node_timelines.knows("n2")
            return agent.node_timelines.labels_at("n2", np.array([time.time()]))[0] if known else None

        await await_until(lambda: agent.intake.counters["unknown_node"] or n2_label(), 5, "n2's hint")
        assert agent.intake.counters["unknown_node"] == 0, "n2 is known after the reload"
        assert n2_label() == "eval"
        now = np.array([time.time()])
        assert agent.node_timelines.labels_at("n1", now)[0].tolist() == ["checkpoint"], "n1's ring kept"
        agent.request_stop()
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
