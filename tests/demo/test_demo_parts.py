"""The demo's parts: generated config, scenario and fault plan, hints, engine batches, the view.

Everything here runs in-process in a few seconds; the end-to-end runs are in test_demo_run.py.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import shutil
import socket
import stat
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.config.loader import load_config
from agent.config.paths import unix_socket_problem
from agent.live.cli_types import non_negative, positive
from agent.live.demo.engine_feed import IntervalThinner
from agent.live.demo.hints import StageHinter
from agent.live.demo.rack import PDU_VENDORS, DemoRack, DevicePorts, InletProbeDriver
from agent.live.demo.session import (
    FAULT_AFTER_H,
    FAULT_WARMUP_H,
    HEALTHY_WARMUP_H,
    DemoOptions,
    build_scenario,
    header_lines,
    intervals_for,
    private_workdir,
)
from agent.live.demo.setup import STAGE_SOCKET, Intervals, MqttTarget, pick_ports, write_config
from agent.live.demo.view import AnsiScreen, DemoState, PlainLog, screen_lines
from agent.sim import FAULT_KINDS
from agent.stages.hints import Hint, parse_datagram
from agent.trace.model import TraceChunk
from drivers.base import PollResult
from drivers.registry import build_drivers


def _config(tmp_path: Path, mqtt: MqttTarget | None = None) -> tuple[Path, str]:
    return write_config(
        tmp_path,
        site="demo",
        rack="r07",
        ports=pick_ports(),
        crac_id="1",
        crac_share=0.25,
        intervals=Intervals(),
        mqtt=mqtt,
    )


def test_generated_config_loads_cleanly_with_a_private_community_file(tmp_path: Path) -> None:
    path, community = _config(tmp_path)
    config = load_config(path)
    assert config.warnings == ()  # a world-readable secret file would warn
    assert [p.id for p in config.pdus] == list(PDU_VENDORS)
    assert [p.profile for p in config.pdus] == list(PDU_VENDORS.values())
    community_file = config.pdus[0].community_file
    assert community_file is not None
    assert stat.S_IMODE(community_file.stat().st_mode) == 0o600
    assert community_file.read_text().strip() == community
    assert community not in path.read_text()  # the secret lives only in its file
    assert not config.mqtt.enabled
    signals = {r.signal for r in config.cracs[0].registers}
    assert signals == {"supply_temp_c", "return_temp_c", "fan_pct"}


def test_generated_config_publishes_to_the_given_broker(tmp_path: Path) -> None:
    config = load_config(_config(tmp_path, MqttTarget("127.0.0.1", 18830))[0])
    assert config.mqtt.enabled and (config.mqtt.host, config.mqtt.port) == ("127.0.0.1", 18830)


@pytest.mark.parametrize("speed", [30.0, 60.0, 120.0, 600.0])
def test_poll_intervals_keep_the_real_poll_rate_bounded(speed: float) -> None:
    iv = intervals_for(speed)
    real_polls_per_s = speed * (1 / iv.nvml_s + 2 / iv.pdu_s + 1 / iv.crac_s + 1 / iv.inlet_s)
    assert real_polls_per_s <= 30.0
    assert iv.nvml_s <= iv.pdu_s <= iv.crac_s
    assert iv.tick_s >= 1.0


@pytest.mark.parametrize("fault", [*FAULT_KINDS, "workload"])
def test_a_fault_starts_shortly_after_the_replayed_warm_up(fault: str) -> None:
    live = 1.8e9
    opts = DemoOptions(fault=fault, days=2)
    scenario, note = build_scenario(opts, live)
    assert opts.effective_warmup_h == FAULT_WARMUP_H
    assert scenario.start_ts == pytest.approx(live - FAULT_WARMUP_H * 3600)
    if fault == "workload":
        assert scenario.plan.workload_change_h == pytest.approx(FAULT_WARMUP_H + FAULT_AFTER_H)
        assert "workload" in note
    else:
        (spec,) = scenario.faults
        assert spec.kind == fault and spec.start_h == pytest.approx(FAULT_WARMUP_H + FAULT_AFTER_H)
        assert FAULT_KINDS[fault][0] in note  # the cause to expect is named
    assert any("replayed" in line for line in header_lines(opts, intervals_for(60), note))


def test_without_a_fault_a_short_healthy_warm_up_is_replayed() -> None:
    """So that the default run shows predictions: from scratch they came after ~2.3 simulated hours."""
    opts = DemoOptions(days=1)
    scenario, note = build_scenario(opts, 1.8e9)
    assert opts.effective_warmup_h == HEALTHY_WARMUP_H >= 2.5
    assert scenario.faults == () and note == "" and scenario.start_ts == 1.8e9 - HEALTHY_WARMUP_H * 3600
    assert any("replayed" in line for line in header_lines(opts, intervals_for(60), note))


def test_warmup_zero_starts_from_scratch_now() -> None:
    opts = DemoOptions(days=1, warmup_h=0.0)
    scenario, note = build_scenario(opts, 1.8e9)
    assert scenario.start_ts == 1.8e9
    assert any("no warm-up" in line for line in header_lines(opts, intervals_for(60), note))


def test_demo_help_and_docs_state_the_warm_ups_the_code_uses() -> None:
    import argparse

    from agent.live import demo_cmd

    parser = argparse.ArgumentParser()
    demo_cmd.configure(parser)
    help_text = " ".join(parser.format_help().split())
    assert f"default {FAULT_WARMUP_H:g} with --fault, else {HEALTHY_WARMUP_H:g}" in help_text
    docs = " ".join((Path(__file__).resolve().parents[2] / "docs" / "demo.md").read_text().split())
    assert f"first {FAULT_WARMUP_H:g} simulated hours" in docs
    assert f"replays {HEALTHY_WARMUP_H:g} healthy simulated hours" in docs


def test_concat_chunks_fills_columns_a_chunk_lacks_with_nan() -> None:
    def chunk(ts: float, **cols: float) -> TraceChunk:
        return TraceChunk(
            ts=np.array([ts]),
            numeric={k: np.array([v]) for k, v in cols.items()},
            stage=np.array(["idle"], dtype=object),
            job=np.array([""], dtype=object),
        )

    merged = TraceChunk.concat([chunk(1.0, a=1.0), chunk(2.0, a=2.0, b=5.0), chunk(3.0, b=6.0)])
    assert list(merged.ts) == [1.0, 2.0, 3.0]
    assert list(merged.numeric["a"][:2]) == [1.0, 2.0] and math.isnan(merged.numeric["a"][2])
    assert math.isnan(merged.numeric["b"][0]) and list(merged.numeric["b"][1:]) == [5.0, 6.0]


def test_thinning_keeps_the_first_sample_of_each_poll_interval_across_chunks() -> None:
    thinner = IntervalThinner(100.0, {"gpu": 5.0, "pdu": 10.0})

    def chunk(start: int, n: int, pdu_every: int) -> TraceChunk:
        ts = np.arange(start, start + n, dtype=float) + 100.0
        pdu = np.where(np.arange(start, start + n) % pdu_every == 3, ts, math.nan)  # sampled at offset 3
        return TraceChunk(
            ts=ts,
            numeric={"gpu.0.power_w": ts.copy(), "pdu.b.power_w": pdu, "work_rate": ts.copy()},
            stage=np.array(["idle"] * n, dtype=object),
            job=np.array([""] * n, dtype=object),
        )

    first, second = thinner.thin(chunk(0, 12, 5)), thinner.thin(chunk(12, 12, 5))
    gpu = np.concatenate([first.numeric["gpu.0.power_w"], second.numeric["gpu.0.power_w"]])
    pdu = np.concatenate([first.numeric["pdu.b.power_w"], second.numeric["pdu.b.power_w"]])
    assert list(np.flatnonzero(~np.isnan(gpu))) == [0, 5, 10, 15, 20]  # one per 5 s, chunk edge included
    assert list(np.flatnonzero(~np.isnan(pdu))) == [3, 13, 23]  # first sample in each 10 s window
    assert pdu[13] == 113.0  # values are kept, not shifted
    assert not np.isnan(first.numeric["work_rate"]).any()  # columns of no device are untouched


def test_stage_hinter_sends_valid_hints_on_change_and_keepalive(tmp_path: Path) -> None:
    path = tmp_path / "stage.sock"
    receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    receiver.bind(str(path))
    receiver.settimeout(2)
    now = [1000.0]
    current = [("forward_backward", "j001", 1234.56)]
    hinter = StageHinter(path, lambda: current[0], lambda: now[0], keepalive_s=60)
    try:
        assert hinter.step()
        hint = parse_datagram(receiver.recv(2048), "unix", now[0])
        assert isinstance(hint, Hint)
        assert (hint.stage, hint.job, hint.work_rate) == ("forward_backward", "j001", pytest.approx(1234.6))
        assert not hinter.step()  # nothing changed
        current[0] = ("idle", "", math.nan)
        assert hinter.step()
        idle = parse_datagram(receiver.recv(2048), "unix", now[0])
        assert isinstance(idle, Hint) and idle.stage == "idle" and not idle.job
        now[0] += 61
        assert hinter.step()  # keepalive
        assert hinter.sent == 3
    finally:
        receiver.close()


def test_stage_hinter_survives_a_missing_socket(tmp_path: Path) -> None:
    hinter = StageHinter(tmp_path / "absent.sock", lambda: ("idle", "", math.nan), time.time)
    assert not hinter.step() and hinter.failed == 1


def _summary(seq: int, stages: dict[str, float]) -> dict[str, object]:
    return {
        "seq": seq,
        "stage": "eval",
        "stage_source": "hint",
        "warm": True,
        "transient": False,
        "held": [],
        "power_w": {
            "gpu": 4000.0,
            "it": 6000.0,
            "it_expected": 5900.0,
            "cooling": 2000.0,
            "cooling_expected": 2100.0,
        },
        "lag": {"tau_s": 240.0, "dead_s": 60.0, "learned": True},
        "stages": {
            name: {"level_w": level, "band_w": [level * 0.9, level * 1.1], "samples": 3}
            for name, level in stages.items()
        },
    }


EVENT = {
    "type": "event",
    "ts": 1.8e9,
    "state": "onset",
    "cause": "thermal",
    "stage": "eval",
    "deviation_pct": 12.5,
    "detail": {"explanation": "inlet spread wider than usual"},
    "seq": 3,
}


def test_state_and_views_show_what_was_observed() -> None:
    state = DemoState(header=["HEADER"], speed=60)
    state.observe("summary", "rackwatt/v1/demo/r07/summary", _summary(1, {"idle": 3500.0}))
    state.observe("summary", "rackwatt/v1/demo/r07/summary", _summary(2, {"idle": 3500.0, "eval": 8100.0}))
    state.observe("event", "rackwatt/v1/demo/r07/event", EVENT)
    assert state.facility_w() == (8000.0, 8000.0)
    lines = screen_lines(state)
    text = "\n".join(lines)
    assert lines[0] == "HEADER"
    assert "8.10 kW" in text and "3.50 kW" in text  # both baselines
    assert "cause=thermal" in text and "inlet spread" in text
    assert "no broker: showing what would be published" in text
    assert "rackwatt/v1/demo/r07/event" in text  # last message per topic

    out = io.StringIO()
    plain = PlainLog(out)
    plain.update(state)
    plain.update(state)  # nothing new: nothing printed twice
    printed = out.getvalue().splitlines()
    assert sum("summary seq 2" in line for line in printed) == 1
    assert sum("ONSET cause=thermal" in line for line in printed) == 1
    assert any("baselines now for: eval, idle" in line for line in printed)
    assert all("\x1b" not in line for line in printed)


def test_ansi_screen_redraws_in_place() -> None:
    out = io.StringIO()
    screen = AnsiScreen(out)
    screen.draw(["one", "two"])
    screen.draw(["three"])
    screen.close()
    text = out.getvalue()
    assert text.count("\x1b[2J") == 1  # the screen is cleared once, then redrawn from home
    assert text.count("\x1b[H") == 2 and "three\x1b[K" in text


@pytest.mark.slow
def test_every_demo_device_answers_through_its_real_driver(tmp_path: Path) -> None:
    """The loopback devices, polled once each by the drivers the agent uses."""
    scenario, _ = build_scenario(DemoOptions(days=1), time.time())
    path, community = write_config(
        tmp_path,
        site="demo",
        rack="r07",
        ports=(ports := pick_ports()),
        crac_id=scenario.rack.cooling.crac_id,
        crac_share=0.25,
        intervals=Intervals(),
        mqtt=None,
    )
    config = load_config(path)

    async def poll_all() -> dict[str, PollResult]:
        rack = DemoRack(scenario, lambda: scenario.start_ts + 600)  # time stands still: compare to truth
        await rack.start(ports, community)
        try:
            drivers = [*build_drivers(config), InletProbeDriver(rack)]
            results = {d.device: await d.poll() for d in drivers}
            for d in drivers:
                await d.close()
            return results
        finally:
            await rack.stop()

    results = asyncio.run(asyncio.wait_for(poll_all(), timeout=60))
    assert set(results) == {"pdu.a", "pdu.b", "crac.1", "nvml", "inlet"}
    for device, result in results.items():
        assert result.ok, f"{device}: {result.error}"
    truth = DemoRack(scenario, lambda: scenario.start_ts + 600).snapshot()
    signals = {k: v for r in results.values() for k, v in r.signals.items()}
    for feed in PDU_VENDORS:  # the value the twin serves comes back through the vendor encoding
        served_w = truth[f"pdu.{feed}"]["power_w"]
        assert signals[f"pdu.{feed}.power_w"] == pytest.approx(served_w, rel=0.05, abs=20)
    assert signals["crac.1.power_w"] == pytest.approx(truth["crac.1"]["power_w"], rel=0.05)
    assert signals["gpu.0.power_w"] == pytest.approx(truth["gpu.0"]["power_w"], rel=0.05, abs=2)
    assert {"inlet.top.temp_c", "crac.1.supply_temp_c", "crac.1.fan_pct"} <= set(signals)
    json.dumps({k: v for k, v in signals.items()})  # plain floats


def test_under_a_long_tmpdir_the_demo_dir_still_fits_its_stage_socket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A test runner's or a deep home's TMPDIR made the stage socket path too long for sockaddr_un,
    and the demo stopped with an internal ConfigError."""
    deep = tmp_path / ("d" * 90)
    deep.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    assert unix_socket_problem(Path(tempfile.mkdtemp(dir=deep)) / STAGE_SOCKET) is not None  # the premise
    workdir = private_workdir()
    try:
        assert unix_socket_problem(workdir / STAGE_SOCKET) is None
        assert workdir.is_dir() and len(list(deep.iterdir())) == 1  # only the premise's dir: none left behind
    finally:
        shutil.rmtree(workdir)


def test_a_device_port_taken_during_the_warm_up_is_picked_again(
    short_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The ports are picked before the warm-up and bound after it: another program may take one in
    between. The demo picks fresh ports instead of stopping with an internal error."""
    import agent.live.demo.session as session

    taken = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    picks: list[int] = []

    def pick() -> DevicePorts:
        ports = pick_ports()
        if not picks:  # the first pick's cooling-unit port is the one another program holds
            ports = DevicePorts(pdu=ports.pdu, crac=taken.getsockname()[1])
        picks.append(ports.crac)
        return ports

    monkeypatch.setattr(session, "pick_ports", pick)
    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))
    out = io.StringIO()
    try:
        code = asyncio.run(session.run_demo(DemoOptions(duration_s=2.0, warmup_h=0.0, days=1), out))
    finally:
        taken.close()
    assert code == 0, out.getvalue()[-2000:]
    assert len(picks) == 2 and picks[0] != picks[1]
    assert "internal error" not in out.getvalue() and "summar" in out.getvalue()


def test_stage_hinter_does_not_resend_an_unknown_rate(tmp_path: Path) -> None:
    """A NaN or negative work rate is not sent; it is the same unknown rate at every step (NaN != NaN)."""
    path = tmp_path / "stage.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(str(path))
        current = [("eval", "j1", math.nan)]
        hinter = StageHinter(path, lambda: current[0], lambda: 1000.0)
        assert hinter.step() and not hinter.step()
        current[0] = ("eval", "j1", -1.0)
        assert not hinter.step()
        assert json.loads(receiver.recv(2048)) == {"stage": "eval", "job": "j1"}


@pytest.mark.parametrize(("parse", "text"), [(positive, "0"), (positive, "nan"), (non_negative, "-1"),
                                             (non_negative, "nan"), (non_negative, "x")])
def test_cli_number_types_refuse(parse: Any, text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse(text)


def test_cli_number_types_accept() -> None:
    assert (positive("2.5"), non_negative("0")) == (2.5, 0.0)
