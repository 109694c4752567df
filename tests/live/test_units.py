"""Small pieces of the live agent: logging, sd_notify, accept payloads, topics, record, poller."""

from __future__ import annotations

import asyncio
import io
import logging
import math
import socket
import time
from pathlib import Path

import numpy as np
import pytest

from agent.live import sdnotify
from agent.live.accept import parse_accept
from agent.live.clock import ScaledClock
from agent.live.logsetup import register_secret, setup_logging
from agent.live.loop import LiveAgent
from agent.live.outbox import Outbox
from agent.live.poller import Poller
from agent.live.record_cmd import TraceRecorder, trace_meta
from agent.live.store import Store
from agent.live.topics import Topics
from agent.trace.model import TraceChunk
from agent.trace.reader import open_trace
from drivers.base import PollResult
from tests.live.fakes import FakeDriver, make_config


def _log_lines(monkeypatch: pytest.MonkeyPatch, journald: bool) -> list[str]:
    if journald:
        monkeypatch.setenv("JOURNAL_STREAM", "8:1")
    else:
        monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    stream = io.StringIO()
    setup_logging(stream=stream)
    register_secret("hunter2-password")
    log = logging.getLogger("rackwatt.test")
    log.warning("connecting with hunter2-password to broker")
    try:
        raise ValueError("line one\nline two")
    except ValueError:
        log.exception("it failed")
    logging.getLogger().handlers.clear()
    return stream.getvalue().splitlines()


def test_logs_are_one_line_per_event_without_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _log_lines(monkeypatch, journald=False)
    assert len(lines) == 2, lines
    assert "hunter2-password" not in "".join(lines) and "***" in lines[0]
    assert lines[0][:4].isdigit() and "WARNING" in lines[0]
    assert "line one | line two" in lines[1] and "Traceback" in lines[1]


def test_journald_lines_carry_a_priority_and_no_timestamp(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = _log_lines(monkeypatch, journald=True)
    assert lines[0].startswith("<4>connecting") and lines[1].startswith("<3>it failed")


def test_sd_notify_sends_datagrams_and_is_a_no_op_without_systemd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert sdnotify.ready() is False
    path = tmp_path / "n.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(str(path))
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        assert sdnotify.ready("polling 3 devices")
        assert sdnotify.watchdog()
        assert sock.recv(100) == b"READY=1\nSTATUS=polling 3 devices"
        assert sock.recv(100) == b"WATCHDOG=1"
    monkeypatch.setenv("WATCHDOG_USEC", "3000000")
    assert sdnotify.watchdog_interval_s() == 1.5
    monkeypatch.setenv("WATCHDOG_PID", "1")
    assert sdnotify.watchdog_interval_s() is None  # the watchdog is for another process


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        (b"nope", "not JSON"),
        (b"[]", "JSON object"),
        (b'{"cause": "Cooling!"}', "cause"),
        (b'{"cause": "cooling", "rm": "-rf"}', "unknown field"),
        (b'{"cause": "cooling", "by": ""}', "by"),
        (b"{" + b" " * 2000 + b"}", "exceeds"),
    ],
)
def test_bad_accept_payloads_say_what_is_wrong(payload: bytes, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_accept(payload)


def test_accept_payload() -> None:
    assert parse_accept(b'{"cause":"power_chain","by":"alice"}') == ("power_chain", "alice")
    assert parse_accept(b'{"cause":"all"}') == ("all", "operator")


def test_topics() -> None:
    t = Topics.for_rack("rackwatt/v1/", "dc1", "r12")
    assert t.status == "rackwatt/v1/dc1/r12/status"
    assert t.baseline("eval") == "rackwatt/v1/dc1/r12/baseline/eval"
    assert t.kind_of("rackwatt/v1/dc1/r12/cmd/accept") == "cmd/accept"
    assert t.kind_of("rackwatt/v1/dc1/r13/status") is None


class _SlowDriver(FakeDriver):
    async def poll(self) -> PollResult:
        await asyncio.sleep(5)
        return await super().poll()


class _BrokenDriver(FakeDriver):
    async def poll(self) -> PollResult:
        raise RuntimeError("driver bug")


def test_poller_bounds_each_poll_and_survives_driver_bugs() -> None:
    async def scenario() -> Poller:
        slow = _SlowDriver("pdu.slow", interval_s=0.2)
        slow.where = "pdu 'slow' (10.0.3.7:161)"  # type: ignore[attr-defined]
        poller = Poller([slow, _BrokenDriver("crac.bug", 0.2), FakeDriver("pdu.ok", 0.05)], ScaledClock(1.0))
        poller.start()
        await asyncio.sleep(0.6)
        await poller.stop()
        return poller

    poller = asyncio.run(scenario())
    health = poller.health_dict()
    assert "deadline of 0.16 s" in health["pdu.slow"]["error"]
    assert health["pdu.slow"]["error"].startswith("pdu 'slow' (10.0.3.7:161): ")  # names host:port
    assert "RuntimeError: driver bug" in health["crac.bug"]["error"]
    assert health["pdu.ok"]["ok"] and health["pdu.ok"]["polls"] >= 5
    assert all(d.closed for d in poller.drivers)  # type: ignore[attr-defined]


def test_frames_carry_only_fresh_samples_and_the_stage(tmp_path: Path) -> None:
    agent = LiveAgent(make_config(tmp_path, 1), engine=False, driver_factory=lambda c: [])
    agent._build_stages()
    agent.intake.receive(b'{"stage":"eval","job":"j1","work_rate":12.5}', "unix")
    now = time.time()

    def frame(ts: float, signals: dict[str, float]) -> TraceChunk:  # one tick's row, as _tick builds it
        agent.frames.add(agent.make_row(ts, signals))
        return agent.frames.take_chunk()

    first = frame(now, {"pdu.a.power_w": 100.0, "gpu.0.power_w": 300.0})
    second = frame(now + 1, {"gpu.0.power_w": 310.0})
    assert first.stage[0] == "eval" and first.job[0] == "j1" and first.numeric["work_rate"][0] == 12.5
    assert second.numeric["gpu.0.power_w"][0] == 310.0
    assert math.isnan(second.numeric["pdu.a.power_w"][0]), "not sampled at this tick: NaN, never a stale copy"


def test_record_writes_a_trace_the_reader_accepts(tmp_path: Path) -> None:
    config = make_config(tmp_path / "state", 1, tick_s=0.05)
    out = tmp_path / "trace.csv"
    recorder = TraceRecorder(out, trace_meta(config), warmup_s=0.2)
    agent = LiveAgent(
        config,
        engine=False,
        frame_sinks=[recorder],
        driver_factory=lambda c: [FakeDriver("pdu.a", 0.05), FakeDriver("crac.x", 0.1)],
    )
    config = agent.config

    async def scenario() -> None:
        asyncio.get_running_loop().call_later(1.0, agent.request_stop)
        await agent.run()

    # MQTT is on in make_config but no broker listens on port 1: the agent must not care.
    asyncio.run(scenario())
    recorder.close()
    reader = open_trace(out)
    assert reader.meta.site == "s1" and reader.meta.rack == "r1"
    assert {"ts", "pdu.a.power_w", "crac.x.power_w"} <= set(reader.columns)
    chunks = list(reader)
    ts = np.concatenate([c.ts for c in chunks])
    assert len(ts) >= 10 and np.all(np.diff(ts) > 0)
    power = np.concatenate([c.column("pdu.a.power_w") for c in chunks])
    assert np.nanmin(power) >= 5000


@pytest.mark.parametrize(
    "datagram",
    [
        b'{"stage":"checkpoint","job":"llama-70b-r3","work_rate":1834.5,"ts":1764400000.1}',
        b'{"stage":"eval"}',
        b'{"command":"accept","cause":"cooling"}',
        b'{"stage":"Bad-Label"}',
        b'{"stage":"eval","extra":1}',
        b'{"stage":"eval","work_rate":-1}',
        b'{"command":"accept","cause":"weather"}',
        b'{"job":"j1"}',
    ],
)
def test_hint_schema_agrees_with_the_hint_parser(datagram: bytes) -> None:
    import json

    import jsonschema

    from agent.stages.hints import HintError, parse_datagram
    from tests.live.conftest import load_schema

    try:
        parse_datagram(datagram, "mqtt", now=1764400010.0)
        parser_ok = True
    except HintError:
        parser_ok = False
    schema_ok = jsonschema.Draft202012Validator(load_schema("hint")).is_valid(json.loads(datagram))
    assert schema_ok == parser_ok


def test_engine_drift_events_as_published_match_the_event_schema(tmp_path: Path) -> None:
    import jsonschema

    from agent.engine.drift.events import drift_event
    from tests.live.conftest import load_schema

    published: list[dict] = []
    onset = drift_event(
        1764400000.0,
        "onset",
        "cooling",
        "forward_backward",
        6.1,
        "cooling",
        1764399000.0,
        [{"signal": "crac.1.power_w", "moved_pct": 6.1}],
        "Cooling uses more power.",
    )
    cleared = drift_event(
        1764403600.0, "cleared", "cooling", None, None, "cooling", 1764399000.0, [], "Accepted."
    )  # type: ignore[arg-type]
    store = Store.open(tmp_path / "state", 1 << 20)
    outbox = Outbox(
        Topics.for_rack("rackwatt/v1", "s1", "r1"), store, site="s1", rack="r1", qos=1, keep=False,
        observe=lambda kind, topic, payload: published.append(payload),
    )
    outbox.reports([onset, cleared])
    store.close()
    schema = load_schema("event")
    assert [p["seq"] for p in published][1] == published[0]["seq"] + 1
    for payload in published:
        jsonschema.validate(payload, schema)
        assert payload["site"] == "s1" and payload["detail"]["playbook"].endswith("#cooling")
