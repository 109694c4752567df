"""The energy query end to end inside one process: the real client, socket, listener, intake and
answerer, over an engine's ledger (a real engine fed the synthetic rack, or a hand-filled ledger)."""

from __future__ import annotations

import json
import threading
import time
import types
from pathlib import Path

import numpy as np
import pytest
import synth
from rackwatt_client import EnergyClient, StageClient

from agent.engine import Engine, rack_info
from agent.engine.energy_ledger import EnergyLedger
from agent.engine.signals import N_FIELDS, F
from agent.stages.energy_query import parse_query
from agent.stages.hints import HintError
from tests.client.client_peers import ListenerThread


@pytest.fixture(scope="module")
def engine() -> Engine:
    eng = Engine(None, rack_info(synth.meta()))
    for chunk in synth.chunks(2 / 24, seed=4, chunk_rows=900):
        eng.process(chunk)
    return eng


def _client(path: Path, job: str | None = None) -> EnergyClient:
    stage = StageClient(socket_path=str(path), job="")
    return EnergyClient(socket_path=str(path), job=job, timeout_s=2.0, stage_client=stage)


def test_a_window_gets_exactly_what_the_ledger_accounted(
    engine: Engine, sock_dir: Path, no_nvml: None
) -> None:
    led = engine.ledger
    assert led.accounted_from is not None
    now = [led.accounted_from + 600.0]
    path = sock_dir / "stage.sock"
    with ListenerThread(path, engine, clock=lambda: now[0]) as agent:
        client = _client(path)
        client.begin_window("epoch")
        now[0] += 1800.0
        m = client.end_window("epoch")
        expect = led.interval(led.accounted_from + 600.0, led.accounted_from + 2400.0)
        assert (m.start_ts, m.end_ts) == (led.accounted_from + 600.0, led.accounted_from + 2400.0)
        assert m.facility_energy_j == pytest.approx(expect.facility_j, rel=1e-12)
        assert m.it_energy_j == pytest.approx(expect.it_j, rel=1e-12)
        assert m.cooling_energy_j == pytest.approx(expect.cooling_j, rel=1e-12)
        assert m.facility_energy_j > 1e6 and not m.pending and m.job is None
        assert set(m.unavailable) == {"gpu_energy_j"} and "pynvml" in m.unavailable["gpu_energy_j"]
        assert m.gpu_energy_j is None and 0 <= m.elapsed_s < 5
        assert agent.intake.counters["queries"] == 2
        mine = _client(path, job="j1")
        mine.begin_window("w")
        other = _client(path, job="someone-else")
        other.begin_window("w")
        now[0] += 60.0
        assert mine.end_window("w").facility_energy_j == pytest.approx(
            led.interval(now[0] - 60.0, now[0]).facility_j, rel=1e-12
        )
        theirs = other.end_window("w")
        assert theirs.facility_energy_j is None
        assert "'someone-else'" in theirs.unavailable["facility_energy_j"]
        client.close(), mine.close(), other.close()


def _bins(led: EnergyLedger, starts: list[float], power_w: float) -> None:
    sums = np.zeros((len(starts), N_FIELDS))
    for name in ("pdu_s", "cool_s", "gpu_s"):
        sums[:, F[name]] = led.bin_s
    sums[:, F["pdu_ws"]] = power_w * led.bin_s
    sums[:, F["cool_ws"]] = 0.25 * power_w * led.bin_s
    led.add(np.array(starts), sums, [""] * len(starts))


def test_end_window_waits_for_the_agent_to_account_the_end(sock_dir: Path, no_nvml: None) -> None:
    t = 1.8e9
    led = EnergyLedger(10.0)
    _bins(led, [t + 10 * k for k in range(6)], 20_000.0)
    now = [t + 15.0]
    path = sock_dir / "stage.sock"
    with ListenerThread(path, types.SimpleNamespace(ledger=led), clock=lambda: now[0]):
        client = _client(path)
        client.begin_window("step")
        now[0] = t + 95.0  # beyond the last accounted bin (t + 60)
        m = client.end_window("step")
        assert m.pending and m.facility_energy_j is None
        assert m.unavailable["facility_energy_j"].startswith("not yet accounted")
        late = threading.Timer(0.5, _bins, (led, [t + 60 + 10 * k for k in range(4)], 20_000.0))
        late.start()
        done = client.refresh(m, wait_s=5.0)
        late.join()
        assert not done.pending
        assert done.it_energy_j == pytest.approx(80 * 20_000.0)
        assert done.facility_energy_j == pytest.approx(80 * 25_000.0)
        client.close()


def test_an_agent_gone_at_the_windows_end_can_be_asked_again_later(sock_dir: Path, no_nvml: None) -> None:
    t = 1.8e9
    led = EnergyLedger(10.0)
    _bins(led, [t + 10 * k for k in range(30)], 10_000.0)
    path = sock_dir / "stage.sock"
    with ListenerThread(path, types.SimpleNamespace(ledger=led), clock=lambda: t + 20.0):
        client = _client(path)
        client.begin_window("epoch")
    time.sleep(0.3)
    m = client.end_window("epoch")  # the agent is restarting
    assert m.facility_energy_j is None and "refresh() asks again" in m.unavailable["facility_energy_j"]
    assert m.start_ts == t + 20.0 and m.end_ts == pytest.approx(t + 20.0 + m.elapsed_s)
    with ListenerThread(path, types.SimpleNamespace(ledger=led), clock=lambda: t + 250.0):
        again = client.refresh(m)
    assert again.it_energy_j == pytest.approx(10_000.0 * (m.end_ts - m.start_ts), rel=1e-6)
    client.close()


def test_an_absent_or_engineless_agent_gives_reasons_and_never_raises(sock_dir: Path, no_nvml: None) -> None:
    gone = _client(sock_dir / "nobody.sock")
    gone.begin_window("a")
    m = gone.end_window("a", wait_s=0.5)
    assert m.facility_energy_j is None and "nobody.sock" in m.unavailable["facility_energy_j"]
    path = sock_dir / "stage.sock"
    with ListenerThread(path, None):
        client = _client(path)
        client.begin_window("a")
        m = client.end_window("a")
        assert m.it_energy_j is None and "no engine" in m.unavailable["it_energy_j"]
        with pytest.raises(ValueError, match="'b' was not begun"):
            client.end_window("b")
        client.begin_window("b")
        with pytest.raises(ValueError, match="'b' has already begun"):
            client.begin_window("b")
        client.close()
    gone.close()


def test_queries_only_over_the_unix_socket_and_bad_ones_are_counted() -> None:
    from agent.stages.energy_query import engine_answerer
    from agent.stages.intake import HintIntake
    from agent.stages.peers import PeerCred
    from agent.stages.timeline import StageTimeline

    led = EnergyLedger(10.0)
    answerer = engine_answerer(lambda: types.SimpleNamespace(ledger=led), time.time)
    intake = HintIntake(StageTimeline(), on_query=answerer)
    sent: list[bytes] = []
    me = PeerCred(pid=1, uid=1000, gid=1000)
    query = b'{"query":"energy","id":3}'
    assert not intake.receive(query, "udp", "127.0.0.1:5000", reply=sent.append)
    assert not intake.receive(query, "mqtt", "scheduler")
    assert intake.counters["unauthorized"] == 2 and not sent
    assert intake.receive(query, "unix", me.key, peer=me, reply=sent.append)
    assert json.loads(sent[-1])["id"] == 3 and "now" in json.loads(sent[-1])
    for bad, reason in (
        (b'{"query":"energy","id":-1}', "bad_value"),
        (b'{"query":"power","id":1}', "unknown_field"),
        (b'{"query":"energy","id":1,"extra":1}', "unknown_field"),
        (b'{"query":"energy","id":1,"t0":12}', "bad_ts"),
        (b'{"query":"energy","id":1,"t0":true}', "bad_ts"),
        (b'{"query":"energy","id":1,"t0":"1.8e9"}', "bad_ts"),
        (b'{"query":"energy","id":1,"t0":1.8e9,"t1":1.7e9}', "bad_value"),
        (b'{"query":"energy","id":1,"t1":1.8e9}', "bad_value"),
        (b'{"query":"energy","id":1,"job":"a b"}', "bad_value"),
    ):
        before = intake.counters[reason]
        assert not intake.receive(bad, "unix", me.key, peer=me, reply=sent.append), bad
        assert intake.counters[reason] == before + 1, bad
    assert len(sent) == 1
    # a hint whose job happens to be called "query" is still a hint
    assert parse_query(b'{"stage":"eval","job":"query"}') is None
    assert intake.receive(b'{"stage":"eval","job":"query"}', "unix", me.key, peer=me)
    with pytest.raises(HintError):
        parse_query(b'{"query":"energy"}')
