"""The rack's physics: GPUs → nodes → PSUs → PDU feeds → heat → cooling, clean (unsampled) values.

``RackPhysics.step(s0, s1)`` is vectorised over time and GPUs and carries the lag states to the
next (consecutive) chunk. Random draws come from streams keyed by (seed, chunk, purpose) and never
depend on faults, so a fault changes only what its cause acts on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from agent.sim import cooling as cool
from agent.sim.faults import combined, driver_resets_s
from agent.sim.jobs import RackWorkload
from agent.sim.lag import first_order_lag
from agent.sim.params import CHECKPOINT, EVAL, FORWARD_BACKWARD, GRAD_SYNC, IDLE, INLET_POSITIONS
from agent.sim.scenarios import Scenario
from agent.sim.stages import V_SPIN, profile_table
from agent.trace.model import J_PER_KWH

CHUNK_S = 3600  # random streams are keyed per hour-long chunk
INLET_HEIGHTS = {"top": 1.0, "mid": 0.5, "bottom": 0.0}
NODE_AIRFLOW_KG_S = 0.65  # server air flow at 100 % fan (≈1100 CFM, DGX-class)
TYPICAL_FAN_FRAC = 0.75  # fan speed assumed for the exhaust-temperature estimate of a hot spot
TYPICAL_PSU_EFFICIENCY = 0.94  # for the first-pass heat estimate only (the supply-air transient)

# Stream ids for np.random.default_rng([seed, chunk, stream]).
S_GPU, S_UTIL, S_INLET, S_PDU, S_CRAC, S_RATE, S_SAMPLING, S_OUTAGE, S_CAP = range(1, 10)
# A GPU held at its power cap does not read a constant: the limiter regulates around the cap and
# the reading carries its own noise (σ as a fraction of the cap).
GPU_CAP_READING_NOISE_FRAC = 0.005


def psu_loss_coefficients(curve: tuple[tuple[float, float], ...]) -> tuple[float, float, float]:
    """Fit loss/rating = a + b·x + c·x² (no-load, linear, I²R terms) through three (x, η) points."""
    rows = [[1.0 / x, 1.0, x] for x, _ in curve]  # loss/output = (a + b x + c x²)/x
    rhs = [(1.0 - eta) / eta for _, eta in curve]
    a, b, c = np.linalg.solve(np.asarray(rows), np.asarray(rhs))
    return float(a), float(b), float(c)


def psu_efficiency(load_frac: np.ndarray, coeffs: tuple[float, float, float]) -> np.ndarray:
    """Output/input of a PSU at output load fraction ``load_frac`` (of its rating)."""
    a, b, c = coeffs
    x = np.maximum(load_frac, 0.01)
    loss = a + b * x + c * x * x
    efficiency: np.ndarray = x / (x + loss)
    return efficiency


@dataclass
class RackConstants:
    """Per-rack properties fixed by the seed (unit-to-unit spread, meter offsets, phases)."""

    gpu_unit: np.ndarray  # (G,) multiplicative power spread
    gpu_r_th: np.ndarray  # (G,) thermal resistance factor
    ageing_weight: np.ndarray  # (G,) how strongly each GPU ages
    node_of_gpu: np.ndarray  # (G,) node index
    node_gpu_count: np.ndarray  # (nodes,)
    node_height: np.ndarray  # (nodes,) 0 = bottom, 1 = top
    feed_a_share: np.ndarray  # (nodes,)
    gpu_energy0_j: np.ndarray  # (G,)
    pdu_energy0_kwh: np.ndarray  # (feeds,)
    phases: tuple[float, float, float]


def rack_constants(scenario: Scenario) -> RackConstants:
    rp, g, nodes = scenario.rack, scenario.rack.gpus, scenario.rack.nodes
    rng = np.random.default_rng([scenario.seed, 0, 99])
    node_of_gpu = np.arange(g) // rp.node.gpus_per_node
    return RackConstants(
        gpu_unit=1.0 + rp.gpu.unit_spread * rng.standard_normal(g),
        gpu_r_th=1.0 + 0.05 * rng.standard_normal(g),
        ageing_weight=np.clip(1.0 + 0.3 * rng.standard_normal(g), 0.3, 1.7),
        node_of_gpu=node_of_gpu,
        node_gpu_count=np.bincount(node_of_gpu, minlength=nodes).astype(np.float64),
        node_height=(np.arange(nodes) + 0.5) / nodes,
        feed_a_share=rp.node.feed_a_share + rp.node.feed_imbalance * rng.standard_normal(nodes),
        gpu_energy0_j=rng.uniform(1e8, 2e9, g).round(),
        pdu_energy0_kwh=rng.uniform(*rp.pdu.energy_start_kwh, len(rp.pdu_ids)),
        phases=(float(rng.uniform(0, 2 * math.pi)), float(rng.uniform(0, 2 * math.pi)),
                float(rng.uniform(0, 2 * math.pi))),
    )


@dataclass
class PhysicsState:
    gpu_heat_w: np.ndarray  # (G,) lagged board power (heat-sink state)
    fan_frac: np.ndarray  # (nodes,)
    cooling: cool.CoolingState
    gpu_energy_j: np.ndarray  # (G,)
    pdu_energy_kwh: np.ndarray  # (feeds,)
    next_s: int = 0


class RackPhysics:
    """Computes clean signals chunk by chunk for one scenario."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.rp = scenario.rack
        self.workload = RackWorkload(
            scenario.plan, scenario.groups, scenario.drains, self.rp.nodes, scenario.total_s, scenario.seed
        )
        self.timeline = self.workload.timeline  # rack-wide label view (a single job: its one timeline)
        self.k = rack_constants(scenario)
        # The first GPU of each group's first node is its rank 0 (the one that writes a rank-0 checkpoint).
        self.rank0_gpu = np.zeros(self.rp.gpus, dtype=bool)
        for g in self.workload.groups:
            self.rank0_gpu[int(np.flatnonzero(self.k.node_of_gpu == min(g.nodes))[0])] = True
        self.env = cool.Environment(self.rp.cooling, self.k.phases, scenario.environment_swing)
        self.psu = psu_loss_coefficients(self.rp.node.psu_curve)
        # nominal work_rate per rack-wide job index, with a NaN slot for index -1 (no job)
        self._job_nominal = np.array([j["work_rate_nominal"] for j in self.workload.jobs] + [math.nan])
        gp = self.rp.gpu
        table = profile_table(self.scenario.plan)  # (profiles × stages) tables, indexed by code
        self.power_level = np.array([p.power_frac for p in table], dtype=np.float64) * gp.tdp_w
        self.power_level[:, IDLE] = gp.idle_w
        self.util_level = np.array([p.util_pct for p in table], dtype=np.float64)
        self.mem_level = np.array([p.mem_util_pct for p in table], dtype=np.float64)
        self.node_extra = np.array([p.node_extra_w for p in table], dtype=np.float64)
        # per-GPU signatures: which kinds checkpoint from one rank, and how a spinning rank looks
        self.rank0_writes = np.array([p.checkpoint_writers == "rank0" for p in table])
        self.spin_w = np.array([p.spin_power_frac * gp.tdp_w for p in table])
        self.spin_util = np.array([p.spin_util_pct for p in table])
        # start from an idle rack in equilibrium
        idle_dc = self.k.node_gpu_count * gp.idle_w + self.rp.node.base_w
        rack_w = float(idle_dc.sum()) / 0.9
        heat = rack_w + float(self.env.other_racks_w(np.array([scenario.start_ts]))[0])
        self.state = PhysicsState(
            gpu_heat_w=np.full(self.rp.gpus, gp.idle_w),
            fan_frac=np.full(self.rp.nodes, self.rp.node.fan_base_frac),
            cooling=cool.CoolingState(heat, np.full(int(self.rp.cooling.dead_s), heat)),
            gpu_energy_j=self.k.gpu_energy0_j.copy(),
            pdu_energy_kwh=self.k.pdu_energy0_kwh.copy(),
        )

    def _noise(self, s0: int, n: int, stream: int, *width: int) -> np.ndarray:
        """Normal draws for seconds [s0, s0 + n), drawn for the whole hour and sliced (any split: same)."""
        chunk, off = divmod(s0, CHUNK_S)
        rng = np.random.default_rng([self.scenario.seed, chunk + 1, stream])
        return rng.standard_normal((CHUNK_S, *width))[off : off + n]

    def step(self, s0: int, s1: int) -> dict[str, np.ndarray]:
        """Clean signals for seconds [s0, s1); s0 must continue the previous step."""
        if s0 != self.state.next_s:
            raise ValueError(f"physics chunks must be consecutive: expected {self.state.next_s}, got {s0}")
        if s0 // CHUNK_S != (s1 - 1) // CHUNK_S:
            raise ValueError("a physics step must stay within one hour-long chunk")
        t = np.arange(s0, s1, dtype=np.float64)
        ts = self.scenario.start_ts + t
        out: dict[str, np.ndarray] = {"ts": ts, "t_s": t}
        self._gpus(s0, s1, t, out)
        self._rack(s0, s1, t, ts, out)
        self.state.next_s = s1
        return out

    # --- GPUs -----------------------------------------------------------------------------------
    def _gpus(self, s0: int, s1: int, t: np.ndarray, out: dict[str, np.ndarray]) -> None:
        tl, gp, k = self.timeline, self.rp.gpu, self.k
        n, g = s1 - s0, self.rp.gpus
        nodes = self.workload.per_node(s0, s1)  # (n, nodes) per-node stage truth
        on_g = self.workload.powered(s0, s1)[:, k.node_of_gpu]
        stage_g = nodes["stage"][:, k.node_of_gpu].astype(np.intp)
        prof_g = nodes["profile"][:, k.node_of_gpu].astype(np.intp)
        rate_g = nodes["work_rate"][:, k.node_of_gpu]
        job_g = nodes["job"][:, k.node_of_gpu]
        stage = tl.stage[s0:s1].astype(np.intp)
        job = tl.job[s0:s1]
        rate_nom = tl.work_rate[s0:s1]
        gpu_noise = self._noise(s0, n, S_GPU, g)
        util_noise = self._noise(s0, n, S_UTIL, 2 * g)
        rate_noise = self._noise(s0, n, S_RATE)

        level = self.power_level[prof_g, stage_g]  # (n, G)
        training_g = (stage_g == FORWARD_BACKWARD) | (stage_g == GRAD_SYNC)
        nominal = self._job_nominal[job_g]
        ratio = np.where(training_g & (nominal > 0), rate_g / np.where(nominal > 0, nominal, 1.0), 1.0)
        ratio = np.nan_to_num(ratio, nan=1.0)
        level = gp.idle_w + (level - gp.idle_w) * ratio**gp.work_rate_exponent
        training = (stage == FORWARD_BACKWARD) | (stage == GRAD_SYNC)
        ageing = combined(self.scenario.faults, "gpu_ageing", t)[:, None] * k.ageing_weight[None, :]
        ageing = ageing + combined(self.scenario.faults, "gpu_driver", t)[:, None]
        level_g, util_g, mem_g = self._per_gpu(stage_g, prof_g, nodes["variant"][:, k.node_of_gpu], level)
        power = level_g * k.gpu_unit[None, :] * (1.0 + ageing)
        power = power * (1.0 + gp.noise_frac * gpu_noise)
        cap_noise = self._noise(s0, n, S_CAP, g)
        cap_w = gp.tdp_w * 1.02 * (1.0 + GPU_CAP_READING_NOISE_FRAC * np.clip(cap_noise, -3.0, 3.0))
        power = np.clip(np.minimum(power, cap_w), 0.85 * gp.idle_w, None)
        power = np.where(on_g, power, 0.0)  # a drained node is powered down
        out["gpu_power_w"] = power
        out["gpu_powered"] = on_g

        util = util_g + 0.5 * np.sqrt(util_g) * util_noise[:, :g]
        mem = mem_g + 0.4 * np.sqrt(mem_g) * util_noise[:, g:]
        out["gpu_util_pct"] = np.clip(np.round(util), 0, 100)
        out["gpu_mem_util_pct"] = np.clip(np.round(mem), 0, 100)
        over_knee_w = np.maximum(power - gp.clock_throttle_knee_w, 0)
        clock = gp.clock_max_mhz - gp.clock_throttle_mhz_per_w * over_knee_w
        clock = np.where(stage_g == IDLE, gp.clock_idle_mhz, np.round(clock / 15.0) * 15.0)
        out["gpu_sm_clock_mhz"] = clock
        heat = first_order_lag(power, gp.temp_tau_s, self.state.gpu_heat_w)
        self.state.gpu_heat_w = heat[-1].copy()
        out["gpu_heat_w"] = heat

        energy = self.state.gpu_energy_j + np.cumsum(power, axis=0)
        for reset_s in driver_resets_s(self.scenario.faults):  # the energy counter restarts from zero
            if s0 <= reset_s < s1:
                i = reset_s - s0
                energy[i:] = energy[i:] - energy[i] + power[i]
        self.state.gpu_energy_j = energy[-1].copy()
        out["gpu_energy_j"] = energy

        training_or_eval = training | (stage == EVAL)
        reported = np.where(training_or_eval, rate_nom * (1.0 + 0.01 * rate_noise), rate_nom)
        if self.workload.multi or self.workload.drains:  # a drained node's share of the throughput is gone
            live = self.workload.live_fraction(s0, s1)
            pick = self.workload.label_group[s0:s1] if self.workload.multi else np.zeros(n, np.intp)
            reported = reported * live[np.arange(n), pick]
        out["node_stage"] = nodes["stage"]
        out["node_job"] = nodes["job"]
        out["work_rate"] = np.where(job >= 0, reported, np.nan)
        out["stage"] = stage
        out["job"] = job
        out["labelled"] = tl.labelled[s0:s1]

    def _per_gpu(
        self, stage: np.ndarray, prof: np.ndarray, variant: np.ndarray, level: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per-GPU power level, utilisation and memory utilisation before noise (all rows × GPUs).

        Every GPU shows its node's stage level, except a rank-0 checkpoint (the other ranks spin in a
        collective) and a collective stall (``V_SPIN``: every rank spins).
        """
        level_g = level.copy()
        util_g = self.util_level[prof, stage]
        mem_g = self.mem_level[prof, stage]
        peers = (stage == CHECKPOINT) & self.rank0_writes[prof] & ~self.rank0_gpu[None, :]
        spin = peers | (variant == V_SPIN)
        if spin.any():
            level_g[spin] = self.spin_w[prof[spin]]
            util_g[spin] = self.spin_util[prof[spin]]
            mem_g[spin] = 1.0  # a polling kernel barely touches memory
        return level_g, util_g, mem_g

    # --- nodes, PDU feeds, inlets, cooling ----------------------------------------------------
    def _rack(self, s0: int, s1: int, t: np.ndarray, ts: np.ndarray, out: dict[str, np.ndarray]) -> None:
        rp, k, c, node_p = self.rp, self.k, self.rp.cooling, self.rp.node
        n = s1 - s0
        faults = self.scenario.faults
        nodes = self.workload.per_node(s0, s1)
        on = self.workload.powered(s0, s1)
        stage, prof = nodes["stage"].astype(np.intp), nodes["profile"].astype(np.intp)
        node_gpu_w = np.zeros((n, rp.nodes))
        np.add.at(node_gpu_w.T, k.node_of_gpu, out["gpu_power_w"].T)
        node_frac = k.node_gpu_count / node_p.gpus_per_node
        # Powered down: the BMC's standby draw (tens of W) is below PDU noise and left out.
        node_fixed = np.where(on, (node_p.base_w + self.node_extra[prof, stage]) * node_frac[None, :], 0.0)
        dc_no_fan = node_gpu_w + node_fixed

        # Pass 1: supply air from an estimate of the heat load without server fans.
        other = self.env.other_racks_w(ts)
        fan_guess = (node_p.fan_max_w * self.state.fan_frac**3 * node_frac).sum()
        heat_guess = dc_no_fan.sum(axis=1) / TYPICAL_PSU_EFFICIENCY + fan_guess + other
        removed_guess, _ = cool.removal(c, heat_guess, self.state.cooling)
        setpoint = c.setpoint_c * (1.0 - combined(faults, "setpoint", t))
        crac_noise = self._noise(s0, n, S_CRAC, 3)
        supply = setpoint + c.supply_gain_k * (heat_guess - removed_guess) / c.capacity_w
        supply = supply + 0.05 * crac_noise[:, 0]

        # Inlet sensors: supply + recirculation by height + the rack's own exhaust + hot spot.
        ip = rp.inlet
        rack_kw_guess = dc_no_fan.sum(axis=1) / 1000.0
        node_airflow = rp.nodes * NODE_AIRFLOW_KG_S * TYPICAL_FAN_FRAC
        exhaust_rise = 1000.0 * rack_kw_guess / (node_airflow * cool.AIR_CP_J_PER_KG_K)
        offsets = dict(ip.offsets_k)
        out["inlet_c"] = np.stack([
            supply + offsets.get(pos, 1.0) + ip.rack_heat_gain_k_per_kw * rack_kw_guess
            + combined(faults, "hotspot", t, target=pos) * exhaust_rise
            for pos in INLET_POSITIONS
        ], axis=1)
        heights = np.array([INLET_HEIGHTS[p] for p in INLET_POSITIONS])
        order = np.argsort(heights)
        node_inlet = np.empty((n, rp.nodes))
        sensor = out["inlet_c"][:, order]
        for j, h in enumerate(k.node_height):
            node_inlet[:, j] = _interp_rows(h, heights[order], sensor)

        # Server fans: speed from GPU heat and inlet temperature; power ∝ speed³.
        gpu_frac = node_gpu_w / (np.maximum(k.node_gpu_count, 1) * rp.gpu.tdp_w)
        target = node_p.fan_base_frac + node_p.fan_load_gain * gpu_frac
        target = target + node_p.fan_inlet_gain_per_k * np.maximum(node_inlet - node_p.fan_inlet_ref_c, 0.0)
        target = np.where(on, np.clip(target, node_p.fan_min_frac, 1.0), 0.0)
        fan = first_order_lag(target, node_p.fan_tau_s, self.state.fan_frac)
        self.state.fan_frac = fan[-1].copy()
        fan_w = node_p.fan_max_w * fan**3 * node_frac[None, :]
        node_dc = dc_no_fan + fan_w
        out["fan_frac"] = fan
        out["node_dc_w"] = node_dc

        # GPU die temperature follows the lagged board power over the node's inlet.
        gpu_inlet = node_inlet[:, k.node_of_gpu]
        out["gpu_temp_c"] = gpu_inlet + rp.gpu.r_th_k_per_w * k.gpu_r_th[None, :] * out["gpu_heat_w"]

        # PSUs and feeds.
        node_ac = node_dc / psu_efficiency(node_dc / (node_p.psu_count * node_p.psu_rating_w), self.psu)
        feeds = self._feeds(node_ac, t)
        out["node_ac_w"] = node_ac
        out["pdu_power_w"] = feeds
        self._pdu_electrical(feeds, self._noise(s0, n, S_PDU, 2), out)

        # Cooling unit: heat = all of this rack's electrical power + the other racks.
        heat = feeds.sum(axis=1) + other
        removed, self.state.cooling = cool.removal(c, heat, self.state.cooling)
        outdoor = self.env.outdoor_c(ts)
        unit = cool.unit_signals(c, removed, supply, setpoint, outdoor, combined(faults, "cooling", t))
        unit["power_w"] = unit["power_w"] + c.noise_w * crac_noise[:, 1]
        unit["cooling_w"] = unit["cooling_w"] * (1.0 + 0.01 * crac_noise[:, 2])
        out.update({f"crac_{name}": values for name, values in unit.items()})
        out["crac_outdoor_temp_c"] = outdoor + c.outdoor_probe_offset_k  # the unit's outdoor probe
        out["heat_load_w"] = heat
        out["other_racks_w"] = other
        inlet_noise = self._noise(s0, n, S_INLET, 3)
        out["inlet_c"] = out["inlet_c"] + ip.noise_k * inlet_noise

    def _feeds(self, node_ac: np.ndarray, t: np.ndarray) -> np.ndarray:
        share_a = self.k.feed_a_share[None, :]
        feed_a = (node_ac * share_a).sum(axis=1)
        feed_b = (node_ac * (1.0 - share_a)).sum(axis=1)
        feeds = np.stack([feed_a, feed_b], axis=1)
        total = node_ac.sum(axis=1)
        for fault in self.scenario.faults:
            if fault.kind == "power_chain":
                target = fault.resolved_target
                idx = self.rp.pdu_ids.index(target) if target in self.rp.pdu_ids else 1
                feeds[:, idx] += fault.magnitude * fault.envelope(t) * total
        return feeds

    def _pdu_electrical(self, feeds: np.ndarray, noise: np.ndarray, out: dict[str, np.ndarray]) -> None:
        pp = self.rp.pdu
        slow = pp.voltage_swing_v * np.sin(2 * math.pi * out["ts"] / 5400.0 + self.k.phases[0])
        volts = pp.voltage_v + slow[:, None] + pp.voltage_noise_v * noise
        capacity_w = self.rp.nodes * self.rp.node.psu_rating_w  # two PSUs per node per feed
        load = np.clip(feeds / capacity_w, 0.0, 1.0)
        pf = pp.pf_low + (pp.pf_high - pp.pf_low) * np.clip(load / 0.5, 0.0, 1.0)
        out["pdu_voltage_v"] = volts
        out["pdu_pf"] = pf
        out["pdu_current_a"] = feeds / (volts * pf)
        energy = self.state.pdu_energy_kwh + np.cumsum(feeds, axis=0) / J_PER_KWH
        self.state.pdu_energy_kwh = energy[-1].copy()
        out["pdu_energy_kwh"] = np.mod(energy, pp.energy_wrap_kwh) if pp.energy_wrap_kwh > 0 else energy


def _interp_rows(x: float, xp: np.ndarray, fp: np.ndarray) -> np.ndarray:
    """np.interp at one point ``x`` for every row of ``fp`` (rows × len(xp))."""
    j = int(np.clip(np.searchsorted(xp, x) - 1, 0, len(xp) - 2))
    w = (x - xp[j]) / (xp[j + 1] - xp[j])
    w = float(np.clip(w, 0.0, 1.0))
    return fp[:, j] * (1.0 - w) + fp[:, j + 1] * w
