"""Running a scenario: the whole trace as chunks, the ground truth, and a stepping twin for live demos."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from agent.sim.params import STAGES
from agent.sim.physics import CHUNK_S, RackPhysics
from agent.sim.sampling import DRIVER_GAP_S, Sampler, device_clean_values, device_columns, omitted, places_of
from agent.sim.scenarios import Scenario
from agent.sim.stages import stage_runs
from agent.trace.model import TraceChunk, TraceMeta


def trace_meta(scenario: Scenario) -> TraceMeta:
    """Metadata lines of the scenario's trace (rack, site, crac share, 1-s tick)."""
    return scenario.meta


def columns(scenario: Scenario) -> list[str]:
    """The trace header, in order."""
    cols = ["ts", "stage", "job", "work_rate", *(name for name, _, _ in device_columns(scenario.rack))]
    return [c for c in cols if not omitted(c, scenario.rack.sampling.omit)]


def decimals(scenario: Scenario) -> dict[str, int]:
    """Per-column resolution to hand to ``TraceWriter``: what the sampler rounds each device column to."""
    overrides = scenario.rack.sampling.resolution
    return {"work_rate": 1} | {name: places_of(name, overrides) for name in columns(scenario) if "." in name}


def simulate(scenario: Scenario, chunk_s: int = CHUNK_S) -> Iterator[TraceChunk]:
    """Yield the scenario's trace as consecutive chunks (1-s rows, ``chunk_s`` rows each at most)."""
    if chunk_s < 1:
        raise ValueError(f"chunk_s must be ≥ 1, got {chunk_s}")
    for hour, _clean in simulate_hours(scenario):
        for i in range(0, len(hour), chunk_s):
            yield hour if chunk_s >= len(hour) else hour.take(slice(i, i + chunk_s))


def simulate_hours(scenario: Scenario) -> Iterator[tuple[TraceChunk, dict[str, np.ndarray]]]:
    """Yield (trace chunk, clean physics values) hour by hour: benches that score per-node or
    per-job energy need the true node power (``node_ac_w``, ``node_stage``, ``node_job``)."""
    physics = RackPhysics(scenario)
    sampler = Sampler(scenario, physics.workload.job_ids())
    total = scenario.total_s
    for hour_start in range(0, total, CHUNK_S):  # physics always steps whole hours: same numbers
        clean = physics.step(hour_start, min(total, hour_start + CHUNK_S))
        yield sampler.to_chunk(clean, scenario.hints), clean


def scenario_truth(scenario: Scenario) -> dict[str, Any]:
    """JSON-able ground truth: faults, workload changes, jobs and the true stage timeline."""
    physics = RackPhysics(scenario)
    t0 = scenario.start_ts
    tl = physics.timeline
    jobs = [
        {"id": j["id"], "profile": j["profile"], "start_ts": t0 + j["start_s"], "end_ts": t0 + j["end_s"],
         "work_rate_nominal": j["work_rate_nominal"], "preempted": j["preempted"]}
        | ({"nodes": j["nodes"]} if "nodes" in j else {})
        for j in physics.workload.jobs
    ]
    changes: list[dict[str, Any]] = []
    plan = scenario.plan
    workload = {"cause": "workload", "component": "gpu", "is_fault": False}  # a change, not a fault
    if plan.workload_change_h is not None and plan.workload_change_h * 3600 < scenario.total_s:
        ts = t0 + plan.workload_change_h * 3600.0
        before = sorted({j["profile"] for j in jobs if j["start_ts"] < ts})
        changes.append({"ts": ts, "kind": "job_profile", **workload, "from": before, "to": plan.change_to})
    for start, end in tl.plateau_ranges:
        changes.append({"ts": t0 + start, "end_ts": t0 + end, **workload, "kind": "plateau",
                        "work_rate_factor": plan.plateau_rate_factor})
    c = scenario.rack.cooling
    sampler = Sampler(scenario, physics.workload.job_ids())
    outages = [
        {"device": device, "start_ts": t0 + start, "end_ts": t0 + min(end, scenario.total_s)}
        for chunk in range(-(-scenario.total_s // CHUNK_S))
        for device, start, end in sampler.outages(chunk)
        if start < scenario.total_s
    ]
    outages += [
        {"device": "nvml", "start_ts": t0 + s, "end_ts": t0 + min(s + DRIVER_GAP_S, scenario.total_s)}
        for s in sampler.driver_reset_s
    ]
    per_node: dict[str, Any] = {}
    if scenario.groups or scenario.drains:  # the trace has no per-node stage column: truth only
        node_gpus = [np.flatnonzero(physics.k.node_of_gpu == n).tolist() for n in range(scenario.rack.nodes)]
        per_node = {"node_gpus": node_gpus, "node_stage_segments": physics.workload.node_segments(t0)}
    return per_node | {
        "scenario": scenario.describe(),
        "meta": {"rack": scenario.rack_name, "site": scenario.site, f"crac.{c.crac_id}.share": c.share,
                 "interval_s": 1},
        "model": {"cooling_tau_s": c.tau_s, "cooling_dead_s": c.dead_s, "setpoint_c": c.setpoint_c,
                  "gpu_tdp_w": scenario.rack.gpu.tdp_w, "gpu_idle_w": scenario.rack.gpu.idle_w,
                  "psu_curve": [list(p) for p in scenario.rack.node.psu_curve]},
        "faults": [f.truth(t0) for f in scenario.faults],
        "workload_changes": changes,
        "jobs": jobs,
        "device_outages": outages,
        "stage_segments_columns": ["start_ts", "end_ts", "stage", "job"],
        "stage_segments": stage_runs(tl.stage, tl.job, physics.workload.job_ids(), t0),
    }


class RackTwin:
    """The twin stepped forward in time (``advance_to``, Unix seconds) for fake devices serving clean
    instantaneous values (live demo); same physics and random streams as ``simulate``."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self._physics = RackPhysics(scenario)
        self._hour: dict[str, np.ndarray] | None = None
        self._hour_start = -1
        self._s = 0

    @property
    def ts(self) -> float:
        return self.scenario.start_ts + self._s

    def advance_to(self, ts: float) -> None:
        s = math.floor(ts - self.scenario.start_ts)
        if s < self._s:
            raise ValueError(f"the twin cannot go back in time (at {self.ts}, asked for {ts})")
        if s >= self.scenario.total_s:
            end = self.scenario.start_ts + self.scenario.total_s
            raise ValueError(f"{ts} is past the end of the scenario ({end})")
        self._s = s

    def _values_now(self) -> dict[str, float]:
        hour_start = (self._s // CHUNK_S) * CHUNK_S
        if self._hour is None or hour_start != self._hour_start:
            if self._physics.state.next_s > hour_start:  # cannot happen: time only moves forward
                raise RuntimeError("twin physics out of step")
            while self._physics.state.next_s < hour_start:  # skip whole hours we jumped over
                s0 = self._physics.state.next_s
                self._physics.step(s0, s0 + CHUNK_S)
            end = min(self.scenario.total_s, hour_start + CHUNK_S)
            clean = self._physics.step(hour_start, end)
            self._hour = device_clean_values(clean, self.scenario.rack) | {
                "stage": clean["stage"].astype(np.float64), "job": clean["job"].astype(np.float64)}
            self._hour_start = hour_start
        i = self._s - self._hour_start
        return {name: float(col[i]) for name, col in self._hour.items()}

    def device_values(self) -> dict[str, dict[str, float]]:
        """Device (``gpu.<i>``, ``pdu.<id>``, ``crac.<id>``, ``inlet``: ``<pos>.temp_c``, ``job``: work_rate,
        stage_code, job_index; NaN work_rate = no job) → {field: value} at the current second."""
        flat = self._values_now()
        out: dict[str, dict[str, float]] = {}
        for name, value in flat.items():
            if name.startswith(("gpu.", "pdu.", "crac.")):
                kind, dev, fld = name.split(".", 2)
                out.setdefault(f"{kind}.{dev}", {})[fld] = value
            elif name.startswith("inlet."):
                out.setdefault("inlet", {})[name.removeprefix("inlet.")] = value
        out["job"] = {"work_rate": flat["work_rate"], "stage_code": flat["stage"], "job_index": flat["job"]}
        return out

    def gpu_values(self) -> dict[int, dict[str, float]]:
        """GPU index → NVML-style values (what ``agent.sim.devices.fake_nvml.FakeNvml`` serves)."""
        limit = self.scenario.rack.gpu.tdp_w
        return {
            int(device.split(".")[1]): values | {"power_limit_w": limit}
            for device, values in self.device_values().items()
            if device.startswith("gpu.")
        }

    def pdu_values(self, pdu_id: str) -> dict[str, float]:
        """One PDU feed's values (power_w, energy_kwh, voltage_v, current_a, pf) plus the inlet probes."""
        values = self.device_values()
        if f"pdu.{pdu_id}" not in values:
            raise KeyError(f"no PDU feed {pdu_id!r}; the twin has {', '.join(self.scenario.rack.pdu_ids)}")
        return values[f"pdu.{pdu_id}"] | {f"inlet.{k}": v for k, v in values["inlet"].items()}

    def crac_values(self) -> dict[str, float]:
        """The cooling unit's values (power_w, supply/return/setpoint temps, fan_pct, cooling_w)."""
        return self.device_values()[f"crac.{self.scenario.rack.cooling.crac_id}"]

    def stage(self) -> tuple[str, str]:
        """(stage label, job id) at the current second — what a training job would hint."""
        flat = self._values_now()
        j = int(flat["job"])
        ids = self._physics.workload.job_ids()
        return STAGES[int(flat["stage"])], (ids[j] if j >= 0 else "")
