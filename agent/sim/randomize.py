"""Randomised racks: every seed draws a different plausible rack, its instrumentation and its jobs.

Why: a detector tuned on one rack learns that rack. Hardware, instrumentation and workload (with
the per-rank signatures recorded on real racks) are drawn from wide ranges; docs/twin.md lists
every range and where it comes from. Development seeds are 0–999; benches report on seeds from
10 000 (``REPORT_SEED_BASE``).
"""

from __future__ import annotations

import itertools

import numpy as np

from agent.sim.faults import FAULT_KINDS, FaultSpec
from agent.sim.jobs import Drain, NodeGroup
from agent.sim.params import (
    CoolingParams,
    GpuParams,
    InletParams,
    JobProfile,
    NodeParams,
    PduParams,
    RackParams,
    SamplingParams,
)
from agent.sim.scenarios import Scenario
from agent.sim.stages import WorkloadPlan

FAMILIES: dict[str, str] = {
    "single": "one randomised job kind per rack, long jobs with restarts, faults",
    "churn": "short jobs of mixed randomised kinds, preemptions, long idles, unlabelled jobs, faults",
}
# Racks whose nodes run different workloads (agent.sim.jobs); apart from FAMILIES so the
# single-job benches keep their tables.
LAYOUT_FAMILIES: dict[str, str] = {
    "multijob": "1–8 nodes split into 1–3 node groups, each with its own single-family jobs; "
    "half the racks drain one node for 1–6 h",
}
DEV_SEEDS = range(0, 1000)  # seeds looked at while developing; benches report on others
REPORT_SEED_BASE = 10_000
_STREAM = 424242  # the rng stream of the randomiser's draws, apart from the physics streams
# Optional signals a rack may lack, each with the chance it is missing (about one rack in four).
OPTIONAL_SIGNALS: tuple[str, ...] = ("inlet", "crac.cooling_w", "pdu.energy_kwh", "work_rate")
_MISSING_PROB = 0.25


def random_scenario(seed: int, family: str = "single", days: float = 0.5, hints: bool = True) -> Scenario:
    """A randomised rack and workload; the same (seed, family, days) always gives the same run."""
    if family in LAYOUT_FAMILIES:
        return random_multijob_scenario(seed, days=days, hints=hints)
    if family not in FAMILIES:
        known = ", ".join([*FAMILIES, *LAYOUT_FAMILIES])
        raise ValueError(f"unknown family {family!r}: expected one of {known}")
    if not 0 < days <= 400:
        raise ValueError(f"days must be in (0, 400], got {days}")
    rng = np.random.default_rng([seed, 0, _STREAM])
    hours = days * 24.0
    rack = random_rack(rng)
    kinds = random_job_kinds(rng, rack.gpu)
    faults, maintenance = random_faults(rng, hours)
    plan = random_plan(rng, family, kinds, maintenance)
    return Scenario(f"random_{family}", days, seed, plan, rack, faults, hints)


def random_multijob_scenario(
    seed: int, days: float = 0.5, hints: bool = True, *, nodes: int | None = None,
    per_node: int | None = None, jobs: int | None = None, drain: bool | None = None,
) -> Scenario:
    """A randomised rack whose node groups run their own jobs side by side (``multijob``, no faults).

    ``nodes``, ``per_node``, ``jobs`` (groups) and ``drain`` (one node down for 1–6 h) fix the layout,
    else the seed draws it; groups are contiguous and even (8 nodes, 2 jobs: 4 + 4), as a scheduler packs.
    """
    if not 0 < days <= 400:
        raise ValueError(f"days must be in (0, 400], got {days}")
    rng = np.random.default_rng([seed, 0, _STREAM, 1])  # its own stream: the other families do not move
    hours = days * 24.0
    rack = random_rack(rng, nodes=nodes, per_node=per_node)
    n = rack.nodes
    kinds = random_job_kinds(rng, rack.gpu)
    k = int(rng.integers(1, min(3, n) + 1)) if jobs is None else jobs
    if not 1 <= k <= n:
        raise ValueError(f"jobs must be in 1…{n} (one node at least each), got {k}")
    bounds = np.linspace(0, n, k + 1).round().astype(int).tolist()
    groups = tuple(
        NodeGroup(tuple(range(a, b)), random_plan(rng, "single", kinds, ()))
        for a, b in itertools.pairwise(bounds)
    )
    wants_drain = bool(rng.random() < 0.5) if drain is None else drain
    start_frac, length_h, pick = _u(rng, 0.2, 0.6), _u(rng, 1.0, 6.0), float(rng.random())
    drains: tuple[Drain, ...] = ()
    shared = [node for g in groups if len(g.nodes) > 1 for node in g.nodes]  # a lone node's job would stop
    if drain and not shared:  # asked for: say why it cannot be; drawn: this layout has no drain
        raise ValueError("drain needs a node group of at least 2 nodes")
    if wants_drain and shared:
        start_h = start_frac * hours
        node = shared[int(pick * len(shared))]
        drains = (Drain(node, round(start_h, 3), round(min(length_h, hours - start_h), 3)),)
    return Scenario(name="random_multijob", days=days, seed=seed, plan=groups[0].plan, rack=rack, hints=hints,
                    groups=groups if k > 1 else (), drains=drains)


def _u(rng: np.random.Generator, lo: float, hi: float) -> float:
    return float(rng.uniform(lo, hi))


def random_rack(
    rng: np.random.Generator, nodes: int | None = None, per_node: int | None = None
) -> RackParams:
    """Hardware, cooling and instrumentation of one plausible rack (``nodes``/``per_node`` fix the
    shape; the draws stay the same either way, so the rest of the rack does not move)."""
    drawn_nodes, drawn_per_node = int(rng.integers(1, 9)), int(rng.integers(4, 9))
    nodes = drawn_nodes if nodes is None else nodes
    per_node = drawn_per_node if per_node is None else per_node
    if not 1 <= nodes <= 8 or not 1 <= per_node <= 8:
        raise ValueError(f"a rack has 1–8 nodes of 1–8 GPUs, got {nodes} nodes of {per_node}")
    tdp = _u(rng, 300.0, 1200.0)
    gpu = GpuParams(
        tdp_w=tdp,
        idle_w=tdp * _u(rng, 0.07, 0.14),  # H100 65/700 W, A100 55/400 W, B200 ~140/1000 W
        unit_spread=_u(rng, 0.01, 0.05), noise_frac=_u(rng, 0.01, 0.04),
        r_th_k_per_w=_u(rng, 40.0, 60.0) / tdp,  # die 40–60 K over inlet at TDP
        clock_throttle_knee_w=0.85 * tdp,
    )
    node_peak_w = per_node * tdp * 1.45  # GPUs + CPUs, fans, NICs at full load
    psu_count = int(rng.choice([2, 4, 6]))
    load_at_peak = _u(rng, 0.35, 0.65)  # N+N redundancy: each PSU runs at ≤ 65 % of rating
    peak_eff = _u(rng, 0.92, 0.97)  # 80 PLUS Gold … Titanium at half load
    node = NodeParams(
        gpus_per_node=per_node,
        base_w=per_node * _u(rng, 60.0, 180.0),
        fan_max_w=per_node * _u(rng, 80.0, 250.0),
        fan_base_frac=_u(rng, 0.2, 0.35), fan_load_gain=_u(rng, 0.35, 0.7),
        fan_inlet_gain_per_k=_u(rng, 0.02, 0.06), fan_inlet_ref_c=_u(rng, 23.0, 27.0),
        fan_tau_s=_u(rng, 5.0, 40.0),
        psu_count=psu_count, psu_rating_w=node_peak_w / (psu_count * load_at_peak),
        psu_curve=((0.1, peak_eff - _u(rng, 0.03, 0.08)), (0.5, peak_eff),
                   (1.0, peak_eff - _u(rng, 0.02, 0.05))),
        feed_imbalance=_u(rng, 0.0, 0.05),
    )
    wrap = float(rng.choice([0.0, 0.0, 0.0, 10000.0, 100000.0]))
    pdu = PduParams(voltage_v=float(rng.choice([208.0, 230.0, 240.0])), energy_wrap_kwh=wrap,
                    energy_start_kwh=(wrap - 40.0, wrap - 1.0) if wrap else (20000.0, 45000.0))
    share = _u(rng, 0.1, 1.0)
    rack_heat_w = nodes * node_peak_w * 0.6
    cooling = CoolingParams(
        share=share,
        capacity_w=max(30000.0, _u(rng, 1.3, 2.0) * rack_heat_w / share),
        tau_s=_u(rng, 60.0, 900.0), dead_s=int(rng.integers(0, 241)),
        setpoint_c=_u(rng, 18.0, 25.0), carnot_fraction=_u(rng, 0.2, 0.45),
        part_load_best=_u(rng, 0.6, 0.9), part_load_penalty=_u(rng, 0.2, 0.6),
        other_racks_w=rack_heat_w * _u(rng, 0.5, 1.2) * (1.0 / share - 1.0), other_swing=_u(rng, 0.0, 0.3),
        outdoor_mean_c=_u(rng, 0.0, 30.0), outdoor_daily_amp_c=_u(rng, 1.0, 10.0),
        outdoor_sensor=bool(rng.random() < 0.5), noise_w=_u(rng, 50.0, 400.0),
    )
    inlet = InletParams(
        offsets_k=(("top", _u(rng, 0.5, 4.0)), ("mid", _u(rng, 0.2, 2.0)), ("bottom", _u(rng, 0.0, 1.0))),
        rack_heat_gain_k_per_kw=_u(rng, 0.01, 0.08),
    )
    omit = tuple(s for s in OPTIONAL_SIGNALS if rng.random() < _MISSING_PROB)
    coarse = rng.random() < 0.3  # a BMS gateway: 100 W and 1 °C steps
    bms = (("crac.power_w", -2), ("crac.supply_temp_c", 0), ("crac.return_temp_c", 0))
    pdu_s, crac_s, inlet_s = int(rng.integers(1, 31)), int(rng.integers(5, 61)), int(rng.integers(5, 61))
    sampling = SamplingParams(
        pdu_interval_s=pdu_s, crac_interval_s=crac_s, inlet_interval_s=inlet_s,
        miss_prob=_u(rng, 0.0, 0.03), glitch_prob=_u(rng, 0.0, 1e-4), outage_per_h=_u(rng, 0.0, 0.1),
        omit=omit, resolution=bms if coarse else (),
        # each device's phase within its interval (drawn after the rates)
        pdu_b_offset_s=int(rng.integers(0, pdu_s)), crac_offset_s=int(rng.integers(0, crac_s)),
        inlet_offset_s=int(rng.integers(0, inlet_s)),
    )
    return RackParams(
        gpus=nodes * per_node, gpu=gpu, node=node, pdu=pdu, cooling=cooling, inlet=inlet, sampling=sampling
    )


# Job kinds: (name, training-step power range as a fraction of TDP, memory utilisation in the step,
# step seconds, communication seconds). Dense math runs near TDP; MoE less dense and more
# all-to-all; memory offload waits on host copies; fine-tunes are small; inference is forward only.
_Range = tuple[float, float]
_KINDS: tuple[tuple[str, _Range, _Range, _Range, _Range], ...] = (
    ("dense", (0.85, 1.0), (30.0, 60.0), (2.0, 9.0), (1.0, 3.0)),
    ("moe", (0.72, 0.9), (45.0, 70.0), (2.0, 8.0), (2.0, 4.0)),
    ("offload", (0.55, 0.75), (60.0, 90.0), (3.0, 9.0), (2.0, 5.0)),
    ("finetune", (0.65, 0.9), (25.0, 50.0), (1.0, 4.0), (1.0, 2.0)),
    ("inference", (0.5, 0.8), (30.0, 60.0), (1.0, 1.0), (0.0, 0.0)),
)


# CPU, storage and NICs of a node per stage (data_load … eval), in GPU-TDP units per node
_NODE_EXTRA = ((0.4, 1.2), (0.3, 0.6), (0.4, 0.8), (0.4, 1.0), (0.3, 0.5))


def random_job_kinds(rng: np.random.Generator, gpu: GpuParams) -> tuple[JobProfile, ...]:
    """One profile per job kind, with this GPU model's and this job's stage signatures."""
    idle = gpu.idle_w / gpu.tdp_w
    spin = idle * _u(rng, 1.9, 2.6)  # H100: 155 W spinning vs 65 W idle
    kinds = []
    for name, fb_range, mem_range, fb_s, gs_s in _KINDS:
        fb = _u(rng, *fb_range)
        gs = fb * _u(rng, 0.45, 0.75)
        ev = fb * _u(rng, 0.6, 0.85)
        load = idle * _u(rng, 1.4, 2.0)  # contexts up, clocks held, nothing running: H100 115 W
        writer = spin * _u(rng, 0.85, 1.0)  # H100: the writing rank at 145 W
        mem = _u(rng, *mem_range)
        a = _u(rng, *fb_s)
        g = _u(rng, *gs_s)
        frequent = name != "inference" and rng.random() < 0.2
        extra = (0.0, *(_u(rng, lo, hi) for lo, hi in _NODE_EXTRA))
        kinds.append(
            JobProfile(
                name=f"r_{name}",
                power_frac=(idle, load, fb, gs, writer, fb if name == "inference" else ev),
                util_pct=(0.0, _u(rng, 0.0, 3.0), _u(rng, 90.0, 100.0), _u(rng, 60.0, 100.0),
                          _u(rng, 1.0, 5.0), _u(rng, 70.0, 98.0)),
                mem_util_pct=(0.0, _u(rng, 0.0, 2.0), mem, mem * _u(rng, 0.3, 0.7), _u(rng, 5.0, 25.0),
                              mem * _u(rng, 0.6, 0.9)),
                node_extra_w=tuple(gpu.tdp_w * x for x in extra),
                fb_s=(1.0, 2.0) if frequent else (a, a + _u(rng, 0.5, 3.0)),
                grad_sync_s=(1.0, 1.0) if frequent else (g, g + _u(rng, 0.0, 1.5)),
                work_rate=_u(rng, 200.0, 4000.0),
                checkpoint_writers="rank0" if rng.random() < 0.6 else "all",
                spin_power_frac=spin,
                spin_util_pct=_u(rng, 97.0, 100.0),
                collective_stall_every_min=_u(rng, 5.0, 60.0) if rng.random() < 0.5 else 0.0,
                collective_stall_s=(3.0, _u(rng, 8.0, 40.0)),
                checkpoint_every_steps=int(rng.integers(1, 3)) if frequent else 0,
                frequent_checkpoint_s=(3.0, _u(rng, 5.0, 20.0)),
                steady=name == "inference",
            )
        )
    return tuple(kinds)


def random_plan(
    rng: np.random.Generator, family: str, kinds: tuple[JobProfile, ...],
    maintenance: tuple[tuple[float, float], ...],
) -> WorkloadPlan:
    """The workload: which kinds run, how long jobs and gaps last, how often they checkpoint."""
    names = [k.name for k in kinds]
    common = dict(
        job_kinds=kinds,
        maintenance=maintenance,
        initial_load_min=(_u(rng, 0.5, 2.0), _u(rng, 3.0, 10.0)),
        checkpoint_every_min=(_u(rng, 10.0, 40.0), _u(rng, 45.0, 120.0)),
        checkpoint_min=(_u(rng, 0.5, 2.0), _u(rng, 3.0, 8.0)),
        eval_every_min=(_u(rng, 30.0, 90.0), _u(rng, 100.0, 180.0)),
        eval_min=(_u(rng, 2.0, 4.0), _u(rng, 5.0, 15.0)),
        stall_every_min=_u(rng, 5.0, 30.0),
        stall_s=(5.0, _u(rng, 30.0, 120.0)),
        first_idle_min=(2.0, 10.0),
    )
    if family == "single":
        # A rack that only serves has no training level to place its power against: seen alone
        # it is indistinguishable from flat training, so single-job racks train.
        trainers = [k.name for k in kinds if not k.steady]
        kind = trainers[int(rng.integers(len(trainers)))]
        return WorkloadPlan(profiles=(kind,), job_h=(2.0, 12.0), idle_gap_min=(2.0, 20.0), **common)  # type: ignore[arg-type]
    return WorkloadPlan(
        profiles=tuple(names),
        job_h=(0.2, 2.0),
        idle_gap_min=(1.0, 30.0),
        long_idle_prob=0.15,
        long_idle_h=(0.5, 3.0),
        preempt_prob=0.3,
        labelled_prob=0.5,
        **common,  # type: ignore[arg-type]
    )


def random_faults(
    rng: np.random.Generator, hours: float
) -> tuple[tuple[FaultSpec, ...], tuple[tuple[float, float], ...]]:
    """0–2 faults of any kind, steps or ramps; one in three is repaired and followed by another. A GPU
    driver update comes with its maintenance: the rack is drained for 15–40 min around it."""
    faults: list[FaultSpec] = []
    maintenance: list[tuple[float, float]] = []
    kinds = list(FAULT_KINDS)
    t = _u(rng, 0.15, 0.5) * hours
    for _ in range(int(rng.integers(0, 3))):
        if t >= 0.9 * hours:
            break
        kind = kinds[int(rng.integers(len(kinds)))]
        magnitude = FAULT_KINDS[kind].default_pct * _u(rng, 0.5, 1.5)
        shape = "step" if rng.random() < 0.5 else "gradual"
        repaired = rng.random() < 0.33
        end = t + _u(rng, 0.1, 0.3) * hours if repaired else None
        ramp = max(0.25, _u(rng, 0.05, 0.3) * hours)
        faults.append(FaultSpec(kind, start_h=round(t, 3), magnitude_pct=round(magnitude, 3), shape=shape,
                                ramp_h=round(ramp, 3), end_h=None if end is None else round(end, 3)))
        if kind == "gpu_driver":
            maintenance.append((t - _u(rng, 5.0, 20.0) / 60.0, _u(rng, 15.0, 40.0)))
        if end is None:
            break
        t = end + _u(rng, 0.02, 0.1) * hours
    return tuple(faults), tuple(maintenance)
