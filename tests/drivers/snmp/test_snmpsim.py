"""The SNMP PDU driver against snmpsim serving generated vendor recordings (v2c and v3)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
from pysnmp.hlapi.v3arch.asyncio import SnmpEngine

from agent.config.model import SnmpOid
from drivers.base import PollResult
from drivers.snmp_pdu.driver import SnmpPduDriver
from tests.conftest import free_port
from tests.drivers.snmp.recordings import BUILDERS, unknown_device

pytestmark = pytest.mark.slow  # one snmpsim start (~1 s) plus deliberate timeouts


@pytest.fixture(scope="module")
def sim(snmpsim_factory: Any) -> Any:
    recordings = {name: build()[0] for name, build in BUILDERS.items()}
    recordings["unknown"] = unknown_device()
    return snmpsim_factory(recordings)


async def _poll(cfg: Any, times: int = 1, **kwargs: Any) -> tuple[list[PollResult], SnmpPduDriver]:
    driver = SnmpPduDriver(cfg, **kwargs)
    try:
        results = [await driver.poll() for _ in range(times)]
    finally:
        await driver.close()
    return results, driver


def _values(result: PollResult, device: str) -> dict[str, float]:
    prefix = f"pdu.{device}."
    return {k[len(prefix):]: v for k, v in result.signals.items()
            if k.startswith(prefix) and k.count(".") == 2}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_auto_profile_decodes_each_vendor(sim: Any, name: str) -> None:
    expected = BUILDERS[name]()[1]
    (first, second), _ = asyncio.run(_poll(sim.pdu(name), times=2))
    assert first.ok and second.ok, second.error
    got = _values(second, name.replace("-", "_"))
    assert set(got) == set(expected) | ({"energy_kwh"} if name == "entity" else set())
    for signal, value in expected.items():
        assert got[signal] == pytest.approx(value, rel=1e-9), signal


def test_profiles_chosen_by_sys_object_id(sim: Any) -> None:
    wanted = {"apc": "apc_rpdu2", "raritan": "raritan_pdu2", "sentry4": "sentry4", "eaton": "eaton_epdu",
              "vertiv-delta": "vertiv_v5", "entity": "entity_sensor", "apc-switched": "apc_rpdu2"}

    async def run() -> dict[str, str | None]:
        engine = SnmpEngine()
        try:
            out = {}
            for name in wanted:
                out[name] = (await SnmpPduDriver(sim.pdu(name), engine).poll()).profile
            return out
        finally:
            engine.close_dispatcher()

    assert asyncio.run(run()) == wanted


def test_sentinels_are_missing_not_zero(sim: Any) -> None:
    (result,), _ = asyncio.run(_poll(sim.pdu("apc-switched")))
    # rPDU2 power -1 → legacy estimate, flagged; energy -1 and voltage -1 → absent, not 0
    assert result.signals["pdu.apc_switched.power_w"] == 192.0
    assert "pdu.apc_switched.power_w" in result.estimated
    assert "pdu.apc_switched.energy_kwh" not in result.signals
    assert "pdu.apc_switched.voltage_v" not in result.signals


def test_summed_total_with_a_missing_unit_is_missing(sim: Any) -> None:
    (result,), _ = asyncio.run(_poll(sim.pdu("sentry4"), detail=True))
    assert result.signals["pdu.sentry4.unit1.cord1.energy_kwh"] == 893.7
    assert "pdu.sentry4.unit2.cord1.energy_kwh" not in result.signals  # -1
    assert "pdu.sentry4.energy_kwh" not in result.signals  # a partial sum would fake a step
    assert result.signals["pdu.sentry4.unit2.cord1.power_w"] == 900.0


def test_eaton_zero_based_strap_and_detail(sim: Any) -> None:
    (result,), _ = asyncio.run(_poll(sim.pdu("eaton"), detail=True))
    assert result.signals["pdu.eaton.unit0.input1.power_w"] == 1584.0
    assert result.signals["pdu.eaton.unit1.input1.pf"] == 0.9  # -900 thousandths, sign dropped
    assert "pdu.eaton.unit0.input1.i2.current_a" not in result.signals  # the neutral


def test_second_poll_is_one_targeted_get(sim: Any) -> None:
    async def run() -> tuple[int, int, int]:
        driver = SnmpPduDriver(sim.pdu("apc"))
        try:
            await driver.poll()
            before = driver.health["requests"]
            result = await driver.poll()
            assert result.ok
            return driver.health["requests"] - before, driver.health["oids_per_poll"], len(result.signals)
        finally:
            await driver.close()

    requests, oids, signals = asyncio.run(run())
    assert requests == 1  # no walk, no sysObjectID: one GET of the planned OIDs
    assert oids == signals == 5  # 24 outlets are never polled for the feed total


def test_generic_profile_from_configuration(sim: Any) -> None:
    oids = (SnmpOid(oid="1.3.6.1.4.1.318.1.1.26.4.3.1.5.1", signal="power_w", scale=10),
            SnmpOid(oid=".1.3.6.1.4.1.318.1.1.26.6.3.1.6.1", signal="voltage_v"),
            SnmpOid(oid="1.3.6.1.4.1.318.1.1.26.99.1", signal="pf"))  # not served: NoSuchObject
    (result,), _ = asyncio.run(_poll(sim.pdu("apc", profile="generic", oids=oids)))
    assert result.ok and result.profile == "generic"
    assert result.signals == {"pdu.apc.power_w": 1230.0, "pdu.apc.voltage_v": 231.0}


def test_unknown_device_is_a_clear_error(sim: Any) -> None:
    (result,), _ = asyncio.run(_poll(sim.pdu("unknown")))
    assert not result.ok and result.signals == {}
    wanted = "not a PDU, no PDU readings: sysObjectID .1.3.6.1.4.1.99998.1 matches no profile"
    assert wanted in (result.error or "")
    assert result.profile_reason is None


def test_v3_auth_priv_sha_aes(sim: Any) -> None:
    (result,), _ = asyncio.run(_poll(sim.pdu_v3("raritan")))
    assert result.ok, result.error
    assert result.signals["pdu.v3.power_w"] == 1234.0


@pytest.mark.parametrize("user", ["strong", "authonly", "legacy"])
def test_v3_other_usm_protocols_by_name(sim: Any, user: str) -> None:
    (result,), _ = asyncio.run(_poll(sim.pdu_v3("eaton", user=user)))
    assert result.ok, result.error
    assert result.signals["pdu.v3.power_w"] == 2084.0


def test_v3_wrong_key_is_an_error_not_a_crash(sim: Any, tmp_path: Any) -> None:
    bad = tmp_path / "bad.auth"
    bad.write_text("wrong-password\n")
    (result,), _ = asyncio.run(_poll(sim.pdu_v3("raritan", auth_key_file=bad, timeout_s=0.3, retries=0)))
    assert not result.ok
    assert result.error == f"pdu 'v3' (127.0.0.1:{sim.port}): WrongDigest: Wrong SNMP PDU digest"


def test_missing_community_file_is_an_error(sim: Any, tmp_path: Any) -> None:
    (result,), _ = asyncio.run(_poll(sim.pdu("apc", community_file=tmp_path / "nope")))
    assert not result.ok and "does not exist" in (result.error or "")


def test_dead_pdu_costs_the_live_one_nothing(sim: Any) -> None:
    dead_port = free_port(socket.SOCK_DGRAM)

    async def run() -> tuple[PollResult, PollResult, float]:
        engine = SnmpEngine()
        live = SnmpPduDriver(sim.pdu("raritan"), engine)
        dead = SnmpPduDriver(sim.pdu("apc", id="a", port=dead_port, timeout_s=1.0, retries=1), engine)
        try:
            await live.poll()  # discovery done: the next poll is the steady state
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            live_task = asyncio.create_task(live.poll())
            dead_task = asyncio.create_task(dead.poll())
            live_result = await live_task
            live_done = loop.time() - t0
            return live_result, await dead_task, live_done
        finally:
            engine.close_dispatcher()

    live_result, dead_result, live_done_s = asyncio.run(run())
    assert live_result.ok
    assert live_done_s < 0.5  # the dead PDU's 2 × 1 s timeout did not hold it up
    assert not dead_result.ok
    assert dead_result.error == f"pdu 'a' (127.0.0.1:{dead_port}): timeout after 2 tries"
    assert dead_result.elapsed_ms >= 1900


def test_poll_deadline_bounds_a_poll(sim: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import drivers.snmp_pdu.driver as driver_module

    monkeypatch.setattr(driver_module, "DISCOVERY_DEADLINE_S", 0.3)  # the first poll's own bound
    dead_port = free_port(socket.SOCK_DGRAM)
    cfg = sim.pdu("apc", id="a", port=dead_port, timeout_s=2.0, retries=3, deadline_s=0.3)
    (result,), _ = asyncio.run(_poll(cfg))
    assert not result.ok
    assert result.error == f"pdu 'a' (127.0.0.1:{dead_port}): no answer within the 0.3 s poll deadline"
    assert result.elapsed_ms < 1000


def test_discovery_has_its_own_deadline_then_the_steady_one_applies(sim: Any) -> None:
    import drivers.snmp_pdu.driver as driver_module

    driver = SnmpPduDriver(sim.pdu("apc", deadline_s=0.3))
    assert driver.deadline_s == driver_module.DISCOVERY_DEADLINE_S  # tables not walked yet

    async def run() -> PollResult:
        try:
            return await driver.poll()
        finally:
            await driver.close()

    assert asyncio.run(run()).ok
    assert driver.deadline_s == 0.3
