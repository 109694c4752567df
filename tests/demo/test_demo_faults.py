"""The demo's fault plans, checked at the engine level: does the engine find and attribute them?

The same scenario the demo builds for ``--fault CAUSE`` (8 replayed healthy hours, then the
fault) is replayed through the same engine, configured from the demo's generated config and
sampled at the demo's poll intervals, for a bounded number of simulated hours after the onset.
Live, the demo adds only real polling on top, which test_demo_run.py covers with ``--fault
hotspot``. The light default polling (60×) finds the hot spot; the smaller faults need
``--fine-polling`` (a real rack's intervals) to be found within the bound.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config.loader import load_config
from agent.live.demo.engine_feed import prewarm
from agent.live.demo.session import FAULT_AFTER_H, DemoOptions, build_scenario, intervals_for
from agent.live.demo.setup import pick_ports, write_config
from agent.live.engine_link import EngineLink

pytestmark = pytest.mark.slow
HOURS_AFTER_ONSET = 3.0
# The run "goes live" at a fixed instant, not at the wall clock: the scenario's weather and time of
# day follow it, so a test started at another hour replayed another trace (with the wall clock, 5 of
# 48 half-hourly start times on 2026-12-05 put a blind-cooling false alarm in the healthy hours:
# the rack's false-alarm rate, which bench/drift.py measures, not a flaky test's).
LIVE_TS = 1_767_225_600.0  # 2026-01-01 00:00 UTC


def _onsets(tmp_path: Path, fault: str, fine: bool) -> list[tuple[float, str]]:
    """(hours after the fault started, cause) of every onset event, in order."""
    live = LIVE_TS
    opts = DemoOptions(fault=fault, days=2)
    scenario, _ = build_scenario(opts, live)
    path, _ = write_config(
        tmp_path,
        site="demo",
        rack="r07",
        ports=pick_ports(),
        crac_id=scenario.rack.cooling.crac_id,
        crac_share=scenario.rack.cooling.share,
        intervals=intervals_for(60),
        mqtt=None,
    )
    link = EngineLink.from_config(load_config(path))
    assert link is not None
    fault_ts = live + FAULT_AFTER_H * 3600
    hours = opts.effective_warmup_h + FAULT_AFTER_H + HOURS_AFTER_ONSET
    events = prewarm(link, scenario, hours, intervals_for(60, fine).by_signal_prefix())  # sampled as live
    return [((e["ts"] - fault_ts) / 3600, e["cause"]) for e in events if e.get("state") == "onset"]


@pytest.mark.parametrize(
    ("fault", "cause", "fine"),
    [
        ("hotspot", "thermal", False),
        ("gpu_driver", "gpu_hardware", True),
        ("power_chain", "power_chain", True),
    ],
)
def test_the_demo_fault_is_found_and_attributed(tmp_path: Path, fault: str, cause: str, fine: bool) -> None:
    onsets = _onsets(tmp_path, fault, fine)
    faults_before = [o for o in onsets if o[0] < 0 and o[1] != "workload"]  # a job change is no fault
    assert not faults_before, f"false alarm on the healthy hours: {onsets}"
    assert any(c == cause for _, c in onsets), f"{fault}: expected an onset with cause {cause}, got {onsets}"


def test_the_demo_cooling_fault_is_found_and_attributed(tmp_path: Path) -> None:
    """A COP loss is found with the demo's default (light) polling once a day of healthy data
    has calibrated the cooling unit's efficiency model."""
    onsets = _onsets(tmp_path, "cooling", fine=False)
    assert not [o for o in onsets if o[0] < 0 and o[1] != "workload"], onsets
    assert any(c == "cooling" and 0 <= t <= HOURS_AFTER_ONSET for t, c in onsets), onsets
