"""Which cause a confirmed residual shift points to, from what moved with it (DESIGN.md rules).

- cooling residual (cooling power vs the lag model's expectation for the heat) → ``cooling``;
  a moved setpoint is named as the likely reason.
- IT residual (PDU vs the IT model from GPU + node load) → ``power_chain``, unless the inlet
  temperatures moved with it (server fans spinning up for a hot spot) → ``thermal``; without
  GPU telemetry the IT side cannot be separated → ``unknown``.
- inlet spread → ``thermal``.
- GPU residual (power vs the expectation for this stage and work rate) → ``gpu_hardware``,
  unless the job changed, its work rate moved or its stage mix moved → ``workload``; on a rack
  that reports no work rate, a step larger than a hardware or driver change adds → ``workload``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent.engine.drift import tuning as T
from agent.engine.drift.channel import ACTIVE, SUSPECTED, ResidualChannel
from agent.engine.drift.context import SignalContext

CAUSES: tuple[str, ...] = ("cooling", "power_chain", "thermal", "gpu_hardware", "workload", "unknown")
# Evidence thresholds for "moved with it": tuning.py.
# Faults cost energy or margin (issue 16): a failed PSU, a hot spot, a degraded coil or an ageing
# GPU only ever add power (or widen the inlet spread). A shift of one of these causes the other
# way saves energy: it is a change of the rack's normal, never that fault (see ``costs``).
COSTLY_CAUSES: frozenset[str] = frozenset({"cooling", "power_chain", "thermal", "gpu_hardware", "unknown"})


@dataclass(frozen=True)
class Attribution:
    cause: str
    explanation: str
    # The shift must have held this long (from its evidence's start) before it is believed: a
    # verdict from a step's size alone, which a stage episode the labels do not name can also make.
    persist_s: float = 0.0


def costs(cause: str, deviation: float) -> bool:
    """Whether a confirmed shift of ``deviation`` (signed, the residual's unit) can be ``cause``:
    a fault cause needs a shift that costs energy or margin; ``workload`` is informational and
    takes either sign."""
    return cause not in COSTLY_CAUSES or deviation > 0.0


def saving(component: str, deviation: float) -> Attribution:
    """What a shift that saves energy (or narrows the inlet spread) is: on the GPUs, less power per
    stage by more than the same work varies (``SAME_WORK_POWER_FRAC``, the rule that tells resumed
    work from new) is a lighter job (``workload``: re-learned, informational); anything smaller, and
    a saving on the other components, is a new normal the baselines adopt without an event (``""``):
    no job changed that anyone could be told about, and no fault saves energy."""
    if component == "gpu" and abs(deviation) > 100.0 * T.SAME_WORK_POWER_FRAC:
        return Attribution(
            "workload",
            f"GPU power moved {abs(deviation):.1f} % down for the same stage: a lighter job or a new "
            "stage mix, not a fault (faults cost energy); re-learning its baseline.",
        )
    return Attribution("", f"{component} moved {deviation:+.2f} the saving way: adopted as the new normal.")


def _channel_moving(channel: ResidualChannel) -> bool:
    return channel.mode in (ACTIVE, SUSPECTED) or channel.cusum >= T.MOVING_FRAC * channel.params.threshold_h


def attribute(
    component: str, deviation: float, channels: dict[str, ResidualChannel], ctx: SignalContext, ts: float,
    gpu_known: bool, since_ts: float = math.nan,
) -> Attribution:
    """Name the cause of a shift just confirmed on ``component`` (deviation signed, its unit);
    ``since_ts``: when its evidence began (a shift that began before a job change is not it)."""
    more = "more" if deviation >= 0 else "less"
    up = "up" if deviation >= 0 else "down"
    if component == "cooling":
        setpoint = ctx.levels["setpoint_c"]
        moved = ctx.moved("setpoint_c")
        was, now = setpoint.ref, setpoint.fast
        if math.isfinite(moved) and abs(moved) >= T.SETPOINT_MOVED_C and was is not None and now is not None:
            return Attribution(
                "cooling",
                f"Cooling uses {abs(deviation):.1f} % {more} power for the same heat; the cooling-unit "
                f"setpoint moved from {was:.1f} °C to {now:.1f} °C.",
            )
        return Attribution(
            "cooling",
            f"Cooling uses {abs(deviation):.1f} % {more} power for the same heat with an unchanged "
            "setpoint: check the cooling unit (coil, filters, strategy, other racks on it).",
        )
    if component == "thermal":
        return Attribution(
            "thermal",
            f"Rack inlet temperatures spread {abs(deviation):.1f} °C "
            f"{'wider' if deviation >= 0 else 'narrower'} than usual: look for a hot spot or recirculation.",
        )
    if component == "it":
        gpu = channels.get("gpu")
        reason = workload_reason(ctx, ts, since_ts=since_ts)
        if gpu is not None and _gpu_moved_with(gpu, deviation):
            # PDU and GPU moved together: the load changed, not the power chain.
            if reason:
                return Attribution(
                    "workload",
                    f"PDU and GPU power moved {abs(deviation):.1f} % {up} together with {reason}: "
                    "the job changed; re-learning its baseline.",
                )
            return Attribution(
                "gpu_hardware",
                f"PDU power is {abs(deviation):.1f} % {up} because the GPUs draw more for the same work "
                "rate and stage: ageing, firmware or driver change.",
            )
        if reason:
            return Attribution(
                "workload",
                f"PDU power moved {abs(deviation):.1f} % {up} against the IT model together with {reason}: "
                "the servers' own load changed with the job; re-learning.",
            )
        if _thermal_moved(channels, ctx):
            return Attribution(
                "thermal",
                f"PDU power is {abs(deviation):.1f} % {up} for the same GPU load while rack inlet "
                "temperatures rose: server fans are working against a hot spot.",
            )
        if not gpu_known:
            return Attribution(
                "unknown",
                f"PDU power is {abs(deviation):.1f} % {up} against the IT model, but without GPU "
                "telemetry the load side cannot be told apart.",
            )
        return Attribution(
            "power_chain",
            f"PDU power is {abs(deviation):.1f} % {up} for the same GPU and server load: PSU or "
            "distribution losses, or the PSU redundancy configuration, changed.",
        )
    if component == "gpu_idle":  # no job sets the GPUs' power at rest
        return Attribution(
            "gpu_hardware",
            f"GPUs at rest draw {abs(deviation):.1f} % {more} power than their usual idle level, which "
            "no job sets: ageing, firmware or driver change.",
        )
    if component == "gpu":
        reason = workload_reason(ctx, ts, since_ts=since_ts)
        if reason:
            return Attribution(
                "workload",
                f"GPU power per unit of work moved {abs(deviation):.1f} % {up} together with {reason}: "
                "the job changed; re-learning its baseline.",
            )
        if _new_work_by_power(ctx, deviation):
            # New work holds its level; an eval or a stall that stage inference took for training
            # ends within the hour that a new level takes to show itself (SHOW_S).
            return Attribution(
                "workload",
                f"GPU power moved {abs(deviation):.1f} % {up} for the same stage on a rack that reports no "
                f"work rate: more than a hardware or driver change adds "
                f"({100.0 * T.SAME_WORK_POWER_FRAC:.0f} %), so new work; re-learning its baseline.",
                persist_s=T.SHOW_S,
            )
        return Attribution(
            "gpu_hardware",
            f"GPUs draw {abs(deviation):.1f} % {more} power for the same work rate and stage: "
            "ageing, firmware or driver change.",
        )
    return Attribution("unknown", f"Residual of {component} moved {deviation:+.1f}.")


def _new_work_by_power(ctx: SignalContext, deviation: float) -> bool:
    """Without a work rate only the step's size tells new work from new hardware: a driver change adds
    a few % (``SAME_WORK_POWER_FRAC``, as for resumed work), so a larger GPU step is new work."""
    return not ctx.rated and abs(deviation) > 100.0 * T.SAME_WORK_POWER_FRAC


def _gpu_moved_with(gpu: ResidualChannel, deviation: float) -> bool:
    """The GPU residual is moving the same way (even below its own alarm level): a PDU rise that
    follows GPU power the IT model did not see (e.g. GPU samples rejected at a power cap)."""
    if gpu.mode in (ACTIVE, SUSPECTED):
        return gpu.recent_deviation() * deviation > 0
    moved = gpu.recent_deviation()
    rising = gpu.cusum >= T.MOVING_FRAC * gpu.params.threshold_h
    return rising and moved * deviation > 0 and abs(moved) >= T.WITH_IT_GPU_PCT


def _thermal_moved(channels: dict[str, ResidualChannel], ctx: SignalContext) -> bool:
    thermal = channels.get("thermal")
    if thermal is not None and _channel_moving(thermal) and thermal.recent_deviation() > 0:
        return True
    spread = ctx.moved("inlet_spread_c")
    mean = ctx.moved("inlet_mean_c")
    setpoint = ctx.moved("setpoint_c")
    setpoint = setpoint if math.isfinite(setpoint) else 0.0
    if math.isfinite(spread) and spread >= T.SPREAD_MOVED_C:
        return True
    # Inlets warmer without the setpoint having been raised: the air reaching the servers changed.
    return math.isfinite(mean) and mean - max(setpoint, 0.0) >= T.INLET_MEAN_MOVED_C


def workload_reason(ctx: SignalContext, ts: float, since_ts: float = math.nan) -> str:
    """A short phrase naming the workload evidence, or "" when there is none: a job change or a
    workload shift in the last ``tuning.JOB_RECENT_S`` (the engine is still re-learning) unless the
    shift's evidence began before it (``since_ts``), or a moved work rate or stage mix."""
    before_job = math.isfinite(since_ts) and since_ts < ctx.workload_ts
    if math.isfinite(ctx.workload_ts) and 0 <= ts - ctx.workload_ts <= T.JOB_RECENT_S and not before_job:
        return f"a workload change {(ts - ctx.workload_ts) / 3600:.1f} h ago (job {ctx.job or '?'})"
    rate = ctx.work_rate_moved_pct()
    if math.isfinite(rate) and abs(rate) >= T.WORK_RATE_MOVED_PCT:
        return f"the work rate ({rate:+.1f} %)"
    mix = ctx.mix.distance
    if mix >= T.MIX_MOVED:
        return f"the stage mix ({100 * mix:.0f} % of time moved between stages)"
    return ""
