"""Physical parameters of the rack twin, with the reasoning behind each value (see docs/twin.md).

Everything here is plain frozen data; the physics lives in ``agent.sim.physics``. Values are
H100-SXM-class (TDP 700 W) in a DGX-like 8-GPU node, on a shared in-row/CRAH cooling unit.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from agent.trace.model import CANONICAL_STAGES

INLET_POSITIONS: tuple[str, ...] = ("top", "mid", "bottom")
STAGES: tuple[str, ...] = CANONICAL_STAGES  # index = stage code used in arrays
IDLE, DATA_LOAD, FORWARD_BACKWARD, GRAD_SYNC, CHECKPOINT, EVAL = range(6)


@dataclass(frozen=True)
class JobProfile:
    """How one kind of training job loads a GPU, per stage (index = stage code)."""

    name: str
    power_frac: tuple[float, ...]  # GPU board power as a fraction of TDP, per stage
    util_pct: tuple[float, ...]  # mean NVML utilisation, per stage
    mem_util_pct: tuple[float, ...]  # mean NVML memory-controller utilisation, per stage
    node_extra_w: tuple[float, ...]  # CPU / NIC / storage power of a node on top of its base, per stage
    fb_s: tuple[float, float]  # forward_backward duration range of one step, s
    grad_sync_s: tuple[float, float]  # grad_sync duration range of one step, s
    work_rate: float  # nominal throughput (samples/s) of a job of this kind on this rack
    # Per-GPU signatures seen on real racks (the defaults keep every GPU at the stage's level):
    # "all": every rank writes its own shard of a checkpoint; "rank0": one rank writes while the
    # others spin in an NCCL collective (100 % utilisation at little power) until it is done.
    checkpoint_writers: str = "all"
    spin_power_frac: float = 0.22  # board power of a rank spinning in a collective, fraction of TDP
    spin_util_pct: float = 100.0  # NVML counts a spinning NCCL kernel as busy
    collective_stall_every_min: float = 0.0  # mean interval of collective stalls (all ranks spin); 0 = none
    collective_stall_s: tuple[float, float] = (3.0, 30.0)
    checkpoint_every_steps: int = 0  # > 0: a short checkpoint after every this many steps
    frequent_checkpoint_s: tuple[float, float] = (4.0, 15.0)
    steady: bool = False  # inference-like: no training steps; forward passes at the eval level


#                     idle  data_load fwd_bwd grad_sync ckpt  eval
DENSE = JobProfile(
    name="dense",
    power_frac=(0.093, 0.17, 0.95, 0.50, 0.15, 0.72),
    util_pct=(0.0, 12.0, 98.0, 55.0, 6.0, 82.0),
    mem_util_pct=(0.0, 8.0, 45.0, 30.0, 15.0, 35.0),
    node_extra_w=(0.0, 700.0, 350.0, 450.0, 550.0, 300.0),
    fb_s=(6.0, 9.0), grad_sync_s=(1.0, 3.0), work_rate=1024.0,
)
MOE = JobProfile(
    name="moe",
    power_frac=(0.093, 0.17, 0.82, 0.58, 0.15, 0.66),
    util_pct=(0.0, 12.0, 92.0, 62.0, 6.0, 75.0),
    mem_util_pct=(0.0, 8.0, 58.0, 40.0, 15.0, 45.0),
    node_extra_w=(0.0, 700.0, 380.0, 550.0, 550.0, 320.0),
    fb_s=(5.0, 8.0), grad_sync_s=(2.0, 4.0), work_rate=1536.0,  # all-to-all routing: longer, busier grad_sync
)
FINETUNE = JobProfile(
    name="finetune",
    power_frac=(0.093, 0.17, 0.78, 0.45, 0.15, 0.60),
    util_pct=(0.0, 15.0, 90.0, 50.0, 6.0, 75.0),
    mem_util_pct=(0.0, 8.0, 35.0, 25.0, 15.0, 30.0),
    node_extra_w=(0.0, 600.0, 300.0, 400.0, 500.0, 280.0),
    fb_s=(2.0, 4.0), grad_sync_s=(1.0, 2.0), work_rate=640.0,
)
# lag_steps: dense levels, one clean level per block, no step-level alternation
STEP_LOAD = replace(DENSE, name="step_load", fb_s=(3600.0, 3600.0), grad_sync_s=(0.0, 0.0))
PROFILES: dict[str, JobProfile] = {p.name: p for p in (DENSE, MOE, FINETUNE, STEP_LOAD)}


@dataclass(frozen=True)
class GpuParams:
    tdp_w: float = 700.0  # H100 SXM5 board power limit
    idle_w: float = 65.0  # H100 idle with persistence mode on (sample trace: 62–71 W)
    unit_spread: float = 0.03  # per-GPU multiplicative spread (silicon lottery), 1 sigma
    noise_frac: float = 0.02  # 1-s power noise, fraction of the level
    work_rate_exponent: float = 0.7  # dynamic power ∝ (work_rate / nominal) ** exponent
    r_th_k_per_w: float = 0.07  # die temperature rise per board watt (700 W → +49 K over inlet)
    temp_tau_s: float = 40.0  # heat-sink thermal time constant
    clock_max_mhz: float = 1980.0  # H100 SXM max boost clock
    clock_idle_mhz: float = 345.0
    clock_throttle_mhz_per_w: float = 3.0  # clock reduction per watt above the throttle knee
    clock_throttle_knee_w: float = 600.0


@dataclass(frozen=True)
class NodeParams:
    gpus_per_node: int = 8
    base_w: float = 1000.0  # 2 CPUs, memory, NICs, NVSwitches, SSDs at idle
    fan_max_w: float = 1500.0  # all server fans at 100 % (DGX-class chassis)
    fan_min_frac: float = 0.2
    fan_base_frac: float = 0.25  # speed at zero GPU heat and an inlet below the knee
    fan_load_gain: float = 0.55  # speed added at full GPU heat
    fan_inlet_gain_per_k: float = 0.04  # speed added per K of inlet above the knee
    fan_inlet_ref_c: float = 24.5  # fan tables are flat below this inlet temperature
    fan_tau_s: float = 20.0  # fan controller smoothing
    psu_count: int = 4  # 2 + 2 redundant, two on each feed
    psu_rating_w: float = 3300.0
    # PSU efficiency anchor points (load fraction, efficiency): DESIGN.md / 80 PLUS-like curve.
    psu_curve: tuple[tuple[float, float], ...] = ((0.1, 0.90), (0.5, 0.96), (1.0, 0.91))
    feed_a_share: float = 0.5  # fraction of a node's input on feed a, before per-node imbalance
    feed_imbalance: float = 0.01  # per-node deviation of that share, 1 sigma


@dataclass(frozen=True)
class PduParams:
    voltage_v: float = 230.0
    voltage_swing_v: float = 2.0  # slow grid variation amplitude
    voltage_noise_v: float = 0.3
    pf_low: float = 0.95  # power factor at light load
    pf_high: float = 0.99  # at half load and above
    energy_start_kwh: tuple[float, float] = (20000.0, 45000.0)  # meter reading at t0 (random in range)
    energy_wrap_kwh: float = 0.0  # > 0: the meter's register rolls over at this reading (0 = never)


@dataclass(frozen=True)
class CoolingParams:
    crac_id: str = "1"
    share: float = 0.25  # this rack's share of the unit (4 racks on it)
    capacity_w: float = 120000.0  # rated sensible cooling capacity
    tau_s: float = 300.0  # first-order lag of heat removal behind heat load
    dead_s: int = 60  # transport / controller dead time
    setpoint_c: float = 22.0  # supply-air setpoint
    supply_gain_k: float = 2.5  # supply-air rise at full-capacity imbalance (heat − removal)
    carnot_fraction: float = 0.3  # real COP / Carnot COP (vapour-compression CRAC, fans excluded)
    evap_approach_k: float = 10.0  # evaporator below supply air
    cond_approach_k: float = 20.0  # condenser above outdoor air
    part_load_best: float = 0.75  # part-load ratio of best COP
    part_load_penalty: float = 0.4  # COP loss at zero load relative to best
    fan_max_w: float = 6000.0  # unit fans at 100 %
    fan_min_pct: float = 30.0
    airflow_kg_s: float = 14.4  # air mass flow at 100 % fan (12 m³/s)
    other_racks_w: float = 45000.0  # mean heat of the other racks on the unit
    other_swing: float = 0.12  # their slow variation, fraction of the mean
    outdoor_mean_c: float = 18.0
    outdoor_daily_amp_c: float = 6.0  # ± around the mean, warmest at 15:00 site time
    outdoor_peak_hour: float = 15.0
    outdoor_sensor: bool = True  # the unit reports its outdoor air temperature (crac.<id>.outdoor_temp_c)
    outdoor_probe_offset_k: float = 0.8  # probe reads warm (sun, condenser exhaust): a bias, not the truth
    noise_w: float = 150.0  # 1 sigma noise on unit power readings


@dataclass(frozen=True)
class InletParams:
    # Inlet offset over the supply air from recirculation, by position (bottom → top).
    offsets_k: tuple[tuple[str, float], ...] = (("top", 2.0), ("mid", 1.0), ("bottom", 0.5))
    rack_heat_gain_k_per_kw: float = 0.03  # extra recirculation as the rack's own exhaust grows
    noise_k: float = 0.1


@dataclass(frozen=True)
class SamplingParams:
    nvml_interval_s: int = 1
    pdu_interval_s: int = 5
    pdu_b_offset_s: int = 3
    crac_interval_s: int = 10
    crac_offset_s: int = 1
    inlet_interval_s: int = 10
    inlet_offset_s: int = 2
    miss_prob: float = 0.002  # a device poll that returns nothing
    glitch_prob: float = 2e-5  # a single cell with a sentinel or spike
    outage_per_h: float = 0.03  # chance per hour that a network device stops answering for a while
    outage_s: tuple[float, float] = (30.0, 300.0)  # how long such an outage lasts
    omit: tuple[str, ...] = ()  # optional signals this rack does not have: "inlet", "crac.cooling_w", …
    resolution: tuple[tuple[str, int], ...] = ()  # (kind.field, decimals) overrides, e.g. a coarse BMS


@dataclass(frozen=True)
class RackParams:
    """All physical parameters of one simulated rack."""

    gpus: int = 16
    gpu: GpuParams = field(default_factory=GpuParams)
    node: NodeParams = field(default_factory=NodeParams)
    pdu: PduParams = field(default_factory=PduParams)
    cooling: CoolingParams = field(default_factory=CoolingParams)
    inlet: InletParams = field(default_factory=InletParams)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    pdu_ids: tuple[str, ...] = ("a", "b")

    @property
    def nodes(self) -> int:
        """Nodes in the rack; the last one may be partly populated."""
        return -(-self.gpus // self.node.gpus_per_node)
