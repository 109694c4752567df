"""Conformance: every real walk in ../shared/devices/snmprec decodes to the values in its SOURCES.md.

Skipped when this checkout has no ../shared folder. Power within 1 %, energy exact to the device's
resolution, sentinels missing. Expected values are the hand decodes written in SOURCES.md (index 1
= first unit/cord/phase); totals over several cords or phases are checked against the per-row
values the same poll reports.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pysnmp.hlapi.v3arch.asyncio import SnmpEngine

from drivers.base import PollResult
from drivers.snmp_pdu import SnmpPduDriver
from tests.conftest import shared_dir

pytestmark = pytest.mark.slow

SHARED = shared_dir()
RECORDINGS = SHARED / "devices" / "snmprec" if SHARED else None

# file → {signal (after "pdu.<id>."): value from SOURCES.md}. "energy_kwh" values compare exactly.
EXPECTED: dict[str, dict[str, float]] = {
    "apc_ap8853": {"power_w": 1140, "energy_kwh": 3512.8, "pf": 0.96, "current_a": 4.9, "voltage_v": 242},
    "apc_ap8959eu3": {"power_w": 270, "energy_kwh": 1967.7, "current_a": 1.3, "voltage_v": 231,
                      "pf": 0.82},  # SOURCES gives the phase PF; single-phase unit: same
    "apc_apdu9959eu3": {"power_w": 1170, "energy_kwh": 70.6, "current_a": 5.4, "voltage_v": 228, "pf": 0.93},
    "raritan-pdu_px2-temp": {"current_a": 3.497, "voltage_v": 209, "power_w": 673},
    "raritan-pdu_px3": {"current_a": 7.467, "voltage_v": 229, "power_w": 1665, "pf": 0.98,
                        "energy_kwh": 74057.676},
    "raritan-pdu_px4": {"current_a": 1.301, "voltage_v": 394, "power_w": 590, "pf": 0.86,
                        "energy_kwh": 2932.051},
    "sentry4": {"unit1.cord1.power_w": 1701, "unit1.cord1.pf": 0.95, "unit1.cord1.energy_kwh": 893.7,
                "unit1.cord1.line1.current_a": 5.60, "unit1.cord1.phase1.voltage_v": 207.9},
    "sentry4_switched8i": {"unit1.cord1.power_w": 806, "unit1.cord1.energy_kwh": 3472.0,
                           "unit1.cord1.phase1.voltage_v": 211.7, "unit1.cord1.line1.current_a": 4.03},
    "eatonpdu_2": {"power_w": 1584, "energy_kwh": 8185.493, "pf": 0.946, "voltage_v": 118.45,
                   "current_a": 14.108},
    "vertiv-pdu_mg02e4w1": {"power_w": 1017, "energy_kwh": 8483.906, "pf": 0.95, "phase1.voltage_v": 235.0,
                            "phase1.current_a": 0.95},
    "vertiv-pdu_mn03edr1": {"power_w": 4399, "pf": 0.97, "phase1.voltage_v": 206.8, "phase1.current_a": 7.25,
                            "phase1.energy_kwh": 5207.918},
}
ABSENT = {"raritan-pdu_px2-temp": ["energy_kwh"]}  # "No activeEnergy row on this unit"
NOT_PDUS = {"apc_inrow-dx", "stulz_wib8000", "rittal-lcp_cmciii-pu-lcp"}  # cooling walks: no PDU profile


def _files() -> list[Path]:
    return sorted(RECORDINGS.glob("*.snmprec")) if RECORDINGS and RECORDINGS.is_dir() else []


@pytest.fixture(scope="module")
def polled(snmpsim_factory: Any) -> dict[str, PollResult]:
    files = _files()
    if not files:
        pytest.skip("no ../shared/devices/snmprec in this checkout")
    sim = snmpsim_factory({p.stem: p.read_text() for p in files})

    async def run() -> dict[str, PollResult]:
        engine = SnmpEngine()
        out = {}
        try:
            for path in files:
                driver = SnmpPduDriver(sim.pdu(path.stem, id="x", timeout_s=3.0, interval_s=10.0), engine,
                                       detail=True)
                await driver.poll()  # discovery
                out[path.stem] = await driver.poll()
        finally:
            engine.close_dispatcher()
        return out

    return asyncio.run(run())


def test_every_recording_is_known(polled: dict[str, PollResult]) -> None:
    assert set(polled) == set(EXPECTED) | NOT_PDUS, "a new recording needs its SOURCES.md values here"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recording_decodes_to_sources_md(polled: dict[str, PollResult], name: str) -> None:
    result = polled[name]
    assert result.ok, result.error
    got = {k.removeprefix("pdu.x."): v for k, v in result.signals.items()}
    for signal, value in EXPECTED[name].items():
        assert signal in got, f"{name}: {signal} missing"
        if signal.endswith("energy_kwh"):
            assert got[signal] == value, f"{name}: {signal}"  # exact to the device's resolution
        else:
            assert got[signal] == pytest.approx(value, rel=0.01), f"{name}: {signal}"
    for signal in ABSENT.get(name, []):
        assert signal not in got
    assert all(v >= 0 for v in got.values()), "a sentinel leaked through as a negative reading"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_totals_are_the_sum_of_units_cords_or_phases(polled: dict[str, PollResult], name: str) -> None:
    got = {k.removeprefix("pdu.x."): v for k, v in polled[name].signals.items()}
    for signal in ("power_w", "energy_kwh"):
        # after the first poll only one level is polled, so every per-row value is a term of the total
        rows = [v for k, v in got.items() if k.endswith("." + signal)]
        if signal in got:
            assert rows, f"{name}: no per-row {signal}"
            assert got[signal] == pytest.approx(sum(rows), rel=1e-12), f"{name}: {signal}"


@pytest.mark.parametrize("name", sorted(NOT_PDUS))
def test_cooling_walks_are_refused_clearly(polled: dict[str, PollResult], name: str) -> None:
    result = polled[name]
    assert not result.ok and result.signals == {}
    assert "matches no profile" in (result.error or "")
