"""Conformance: every real walk in ../shared/devices/snmprec decodes to the values its tables give.

Every ``*.snmprec`` under the folder (top level, ``more/``, ``not-pdu/``, ``cooling/``) is served by one
snmpsim and polled by the PDU driver in ``auto`` mode. Expected values are the independent decodes in
SOURCES.md (top level) and MORE.md (``more/``), both cross-checked there against LibreNMS; they agree
within 0.5 % (a walk is not one atomic snapshot: Rittal's total reads 2742 W next to phases summing to
2747 W). Walks that are not PDUs must say so, the switched-only MasterSwitch must say "switched, not
metered", and walks without a usable sysObjectID must say that the profile was found by probing.

Skipped, with the path it looked for, when this checkout has no ../shared (set RACKWATT_SHARED).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from pysnmp.hlapi.v3arch.asyncio import SnmpEngine

from drivers.base import PollResult
from drivers.snmp_pdu.driver import SnmpPduDriver
from tests.conftest import shared_dir, shared_dir_hint

pytestmark = pytest.mark.slow

SHARED = shared_dir()
RECORDINGS = SHARED / "devices" / "snmprec" if SHARED else None
REL = 0.005  # the tolerance: 0.5 %, wider than every unit's display resolution here

# walk (path under snmprec/, no suffix) → {signal after "pdu.<id>.": value from SOURCES.md / MORE.md}
EXPECTED: dict[str, dict[str, float]] = {
    # SOURCES.md
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
    # MORE.md
    "more/apc-epdu_epdu1116s": {"power_w": 0, "energy_kwh": 332.241, "current_a": 0.0},
    "more/liebert": {"power_w": 2411, "energy_kwh": 95937.5, "current_a": 20.45, "voltage_v": 119.6},
    "more/hpe-mapdu_pdu2": {"power_w": 97, "current_a": 0.535, "voltage_v": 242.44, "pf": 0.751},
    "more/hpe-pdumm": {"power_w": 2724, "pdu1.power_w": 1587, "pdu2.power_w": 1137, "current_a": 14},
    "more/chatsworth-pdu": {"power_w": 3793, "energy_kwh": 348.33, "current_a": 18.96,
                            "cb1.power_w": 1467, "cb1.energy_kwh": 124.31},
    "more/panduit": {"power_w": 956, "current_a": 4.48},
    "more/schleifenbauer": {"power_w": 140, "energy_kwh": 132, "current_a": 0.64},
    "more/sentry3": {"current_a": 3.62 + 5.02, "tower1.infeed1.voltage_v": 209.3,
                     "tower2.infeed1.voltage_v": 205.9},
    "more/sentry3_switched": {"current_a": 3.09 + 3.92 + 4.34, "tower1.infeed1.current_a": 3.09},
    "more/raritan-pdu": {"current_a": 2.971, "voltage_v": 230.5},
    "more/rittal-cmc-iii-pu_pdu-controller": {"power_w": 2747, "energy_kwh": 2641.8,
                                              "current_a": 4.73 + 5.56 + 2.36},
    "more/e3meter": {"power_w": 657, "line0.current_a": 2.066, "line1.current_a": 0.675,
                     "line2.current_a": 0.323, "current_a": 2.066 + 0.675 + 0.323,  # not the neutral
                     "voltage_v": 229.9},
    "more/poweralert_pdu": {"power_w": 207, "current_a": 1.00},
}
ABSENT = {
    "raritan-pdu_px2-temp": ["energy_kwh"],  # "No activeEnergy row on this unit"
    "more/sentry3": ["power_w"],  # "none (infeedPower not walked)"
    "more/sentry3_switched": ["power_w"],
}
PROBED = {"more/hpe-pdumm": "sysObjectID missing", "more/chatsworth-pdu": "matches no profile"}
SWITCHED_ONLY = {"more/apc_masterswitch2"}
COOLING = {"apc_inrow-dx", "stulz_wib8000", "rittal-lcp_cmciii-pu-lcp"}


def _walks() -> dict[str, Path]:
    if not RECORDINGS or not RECORDINGS.is_dir():
        return {}
    return {str(p.relative_to(RECORDINGS).with_suffix("")): p for p in sorted(RECORDINGS.rglob("*.snmprec"))}


def _not_pdus() -> set[str]:
    return {name for name in _walks() if name.startswith(("not-pdu/", "cooling/")) or name in COOLING}


@pytest.fixture(scope="module")
def polled(snmpsim_factory: Any) -> dict[str, PollResult]:
    walks = _walks()
    if not walks:
        pytest.skip(f"no real walks: {shared_dir_hint()}")
    communities = {name: name.replace("/", "_") for name in walks}
    sim = snmpsim_factory({communities[name]: path.read_text() for name, path in walks.items()})

    async def run() -> dict[str, PollResult]:
        engine = SnmpEngine()
        out = {}
        try:
            for name in walks:
                cfg = sim.pdu(communities[name], id="x", timeout_s=3.0, interval_s=10.0)
                driver = SnmpPduDriver(cfg, engine, detail=True)
                await driver.poll()  # discovery
                out[name] = await driver.poll()
        finally:
            engine.close_dispatcher()
        return out

    return asyncio.run(run())


def _got(result: PollResult) -> dict[str, float]:
    return {k.removeprefix("pdu.x."): v for k, v in result.signals.items()}


def test_every_recording_has_expected_values(polled: dict[str, PollResult]) -> None:
    known = set(EXPECTED) | SWITCHED_ONLY | _not_pdus()
    assert set(polled) == known, "a new recording needs its SOURCES.md / MORE.md values here"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recording_decodes_to_its_table(polled: dict[str, PollResult], name: str) -> None:
    result = polled[name]
    assert result.ok, result.error
    got = _got(result)
    for signal, value in EXPECTED[name].items():
        assert signal in got, f"{name}: {signal} missing (got {sorted(got)})"
        assert got[signal] == pytest.approx(value, rel=REL, abs=1e-9), f"{name}: {signal}"
    for signal in ABSENT.get(name, []):
        assert signal not in got, f"{name}: {signal} should be missing"
    assert all(v >= 0 for v in got.values()), "a sentinel leaked through as a negative reading"
    assert result.profile_reason, "poll --once must say why this profile"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_totals_are_the_sum_of_units_cords_or_phases(polled: dict[str, PollResult], name: str) -> None:
    got = _got(polled[name])
    for signal in ("power_w", "energy_kwh", "current_a"):
        # after the first poll only one level is polled, so every per-row value is a term of the total
        rows = [v for k, v in got.items() if k.endswith("." + signal)]
        if signal in got:
            assert rows, f"{name}: no per-row {signal}"
            assert got[signal] == pytest.approx(sum(rows), rel=1e-12), f"{name}: {signal}"


@pytest.mark.parametrize("name", sorted(PROBED))
def test_missing_or_bogus_sys_object_id_is_probed(polled: dict[str, PollResult], name: str) -> None:
    reason = polled[name].profile_reason or ""
    assert PROBED[name] in reason and "probed key OIDs" in reason, reason


@pytest.mark.parametrize("name", sorted(SWITCHED_ONLY))
def test_switched_only_unit_says_so(polled: dict[str, PollResult], name: str) -> None:
    result = polled[name]
    assert not result.ok and result.signals == {}
    assert "switched, not metered" in (result.error or "")
    assert result.profile == "apc_masterswitch"


def test_easy_pdu_is_not_taken_for_an_rpdu2(polled: dict[str, PollResult]) -> None:
    assert polled["more/apc-epdu_epdu1116s"].profile == "apc_epdu"


@pytest.mark.parametrize("name", sorted(_not_pdus()))
def test_switches_and_cooling_units_are_not_pdus(polled: dict[str, PollResult], name: str) -> None:
    result = polled[name]
    assert not result.ok and result.signals == {}, f"{name}: read {result.signals}"
    assert "not a PDU, no PDU readings" in (result.error or "")
