"""The engine → drift-detector interface: one bin of the rack, split by component.

The engine emits one ``ComponentSample`` per bin (default 60 s) with what each component of the
facility measured and what the (frozen-at-bin-start, lag-compensated) model expected. The drift
detector consumes these and tells the engine which components must stop learning (``held``).
Keeping this a plain record lets the detector be tested on synthetic residual streams;
``residuals`` turns one into each component's residual (what the detector and its catch-up read).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

COMPONENTS: tuple[str, ...] = ("it", "cooling", "gpu", "thermal")
# The components whose models the engine learns, in the order of ``WindowBuffer.held``'s columns
# (the thermal component is only detected: no engine model learns it).
LEARNED: tuple[str, ...] = COMPONENTS[:3]


@dataclass(frozen=True)
class ComponentSample:
    ts: float  # bin end, Unix seconds
    duration_s: float  # bin length actually covered
    stage: str  # dominant stage of the bin ("" if unknown)
    stage_source: str  # "hint" | "inferred"
    job: str  # job id ("" if none)
    transient: bool  # True while the facility is still settling after a stage/load change (lag window)
    gpu_w: float  # measured total GPU power (mean over the bin)
    work_rate: float  # job-reported throughput (NaN if none)
    gpu_expected_w: float  # per-stage/job GPU power the baseline expects for this work_rate (NaN if unknown)
    it_measured_w: float  # Σ PDU power
    it_expected_w: float  # IT model: f_stage(GPU + node load), PSU efficiency included
    cooling_measured_w: float  # Σ share × cooling-unit power
    cooling_expected_w: float  # lag model driven by the rack's heat
    inlet_mean_c: float  # mean of inlet sensors (NaN if none)
    inlet_spread_c: float  # max − min of inlet sensors (NaN if fewer than 2)
    fan_pct: float  # cooling-unit fan speed (NaN if unknown)
    setpoint_c: float  # cooling-unit setpoint (NaN if unknown)
    # Added for drift: share × heat the cooling units report removing (Σ share × crac.*.cooling_w),
    # NaN when no unit reports it. Lets the detector judge the unit's power for the load it carries.
    cooling_load_w: float = math.nan
    # Added for drift: outdoor air temperature at the cooling units' heat rejection (mean of
    # crac.*.outdoor_temp_c, a rackwatt extension of the trace format), NaN when none reports it.
    # Explains the weather's share of the unit's efficiency, so slow coil/COP loss stands out.
    outdoor_c: float = math.nan
    # Added for drift: GPU energy counters (gpu.<i>.energy_j) that went backwards in this bin — a
    # driver reload (or a reboot) resets them. Counted per row, so it lands in the reset's own bin.
    gpu_counter_resets: int = 0
    # Added for drift: the GPUs' mean memory-bandwidth utilisation (gpu.<i>.mem_util_pct), NaN when
    # none reports it. With the power level, the work's signature on a rack without job labels.
    gpu_mem_util_pct: float = math.nan


def residuals(sample: ComponentSample) -> dict[str, float]:
    """Each channel's residual for one bin: % of the expectation for power, °C for the inlet spread."""
    return {
        "it": rel_pct(sample.it_measured_w, sample.it_expected_w),
        "cooling": rel_pct(sample.cooling_measured_w, sample.cooling_expected_w),
        "gpu": rel_pct(sample.gpu_w, sample.gpu_expected_w),
        "thermal": float(sample.inlet_spread_c),
    }


def rel_pct(measured: float, expected: float) -> float:
    """measured − expected in % of expected (NaN without both, or with no expectation)."""
    if not (math.isfinite(measured) and math.isfinite(expected)) or expected <= 1e-6:
        return math.nan
    return 100.0 * (measured - expected) / expected
