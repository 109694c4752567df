"""Conformance of ``[[crac]] protocol = "snmp"``: every real cooling walk decodes its temperatures and
the power it has (SOURCES.md for the three top-level walks, MORE.md / LibreNMS's decodes for
``cooling/``), within 0.5 %. Without a power reading the estimate is used and flagged as estimated.

Skipped, with the path it looked for, when this checkout has no ../shared (set RACKWATT_SHARED).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pysnmp.hlapi.v3arch.asyncio import SnmpEngine

from agent.config.model import CracConfig
from drivers.base import PollResult
from drivers.snmp_crac.driver import SnmpCracDriver
from tests.conftest import shared_dir, shared_dir_hint

pytestmark = pytest.mark.slow

SHARED = shared_dir()
RECORDINGS = SHARED / "devices" / "snmprec" if SHARED else None
REL = 0.005
RATED_FAN_W = 1000.0  # configured for the estimate; walks without power must then say "estimated"

EXPECTED: dict[str, dict[str, float]] = {
    "apc_inrow-dx": {"supply_temp_c": 19.4, "return_temp_c": 28.0, "return_rh_pct": 30.6, "cooling_w": 10800,
                     "power_w": 1440 + 24},  # compressor 1.44 kW + condenser fan 24 W, both metered
    "stulz_wib8000": {"bus1.unit1.return_temp_c": 26.5, "bus1.unit1.supply_temp_c": 20.0,
                      "bus1.unit1.setpoint_c": 22.0},
    "rittal-lcp_cmciii-pu-lcp": {"supply_temp_c": 19.0, "return_temp_c": 24.4, "water_in_temp_c": 16.1,
                                 "water_out_temp_c": 20.7, "water_flow_lpm": 5.3, "fan_pct": 16,
                                 "cooling_w": 1707},
    "cooling/apc_airfm": {"supply_temp_c": 14.8, "return_temp_c": 22.5, "setpoint_c": 22.2,
                          "return_rh_pct": 43.6},
    "cooling/apc_uniflair-sp": {"supply_temp_c": 24.8, "return_temp_c": 21.4, "fan_pct": 90},
    "cooling/dantherm-os": {"return_temp_c": 19},
    "cooling/liebert-pex_vertiv-power": {"return_temp_c": 23, "return_rh_pct": 42, "fan_pct": 100,
                                         "cooling_pct": 0},  # MORE.md: 73 °F return = 23 °C control
    "cooling/liebert_weblbds": {"supply_temp_c": 25, "return_temp_c": 24, "setpoint_c": 24, "fan_pct": 50},
    "cooling/pcoweb-rittal-lcp-3311_lcp-dx-3311": {"return_temp_c": 31.3, "supply_temp_c": 28.3,
                                                   "setpoint_c": 21.0},
    "cooling/pcoweb-rittalchiller": {"power_w": 700, "cooling_w": 33900, "water_in_temp_c": 18.0,
                                     "water_out_temp_c": 17.9, "outdoor_temp_c": 3.6},
    "cooling/rittal-cmc": {"supply_temp_c": 16, "return_temp_c": 25, "water_in_temp_c": 14, "cooling_w": 8830,
                           "fan_pct": 63},
    "cooling/rittal-cmc-iii-pu": {"unit1.var2.cabinet_temp_c": 20.9, "unit4.var2.cabinet_temp_c": 18.8},
}
METERED = {"apc_inrow-dx", "cooling/pcoweb-rittalchiller"}  # the others' power_w is the flagged estimate
NO_POWER_INPUTS = {"stulz_wib8000", "cooling/apc_airfm", "cooling/dantherm-os", "cooling/rittal-cmc-iii-pu",
                   "cooling/pcoweb-rittal-lcp-3311_lcp-dx-3311"}  # no fan % or cooling output: no estimate


@pytest.fixture(scope="module")
def polled(snmpsim_factory: Any) -> dict[str, PollResult]:
    walks = {name: RECORDINGS / f"{name}.snmprec" for name in EXPECTED} if RECORDINGS else {}
    if not walks or not all(p.is_file() for p in walks.values()):
        pytest.skip(f"no real cooling walks: {shared_dir_hint()}")
    communities = {name: name.replace("/", "_") for name in walks}
    sim = snmpsim_factory({communities[n]: p.read_text() for n, p in walks.items()})

    async def run() -> dict[str, PollResult]:
        engine = SnmpEngine()
        out = {}
        try:
            for name in walks:
                pdu = sim.pdu(communities[name])
                cfg = CracConfig(id="x", host=pdu.host, port=pdu.port, protocol="snmp", profile="auto",
                                 community_file=pdu.community_file, timeout_s=3.0,
                                 rated_fan_power_w=RATED_FAN_W)
                driver = SnmpCracDriver(cfg, engine, detail=True)
                await driver.poll()
                out[name] = await driver.poll()
        finally:
            engine.close_dispatcher()
        return out

    return asyncio.run(run())


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_cooling_walk_decodes(polled: dict[str, PollResult], name: str) -> None:
    result = polled[name]
    assert result.ok, result.error
    assert result.profile_reason
    got = {k.removeprefix("crac.x."): v for k, v in result.signals.items()}
    for signal, value in EXPECTED[name].items():
        assert signal in got, f"{name}: {signal} missing (got {sorted(got)})"
        assert got[signal] == pytest.approx(value, rel=REL, abs=1e-9), f"{name}: {signal}"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_power_is_measured_or_a_flagged_estimate(polled: dict[str, PollResult], name: str) -> None:
    result = polled[name]
    if name in METERED:
        assert "crac.x.power_w" in result.signals and "crac.x.power_w" not in result.estimated
    elif name in NO_POWER_INPUTS:
        assert "crac.x.power_w" not in result.signals  # missing, never 0
    else:
        assert "crac.x.power_w" in result.estimated


def test_the_dantherm_placeholder_sys_object_id_is_probed(polled: dict[str, PollResult]) -> None:
    assert "probed key OIDs" in (polled["cooling/dantherm-os"].profile_reason or "")
