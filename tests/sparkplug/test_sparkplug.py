"""Sparkplug B output, decoded with Eclipse Tahu's own protobuf definitions (``tahutils``).

Encoding is checked message by message against Tahu's ``sparkplug_b_pb2``; the bridge runs as
``rackwatt sparkplug`` against a real Mosquitto, fed a real engine's summary payloads, and its
NBIRTH / NDATA / NDEATH (explicit and as the broker-published will) are decoded from the wire.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.client import CallbackAPIVersion
from tahutils.tahu import sparkplug_b_pb2 as pb  # Eclipse Tahu's generated code (test extra)

from agent.sparkplug.node import EdgeNode, summary_metrics
from agent.sparkplug.payload import BOOLEAN, DOUBLE, STRING, UINT64, Metric, encode_payload
from agent.trace.model import J_PER_KWH
from tests.conftest import REPO_ROOT
from tests.live.conftest import Broker, wait_until


def _decode(data: bytes) -> Any:
    payload = pb.Payload()
    payload.ParseFromString(data)
    return payload


def _values(payload: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in payload.metrics:
        if m.is_null:
            out[m.name] = None
        else:
            out[m.name] = {10: m.double_value, 11: m.boolean_value, 12: m.string_value, 8: m.long_value}[
                m.datatype
            ]
    return out


def _summary(it_w: float | None = 9000.0, stages: tuple[str, ...] = ("forward_backward",)) -> dict[str, Any]:
    return {
        "v": 1,
        "seq": 1,
        "ts": 1.8e9,
        "site": "dc1",
        "rack": "r07",
        "warm": True,
        "stage": stages[0],
        "stage_source": "hint",
        "job": "run-3",
        "power_w": {
            "gpu": 6000.0,
            "it": it_w,
            "it_expected": 8900.0,
            "cooling": 3000.0,
            "cooling_expected": None,
        },
        "lag": {"tau_s": 240.0, "dead_s": 60.0, "learned": True},
        "stages": {
            s: {"level_w": 12000.0, "band_w": [11000, 13000], "ratio": 1.3, "samples": 40, "updated": 1.8e9}
            for s in stages
        },
        "energy_kwh": {s: {"it": 1.5, "cooling": 0.5, "gpu": 1.0} for s in stages},
        "held": ["cooling"],
    }


def test_every_value_kind_decodes_with_tahu() -> None:
    data = encode_payload(
        1234,
        [
            Metric("a/b", DOUBLE, -1.25e6, alias=3, timestamp_ms=99),
            Metric("s", STRING, "ünïcode"),
            Metric("t", BOOLEAN, False),
            Metric("n", DOUBLE, float("nan")),
            Metric("bdSeq", UINT64, 2**40),
        ],
        255,
    )
    p = _decode(data)
    assert p.timestamp == 1234 and p.seq == 255
    assert _values(p) == {"a/b": -1.25e6, "s": "ünïcode", "t": False, "n": None, "bdSeq": 2**40}
    assert p.metrics[0].alias == 3 and p.metrics[0].timestamp == 99 and p.metrics[3].is_null


def test_birth_then_only_changes_then_rebirth_for_a_new_metric() -> None:
    node = EdgeNode("dc1", "r07")
    topic, data = node.update(_summary(), 1)
    birth = _decode(data)
    assert topic == "spBv1.0/dc1/NBIRTH/r07" and birth.seq == 0
    values = _values(birth)
    assert values["bdSeq"] == 0 and values["power/it_w"] == 9000.0 and values["power/facility_w"] == 12000.0
    assert values["power/cooling_expected_w"] is None  # unknown is null, never 0
    assert values["energy/forward_backward/it_j"] == pytest.approx(1.5 * J_PER_KWH)
    assert values["drift/cooling/held"] is True and values["stage"] == "forward_backward"
    assert set(values) - {"bdSeq"} == set(summary_metrics(_summary()))
    assert node.update(_summary(), 2) is None  # nothing changed: nothing sent
    topic, data = node.update(_summary(it_w=9100.0), 3)
    change = _decode(data)
    assert topic == "spBv1.0/dc1/NDATA/r07" and change.seq == 1
    assert _values(change) == {"power/it_w": 9100.0, "power/facility_w": 12100.0}
    topic, data = node.update(_summary(stages=("forward_backward", "eval")), 4)
    assert topic.endswith("/NBIRTH/r07") and _decode(data).seq == 0
    assert "baseline/eval/level_w" in _values(_decode(data))
    death_topic, death = node.death(5)
    assert death_topic == "spBv1.0/dc1/NDEATH/r07" and _values(_decode(death)) == {"bdSeq": 0}
    assert not _decode(death).HasField("seq")


def _publisher(port: int) -> mqtt.Client:
    c = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id=f"agent-{os.getpid()}")
    c.connect("127.0.0.1", port, keepalive=10)
    c.loop_start()
    return c


@pytest.mark.slow
def test_the_bridge_on_a_real_broker_births_updates_and_dies(broker: Broker, subscribe: Any) -> None:
    from agent.engine import Engine, rack_info

    sys.path.insert(0, str(REPO_ROOT / "tests" / "engine"))
    import synth

    engine = Engine(None, rack_info(synth.meta()), site="dc1", rack_name="r07")
    for chunk in synth.chunks(1 / 24, seed=2, chunk_rows=900):
        engine.process(chunk)
    real = engine.summary_payload(synth.T0 + 3600)  # a real summary, not a hand-made one
    sub = subscribe(broker.port, "spBv1.0/#")
    bridge = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent",
            "sparkplug",
            "--site",
            "dc1",
            "--rack",
            "r07",
            "--mqtt",
            f"127.0.0.1:{broker.port}",
            "--duration",
            "60",
        ],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    agent = _publisher(broker.port)
    try:

        def births() -> list[Any]:
            agent.publish("rackwatt/v1/dc1/r07/summary", json.dumps(real), qos=1)
            return sub.on("/NBIRTH/r07")

        wait_until(births, 20, "NBIRTH", step_s=0.5)
        values = _values(_decode(sub.on("/NBIRTH/r07")[0].payload))
        assert values["bdSeq"] == 0 and values["stage"] == real["stage"]
        assert values["power/it_w"] == pytest.approx(real["power_w"]["it"])
        for stage, parts in real["energy_kwh"].items():
            assert values[f"energy/{stage}/cooling_j"] == pytest.approx(parts["cooling"] * J_PER_KWH)
        changed = {**real, "power_w": {**real["power_w"], "it": real["power_w"]["it"] + 50.0}}
        agent.publish("rackwatt/v1/dc1/r07/summary", json.dumps(changed), qos=1)
        wait_until(lambda: sub.on("/NDATA/r07"), 10, "NDATA")
        ndata = _decode(sub.on("/NDATA/r07")[0].payload)
        assert ndata.seq == 1 and _values(ndata)["power/it_w"] == pytest.approx(real["power_w"]["it"] + 50.0)
        assert "stage" not in _values(ndata)  # only what changed
        agent.publish("rackwatt/v1/dc1/r07/status", json.dumps({"v": 1, "state": "offline"}), qos=1)
        wait_until(lambda: sub.on("/NDEATH/r07"), 10, "NDEATH when the agent goes offline")
        assert _values(_decode(sub.on("/NDEATH/r07")[0].payload)) == {"bdSeq": 0}
        agent.publish("rackwatt/v1/dc1/r07/summary", json.dumps(real), qos=1)
        wait_until(lambda: len(sub.on("/NBIRTH/r07")) >= 2, 10, "NBIRTH when the agent is back")
        bridge.send_signal(signal.SIGKILL)  # no clean exit: the broker publishes the will
        bridge.wait(10)
        wait_until(lambda: len(sub.on("/NDEATH/r07")) >= 2, 60, "the will (NDEATH) after a kill")
        assert _values(_decode(sub.on("/NDEATH/r07")[-1].payload)) == {"bdSeq": 0}
    finally:
        agent.loop_stop()
        agent.disconnect()
        if bridge.poll() is None:
            bridge.kill()
        bridge.wait(10)
