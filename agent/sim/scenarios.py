"""Named scenarios: a workload plan, a rack, faults and a seed — everything a run depends on.

A ``Scenario`` is frozen data; the same scenario always simulates to the same trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from agent.sim.faults import FaultSpec, with_overrides
from agent.sim.jobs import Drain, NodeGroup
from agent.sim.params import INLET_POSITIONS, CoolingParams, RackParams
from agent.sim.stages import WorkloadPlan
from agent.trace.model import TraceMeta

DEFAULT_START_TS = 1717200000.0  # 2024-06-01 00:00:00 UTC: fixed so a seed fully determines a trace

SCENARIOS: dict[str, str] = {
    "steady": "one dense job after another: steps, stalls, evals, checkpoints, short restarts",
    "plateau": "convergence plateau from 30 %: small-batch resampling, more evals, checkpoint reloads",
    "tide": "multi-tenant churn: short mixed jobs, preemptions, long idles",
    "fault_cooling": "steady + cooling coil degradation (COP down, gradual)",
    "fault_setpoint": "steady + supply setpoint lowered (step)",
    "fault_power_chain": "steady + power-chain loss on feed b (failed PSU / bad connection, step)",
    "fault_hotspot": "steady + recirculation hot spot at the top inlet (gradual)",
    "fault_gpu_ageing": "steady + GPU ageing: more power for the same work (gradual)",
    "fault_gpu_driver": "steady + driver update: power step and energy-counter reset",
    "workload_change": "dense jobs, then MoE jobs from 40 % (not a fault)",
    "lag_steps": "clean hour-long load steps, flat background: lag must not look like drift",
    "mixed": "churny workload with a workload change and several faults in turn",
}


@dataclass(frozen=True)
class Scenario:
    """Everything a simulated run depends on. Build with ``make_scenario``."""

    name: str
    days: float
    seed: int
    plan: WorkloadPlan
    rack: RackParams = field(default_factory=RackParams)
    faults: tuple[FaultSpec, ...] = ()
    hints: bool = True
    start_ts: float = DEFAULT_START_TS
    environment_swing: bool = True  # False: flat outdoor temperature and other-racks heat
    rack_name: str = "r07"
    site: str = "hall-b"
    groups: tuple[NodeGroup, ...] = ()  # nodes running separate workloads; () = every node runs `plan`
    drains: tuple[Drain, ...] = ()  # nodes powered down for a while (maintenance)

    @property
    def total_s(self) -> int:
        return round(self.days * 86400.0)

    @property
    def gpus(self) -> int:
        return self.rack.gpus

    @property
    def meta(self) -> TraceMeta:
        """Metadata lines of this scenario's trace (rack, site, crac share, 1-s tick)."""
        c = self.rack.cooling
        return TraceMeta(self.rack_name, self.site, {c.crac_id: c.share}, interval_s=1.0,
                         extra={"source": "rackwatt-sim", "scenario": self.name, "seed": str(self.seed)})

    def describe(self) -> dict[str, Any]:
        """truth.json ``scenario``; node groups and drains only where the rack has them."""
        out: dict[str, Any] = {
            "name": self.name, "description": SCENARIOS.get(self.name, ""), "days": self.days,
            "seed": self.seed, "gpus": self.gpus, "nodes": self.rack.nodes, "hints": self.hints,
            "start_ts": self.start_ts, "end_ts": self.start_ts + self.total_s,
        }
        if self.groups:
            out["node_groups"] = [list(g.nodes) for g in self.groups]
        if self.drains:
            out["drains"] = [
                {"node": d.node, "start_ts": self.start_ts + d.span_s()[0],
                 "end_ts": self.start_ts + min(d.span_s()[1], self.total_s)}
                for d in self.drains
            ]
        return out


def _plan_and_faults(name: str, hours: float) -> tuple[WorkloadPlan, tuple[FaultSpec, ...]]:
    if name == "steady":
        return WorkloadPlan(), ()
    if name == "plateau":
        return WorkloadPlan(job_h=(hours, hours * 2), plateau_start_h=round(hours * 0.3, 3)), ()
    if name == "tide":
        return _tide_plan(), ()
    if name.startswith("fault_"):  # steady, with the fault from 40 % of the run
        start = round(hours * 0.4, 3)
        ramp = max(0.5, min(12.0, (hours - start) / 2.0))
        return WorkloadPlan(), (FaultSpec(name.removeprefix("fault_"), start_h=start, ramp_h=ramp),)
    if name == "workload_change":
        return WorkloadPlan(workload_change_h=round(hours * 0.4, 3)), ()
    if name == "lag_steps":
        return WorkloadPlan(kind="lag_steps"), ()
    if name == "mixed":
        h = hours
        plan = replace(_tide_plan(), workload_change_h=round(0.5 * h, 3), preempt_prob=0.15,
                       long_idle_prob=0.1)
        return plan, (
            FaultSpec("hotspot", start_h=0.15 * h, end_h=0.3 * h, ramp_h=max(0.25, 0.05 * h)),
            FaultSpec("setpoint", start_h=0.35 * h, end_h=0.45 * h),
            FaultSpec("power_chain", start_h=0.6 * h, end_h=0.7 * h),
            FaultSpec("gpu_ageing", start_h=0.75 * h, ramp_h=max(0.5, 0.2 * h)),
        )
    raise ValueError(f"unknown scenario {name!r}: expected one of {', '.join(SCENARIOS)}")


def _tide_plan() -> WorkloadPlan:
    return WorkloadPlan(profiles=("dense", "moe", "finetune"), job_h=(0.3, 4.0), idle_gap_min=(2.0, 45.0),
                        long_idle_prob=0.25, long_idle_h=(1.0, 6.0), preempt_prob=0.3)


def make_scenario(
    name: str, days: float = 3.0, seed: int = 0, gpus: int = 16, hints: bool = True,
    fault: FaultSpec | None = None, *, fault_magnitude_pct: float | None = None,
    fault_shape: str | None = None, fault_start_h: float | None = None, crac_share: float | None = None,
    start_ts: float = DEFAULT_START_TS, outdoor_sensor: bool = True,
) -> Scenario:
    """Build a named scenario.

    ``fault`` replaces the scenario's faults (e.g. steady + a fault); ``fault_*`` override every
    fault's value. ``start_ts`` (Unix seconds) places the run in time: the outdoor cycle follows the
    time of day. ``outdoor_sensor=False`` leaves out the cooling unit's outdoor air temperature.
    """
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}: expected one of {', '.join(SCENARIOS)}")
    if not 0 < days <= 400 or round(days * 86400.0) < 1:
        raise ValueError(f"days must be in (0, 400] and cover at least one second, got {days}")
    if not 1 <= gpus <= 1024:
        raise ValueError(f"gpus must be in [1, 1024], got {gpus}")
    hours = days * 24.0
    plan, faults = _plan_and_faults(name, hours)
    if fault is not None:
        faults = (fault,)
    faults = tuple(with_overrides(f, fault_magnitude_pct, fault_shape, fault_start_h) for f in faults)
    rack_pdus = RackParams().pdu_ids
    for f in faults:
        if f.start_h >= hours:
            raise ValueError(f"fault {f.kind} starts at {f.start_h} h, after the trace ends ({hours:g} h)")
        allowed = {"power_chain": rack_pdus, "hotspot": INLET_POSITIONS}.get(f.kind)
        if allowed is not None and f.resolved_target not in allowed:
            choices = ", ".join(allowed)
            raise ValueError(f"fault {f.kind}: target {f.resolved_target!r} is not one of {choices}")
    share = CoolingParams().share if crac_share is None else crac_share
    if not 0 < share <= 1:
        raise ValueError(f"crac share must be in (0, 1], got {share}")
    # Other racks on the unit: as many rack-equivalents as the share implies, ~11 kW of heat each
    # per 16 GPUs at typical mixed load.
    per_rack_w = 11000.0 * gpus / 16.0
    cooling = CoolingParams(share=share, other_racks_w=per_rack_w * (1.0 / share - 1.0),
                            capacity_w=max(30000.0, 1.6 * per_rack_w / share), outdoor_sensor=outdoor_sensor)
    rack = RackParams(gpus=gpus, cooling=cooling)
    return Scenario(name, days, seed, plan, rack, faults, hints, start_ts=float(start_ts),
                    environment_swing=name != "lag_steps")
