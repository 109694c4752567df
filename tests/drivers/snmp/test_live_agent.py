"""The simulated PDU (agent.sim.devices.snmp_agent) end to end with the real driver.

Values change between polls here, which a static snmpsim recording cannot do: energy counter
resets and Unsigned32 wraps, and a power reading that follows ``values_fn``.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path
from typing import Any

import pytest

from agent.config.model import PduConfig
from agent.sim.devices.snmp_agent import SimSnmpPdu, render
from drivers.snmp_pdu.driver import SnmpPduDriver
from tests.conftest import free_port


def _cfg(tmp_path: Path, port: int, **overrides: Any) -> PduConfig:
    secret = tmp_path / "community"
    secret.write_text("public\n")
    fields: dict[str, Any] = dict(id="a", host="127.0.0.1", port=port, community_file=secret, timeout_s=1.0)
    fields.update(overrides)
    return PduConfig(**fields)


def _run_polls(vendor: str, tmp_path: Path, steps: list[dict[str, float]],
               **kw: Any) -> tuple[list[Any], Any]:
    values: dict[str, float] = dict(steps[0])
    port = free_port(socket.SOCK_DGRAM)

    async def run() -> tuple[list[Any], Any]:
        async with SimSnmpPdu(lambda: values, port, vendor=vendor, refresh_s=0.0, **kw):
            driver = SnmpPduDriver(_cfg(tmp_path, port))
            results = []
            try:
                for step in steps:
                    values.clear()
                    values.update(step)
                    results.append(await driver.poll())
            finally:
                await driver.close()
            return results, driver.health

    return asyncio.run(run())


def test_apc_with_24_outlets_follows_the_values(tmp_path: Path) -> None:
    steps = [{"power_w": 1000.0, "energy_kwh": 10.0}, {"power_w": 2500.0, "energy_kwh": 10.7}]
    results, health = _run_polls("apc_rpdu2", tmp_path, steps)
    assert [r.signals["pdu.a.power_w"] for r in results] == [1000.0, 2500.0]
    assert [r.signals["pdu.a.energy_kwh"] for r in results] == [10.0, 10.7]
    assert "pdu.a.voltage_v" not in results[0].signals  # not in values_fn → served as -1 → missing
    assert health["oids_per_poll"] == 5 and health["energy_resets"] == 0


def test_energy_reset_is_counted_and_the_counter_reported_as_read(tmp_path: Path) -> None:
    steps = [{"power_w": 800.0, "energy_kwh": 500.0}, {"power_w": 800.0, "energy_kwh": 500.2},
             {"power_w": 800.0, "energy_kwh": 0.1}]  # someone reset the meter
    results, health = _run_polls("apc_rpdu2", tmp_path, steps)
    assert [r.signals["pdu.a.energy_kwh"] for r in results] == [500.0, 500.2, 0.1]
    assert health["energy_resets"] == 1 and health["energy_wraps"] == 0


def test_unsigned32_wrap_is_a_wrap_not_a_reset(tmp_path: Path) -> None:
    top_kwh = 2**32 / 1000  # Raritan activeEnergy in Wh, Unsigned32
    steps = [{"power_w": 500.0, "energy_kwh": top_kwh - 0.5}, {"power_w": 500.0, "energy_kwh": top_kwh + 0.3}]
    results, health = _run_polls("raritan_pdu2", tmp_path, steps)
    assert results[1].signals["pdu.a.energy_kwh"] == 0.3  # as the meter shows: 2^32 + 300 Wh wrapped
    assert health["energy_wraps"] == 1 and health["energy_resets"] == 0


def test_v3_against_the_simulated_pdu(tmp_path: Path) -> None:
    port = free_port(socket.SOCK_DGRAM)
    (tmp_path / "auth").write_text("authpass123\n")
    (tmp_path / "priv").write_text("privpass123\n")
    cfg = PduConfig(id="b", host="127.0.0.1", port=port, version="3", user="ops",
                    auth_key_file=tmp_path / "auth",
                    priv_key_file=tmp_path / "priv", timeout_s=1.0)

    async def run() -> Any:
        async with SimSnmpPdu(lambda: {"power_w": 1500.0}, port, vendor="raritan_pdu2", v3_user="ops",
                              v3_auth_key="authpass123", v3_priv_key="privpass123"):
            driver = SnmpPduDriver(cfg)
            try:
                return await driver.poll()
            finally:
                await driver.close()

    result = asyncio.run(run())
    assert result.ok, result.error
    assert result.signals == {"pdu.b.power_w": 1500.0}


def test_render_rejects_an_unknown_vendor() -> None:
    with pytest.raises(ValueError, match="unknown simulated PDU vendor 'acme'"):
        render("acme", {})


def test_drivers_without_an_engine_share_one_per_event_loop(tmp_path: Path) -> None:
    from drivers.snmp_pdu import driver as driver_module

    port = free_port(socket.SOCK_DGRAM)

    async def run() -> tuple[bool, bool, int]:
        async with SimSnmpPdu(lambda: {"power_w": 700.0}, port):
            first, second = SnmpPduDriver(_cfg(tmp_path, port)), SnmpPduDriver(_cfg(tmp_path, port, id="b"))
            results = await asyncio.gather(first.poll(), second.poll())
            shared = first._engine is second._engine and first._engine is not None
            await first.close()
            still_open = asyncio.get_running_loop() in driver_module._LOOP_ENGINES
            await second.close()
            return all(r.ok for r in results) and shared, still_open, len(driver_module._LOOP_ENGINES)

    ok_and_shared, open_after_first_close, engines_left = asyncio.run(run())
    assert ok_and_shared
    assert open_after_first_close and engines_left == 0


def test_a_unit_leaving_the_chain_triggers_rediscovery(tmp_path: Path) -> None:
    port = free_port(socket.SOCK_DGRAM)
    values = {"power_w": 1200.0, "energy_kwh": 50.0, "voltage_v": 230.0}

    async def run() -> tuple[list[Any], dict[str, Any]]:
        async with SimSnmpPdu(lambda: values, port, vendor="apc_rpdu2", units=2, refresh_s=0.0) as sim:
            driver = SnmpPduDriver(_cfg(tmp_path, port, detail_signals=True))
            try:
                results = [await driver.poll()]
                sim.units = 1  # unit 2 is unplugged: its rows answer noSuchInstance now
                results += [await driver.poll(), await driver.poll()]
                return results, driver.health
            finally:
                await driver.close()

    (chain, gone, again), health = asyncio.run(run())
    assert chain.signals["pdu.a.power_w"] == 1200.0
    assert chain.signals["pdu.a.unit1.power_w"] == chain.signals["pdu.a.unit2.power_w"] == 600.0
    assert chain.signals["pdu.a.energy_kwh"] == 50.0
    assert "pdu.a.power_w" not in gone.signals  # a total without unit 2 would be a fake step
    assert again.signals["pdu.a.power_w"] == 1200.0 and "pdu.a.unit2.power_w" not in again.signals
    assert health["discoveries"] == 2 and health["rows"]["device"] == 1


def test_raritan_cascade_sums_and_unavailable_sensor_is_dropped(tmp_path: Path) -> None:
    steps = [{"power_w": 3000.0, "energy_kwh": 900.0, "voltage_v": 230.0, "current_a": 13.5}]
    port = free_port(socket.SOCK_DGRAM)

    async def run() -> Any:
        async with SimSnmpPdu(lambda: steps[0], port, vendor="raritan_pdu2", units=3):
            driver = SnmpPduDriver(_cfg(tmp_path, port, detail_signals=True))
            try:
                return await driver.poll(), driver.health
            finally:
                await driver.close()

    result, health = asyncio.run(run())
    assert result.signals["pdu.a.power_w"] == 3000.0
    assert result.signals["pdu.a.unit3.inlet1.power_w"] == 1000.0
    assert result.signals["pdu.a.energy_kwh"] == 900.0
    assert result.signals["pdu.a.current_a"] == 13.5
    assert "pdu.a.pf" not in result.signals  # served with IsAvailable = false
    assert health["rows"]["inlet"] == 12  # 3 units × 4 available sensors (pf dropped)
