"""A GPU held at its power cap in the twin reads like a real one: noisy around the cap, not a
constant that the engine's ``stuck`` hygiene rule would reject (which hid GPU faults)."""

from __future__ import annotations

import numpy as np

from agent.engine.hygiene import RULES, Hygiene, kind_for
from agent.sim import FaultSpec, make_scenario, simulate


def test_capped_gpu_power_varies_and_is_not_rejected_as_stuck() -> None:
    fault = FaultSpec("gpu_driver", start_h=0.0, magnitude_pct=10.0)  # pushes training bins to the cap
    sc = make_scenario("steady", days=0.1, seed=3, fault=fault)
    chunk = next(simulate(sc))
    power = chunk.column("gpu.0.power_w")
    ts = chunk.ts
    tdp_w = sc.rack.gpu.tdp_w
    ok = np.isfinite(power)
    capped = ok & (power >= tdp_w)
    assert capped.sum() > 300, "the scenario must drive the GPU to its cap"
    values = power[capped]
    assert np.unique(values).size > 50
    assert 0.003 < np.std(values) / tdp_w < 0.03  # ±0.5 %-ish reading noise, not a constant
    hygiene = Hygiene(["gpu.0.power_w"], [kind_for("gpu.0.power_w", 1500.0)], lookahead_s=5.0)
    hygiene.clean(0, ts, power, power.size)
    stuck = int(hygiene.counts[0][RULES.index("stuck")])
    assert stuck < 0.01 * capped.sum(), f"{stuck} capped samples rejected as stuck"
