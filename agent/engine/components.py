"""The engine → drift-detector interface: one drift bin of the rack, split by component.

Per bin (default 60 s) a ``ComponentSample`` says what each component of the facility measured
and what the frozen, lag-compensated model expected; the detector tells the engine which
components must stop learning (``held``). A plain record, so the detector can be tested on
synthetic residual streams.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

COMPONENTS: tuple[str, ...] = ("it", "cooling", "gpu", "thermal")
# The components the engine learns, in ``WindowBuffer.held``'s column order (thermal is only detected)
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
    # Σ share × heat the cooling units report removing (crac.*.cooling_w): the load the unit carries
    cooling_load_w: float = math.nan
    # mean outdoor air temperature at the units' heat rejection (crac.*.outdoor_temp_c): the weather
    outdoor_c: float = math.nan
    # GPU energy counters (gpu.<i>.energy_j) that went backwards in this bin: a driver reload
    gpu_counter_resets: int = 0
    # the GPUs' mean memory-bandwidth utilisation (gpu.<i>.mem_util_pct): the work's signature
    gpu_mem_util_pct: float = math.nan
    # the mean power of the GPUs that report (gpu.<i>.power_w): one GPU's level, whatever how many report
    gpu_mean_w: float = math.nan
    # the share of the bin spent in ``stage`` (1.0: the whole bin)
    stage_share: float = 1.0
    # GPU power and memory utilisation over the bin's seconds in ``stage`` only, as factors of
    # ``gpu_w`` and ``gpu_mem_util_pct`` (1.0: the bin holds no other stage; NaN: known for under
    # half of those seconds)
    stage_gpu_factor: float = 1.0
    stage_mem_factor: float = 1.0

    @property
    def stage_mem_util_pct(self) -> float:
        """The GPUs' memory utilisation in ``stage`` itself (the work's signature, like its power)."""
        return self.gpu_mem_util_pct * self.stage_mem_factor

    @property
    def stage_gpu_w(self) -> float:
        """Total GPU power in ``stage`` itself: a bin shared with other stages (training with an eval,
        a checkpoint) mixes their levels into ``gpu_w``."""
        return self.gpu_w * self.stage_gpu_factor


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
