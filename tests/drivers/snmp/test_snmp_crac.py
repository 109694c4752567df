"""``SnmpCracDriver`` against snmpsim serving hand-built PowerNet coolingUnit tables (no ../shared needed)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent.config.model import CracConfig
from drivers.base import PollResult
from drivers.snmp_crac.driver import SnmpCracDriver
from tests.drivers.snmp.recordings import apc_cooling_unit

pytestmark = pytest.mark.slow  # one snmpsim start


@pytest.fixture(scope="module")
def results(snmpsim_factory: Any) -> dict[str, PollResult]:
    sim = snmpsim_factory({"metered": apc_cooling_unit(True), "unmetered": apc_cooling_unit(False)})

    async def run() -> dict[str, PollResult]:
        out = {}
        for name in ("metered", "unmetered"):
            pdu = sim.pdu(name)
            cfg = CracConfig(id=name, host=pdu.host, port=pdu.port, protocol="snmp", profile="auto",
                             community_file=pdu.community_file, rated_fan_power_w=2000.0)
            driver = SnmpCracDriver(cfg)
            try:
                await driver.poll()
                out[name] = await driver.poll()
            finally:
                await driver.close()
        return out

    return asyncio.run(run())


def test_rows_are_found_by_description_and_unit_and_scaled_by_the_scale_column(
        results: dict[str, PollResult]) -> None:
    result = results["metered"]
    assert result.ok, result.error
    assert result.profile == "apc_cooling_unit" and result.device == "crac.metered"
    assert result.signals == pytest.approx({
        "crac.metered.supply_temp_c": 19.4, "crac.metered.return_temp_c": 28.0,  # the °C rows, not the °F
        "crac.metered.cooling_w": 10800.0, "crac.metered.fan_pct": 80.0,
        "crac.metered.power_w": 1464.0})  # compressor 1.44 kW + condenser fan 24 W
    assert result.estimated == frozenset()


def test_without_a_power_reading_the_estimate_is_used_and_flagged(results: dict[str, PollResult]) -> None:
    result = results["unmetered"]
    assert result.ok, result.error
    # fan affinity law of drivers/modbus_crac/estimate.py: 2000 W × 0.8³; no compressor rating, so
    # the compressor term is cooling / COP 3.5
    assert result.signals["crac.unmetered.power_w"] == pytest.approx(2000 * 0.8**3 + 10800 / 3.5)
    assert result.estimated == {"crac.unmetered.power_w"}


def test_generic_is_refused_before_any_io() -> None:
    with pytest.raises(ValueError, match='"generic" is Modbus-only'):
        SnmpCracDriver(CracConfig(id="c", host="10.0.0.9", port=161, protocol="snmp"))
