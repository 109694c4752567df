"""How the profile is chosen on a real peer (snmpsim), and what ``poll --once`` says about it.

Runs without ../shared: hand-built recordings written from the MIBs (recordings.py). The real walks
of the same cases (hpe-pdumm, chatsworth-pdu, apc_masterswitch2) are in test_conformance_shared.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from agent.config.model import AgentSection, Config
from agent.live import poll_cmd
from drivers.base import PollResult
from drivers.snmp_pdu.driver import SnmpPduDriver
from tests.drivers.snmp.recordings import hpe_chain_without_sys_object_id, masterswitch_8_outlets

pytestmark = pytest.mark.slow  # one snmpsim start


@pytest.fixture(scope="module")
def results(snmpsim_factory: Any) -> dict[str, list[PollResult]]:
    sim = snmpsim_factory({"hpe": hpe_chain_without_sys_object_id()[0], "switched": masterswitch_8_outlets()})

    async def run() -> dict[str, list[PollResult]]:
        out = {}
        for name in ("hpe", "switched"):
            driver = SnmpPduDriver(sim.pdu(name, timeout_s=2.0))
            try:
                out[name] = [await driver.poll(), await driver.poll()]
            finally:
                await driver.close()
        return out

    return asyncio.run(run())


def test_no_sys_object_id_is_found_by_probing_and_says_so(results: dict[str, list[PollResult]]) -> None:
    first, second = results["hpe"]
    assert first.ok and second.ok, second.error
    assert second.profile == "hpe_pdu2"
    assert second.profile_reason == ("sysObjectID missing (the agent does not answer 1.3.6.1.2.1.1.2.0); "
                                     "probed key OIDs: .1.3.6.1.4.1.232.165.7.2.1.1.5 answered")
    got = {k.removeprefix("pdu.hpe."): v for k, v in second.signals.items()}
    for signal, value in hpe_chain_without_sys_object_id()[1].items():
        assert got[signal] == pytest.approx(value, rel=1e-9), signal  # unit 0 and unit 1 both counted


def test_switched_only_unit_is_a_clear_result_every_poll(results: dict[str, list[PollResult]]) -> None:
    for result in results["switched"]:
        assert not result.ok and result.signals == {}
        assert result.profile == "apc_masterswitch"
        assert "switched, not metered" in (result.error or "")


def test_poll_once_prints_the_profile_and_why(results: dict[str, list[PollResult]]) -> None:
    shown = [results["hpe"][1], results["switched"][1]]
    text = poll_cmd.as_text(shown, Config(agent=AgentSection(site="dc1", rack="r07")))
    assert "profile hpe_pdu2\n    profile chosen: sysObjectID missing" in text
    assert ("profile apc_masterswitch\n    profile chosen: sysObjectID .1.3.6.1.4.1.318.1.3.4.2 starts with"
            in text)
    assert "error: pdu 'switched' (127.0.0.1:" in text and "switched, not metered" in text
    devices = poll_cmd.as_json(shown)["devices"]
    assert devices["pdu.hpe"]["profile_reason"].startswith("sysObjectID missing")


def test_poll_once_marks_values_read_at_unverified_addresses() -> None:
    signals = {"crac.1.outdoor_temp_c": 4.5, "crac.1.fan_pct": 50.0}
    result = PollResult(device="crac.1", ts=0.0, signals=signals, ok=True, elapsed_ms=1.0,
                        profile="liebert_icom",
                        unverified=frozenset({"crac.1.outdoor_temp_c"}))
    text = poll_cmd.as_text([result], Config(agent=AgentSection(site="dc1", rack="r07")))
    assert "outdoor_temp_c           4.5 °C  (unverified address)" in text
    assert "fan_pct                   50 %\n" in text + "\n"  # confirmed (or unflagged) values carry no mark
    assert poll_cmd.as_json([result])["devices"]["crac.1"]["unverified"] == ["crac.1.outdoor_temp_c"]
