"""Synthetic ``ComponentSample`` streams: healthy residual noise plus injected steps, ramps and lags.

Why: the detector must be testable without the engine or the twin — on streams whose truth is
known exactly. Residual noise is AR(1) per component (the engine's errors persist for minutes),
with a daily wobble on the cooling side (COP follows the outdoor cycle), and stage changes start
a lag transient that the engine flags ``transient`` while the facility settles: the cooling unit
removes (and its fans follow) the rack's heat late, so the engine's expectation is off while
the unit's power for its own load is not. ``unit_fan=False`` hides the fan speed, leaving only
the engine's lag-model residual on the cooling side.
This is a test instrument, not a model of a rack: see ``agent.sim`` for the physics.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from agent.engine.components import ComponentSample

STAGE_LEVELS_W = {"forward_backward": 10000.0, "grad_sync": 6000.0, "checkpoint": 3000.0,
                  "eval": 7000.0, "data_load": 3500.0, "idle": 1500.0}  # fmt: skip
NOISE_PCT = {"it": 0.5, "cooling": 1.0, "gpu": 0.7}
SPREAD_NOISE_C = 0.15


@dataclass(frozen=True)
class Injection:
    """A change from ``start_s`` (seconds from the stream's start): step if ``ramp_s`` is 0."""

    component: str  # it | cooling | gpu | thermal | setpoint | workload
    start_s: float
    magnitude: float  # % for power components, °C for thermal/setpoint
    ramp_s: float = 0.0

    def level(self, t_s: float) -> float:
        if t_s < self.start_s:
            return 0.0
        if self.ramp_s <= 0:
            return self.magnitude
        return self.magnitude * min(1.0, (t_s - self.start_s) / self.ramp_s)


def stream(
    days: float,
    seed: int,
    injections: tuple[Injection, ...] = (),
    bin_s: float = 60.0,
    t0: float = 1_764_000_000.0,
    transient_bins: int = 6,
    lag_pct: float = 12.0,
    noise_scale: float = 1.0,
    unit_fan: bool = True,
) -> Iterator[ComponentSample]:
    """Yield one sample per bin for ``days`` days; deterministic per ``seed``."""
    rng = np.random.default_rng(seed)
    n = int(days * 86400 / bin_s)
    ar = {name: 0.0 for name in (*NOISE_PCT, "thermal")}
    rho = 0.8
    stage = "forward_backward"
    stage_left = 40
    since_change = 999
    job = "job-a"
    lag_sign = 1.0
    for i in range(n):
        t = i * bin_s
        stage_left -= 1
        if stage_left <= 0:
            stage, stage_left = _next_stage(rng, stage)
            since_change = 0
            lag_sign = 1.0 if rng.random() < 0.5 else -1.0
        else:
            since_change += 1
        for name in ar:
            sigma = (SPREAD_NOISE_C if name == "thermal" else NOISE_PCT[name]) * noise_scale
            ar[name] = rho * ar[name] + math.sqrt(1 - rho * rho) * sigma * rng.standard_normal()
        shifts = {"it": 0.0, "cooling": 0.0, "gpu": 0.0, "thermal": 0.0, "setpoint": 0.0, "workload": 0.0}
        for inj in injections:
            shifts[inj.component] += inj.level(t)
        if shifts["workload"]:
            job = "job-b"
        gpu_profile = 1.0 + shifts["workload"] / 100.0
        transient = since_change < transient_bins
        lag = lag_pct * lag_sign * math.exp(-since_change / 2.0) if transient else 0.0
        base = STAGE_LEVELS_W[stage]
        gpu_exp = base
        gpu_w = base * gpu_profile * (1 + (ar["gpu"] + shifts["gpu"]) / 100)
        it_exp = gpu_w * 1.08 + 2000.0
        it_w = it_exp * (1 + (ar["it"] + shifts["it"] + 0.3 * shifts["thermal"]) / 100)
        cool_exp = 0.35 * it_w
        unit_load_w = it_w * (1 + lag / 100)  # the heat the unit removes lags the rack's heat
        daily = 0.4 * math.sin(2 * math.pi * t / 86400.0)
        setpoint_effect = -2.5 * shifts["setpoint"]  # a lower setpoint costs ≈ 2.5 %/°C
        cool_pct = ar["cooling"] + daily + shifts["cooling"] + setpoint_effect
        cool_w = 0.35 * unit_load_w * (1 + cool_pct / 100)
        fan = 60.0 * unit_load_w / 12000.0 if unit_fan else math.nan
        spread = 1.5 + base / 10000.0 + ar["thermal"] + shifts["thermal"]
        work_rate = 1000.0 * base / 10000.0 if stage == "forward_backward" else math.nan
        if shifts["workload"]:
            work_rate *= 0.8
        yield ComponentSample(
            ts=t0 + t + bin_s,
            duration_s=bin_s,
            stage=stage,
            stage_source="hint",
            job=job,
            transient=transient,
            gpu_w=gpu_w,
            work_rate=work_rate,
            gpu_expected_w=gpu_exp,
            it_measured_w=it_w,
            it_expected_w=it_exp,
            cooling_measured_w=cool_w,
            cooling_expected_w=cool_exp,
            inlet_mean_c=24.0 + 0.5 * shifts["thermal"] + shifts["setpoint"] + 0.05 * ar["thermal"],
            inlet_spread_c=spread,
            fan_pct=fan,
            setpoint_c=22.0 + shifts["setpoint"],
        )


def _next_stage(rng: np.random.Generator, current: str) -> tuple[str, int]:
    """Mostly training with checkpoints, evals and data-load stalls between (bins of 60 s)."""
    if current != "forward_backward":
        return "forward_backward", int(rng.integers(30, 90))
    pick = rng.random()
    if pick < 0.5:
        return "checkpoint", int(rng.integers(2, 6))
    if pick < 0.75:
        return "eval", int(rng.integers(5, 15))
    if pick < 0.9:
        return "data_load", int(rng.integers(1, 4))
    return "idle", int(rng.integers(5, 30))


def state_leaves(node: object) -> int:
    """How many values a JSON-like state holds (what must not grow with uptime)."""
    if isinstance(node, dict):
        return sum(state_leaves(v) for v in node.values())
    if isinstance(node, list):
        return sum(state_leaves(v) for v in node)
    return 1
