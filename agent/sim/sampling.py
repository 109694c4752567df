"""Turn the twin's clean signals into what the devices report: rates, misses, glitches, resolution.

Each device is read at its own interval and phase (``SamplingParams``); a cell between samples,
in a missed poll or in an outage is NaN ("not sampled"); rarely a cell carries a glitch: a
sentinel (-1, 0xFFFF = 65535) or a spike (3–10×). Values are rounded to each device's resolution
so a written and re-read trace equals the chunk.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from agent.sim.faults import driver_resets_s
from agent.sim.params import INLET_POSITIONS, STAGES, RackParams
from agent.sim.physics import CHUNK_S, S_OUTAGE, S_SAMPLING
from agent.sim.scenarios import Scenario
from agent.trace.model import TraceChunk

GPU_FIELDS = ("power_w", "energy_j", "util_pct", "mem_util_pct", "temp_c", "sm_clock_mhz")
PDU_FIELDS = ("power_w", "energy_kwh", "voltage_v", "current_a", "pf")
CRAC_FIELDS = ("power_w", "supply_temp_c", "return_temp_c", "setpoint_c", "fan_pct", "cooling_w")
GLITCH_FIELDS = {"power_w", "temp_c", "supply_temp_c", "return_temp_c", "fan_pct", "current_a", "voltage_v"}
DRIVER_GAP_S = 30  # NVML unavailable while the driver reloads

# Device resolution (decimal places; negative = tens, hundreds) by device kind and field.
RESOLUTION: dict[str, dict[str, int]] = {
    "gpu": {"power_w": 1, "energy_j": 0, "util_pct": 0, "mem_util_pct": 0, "temp_c": 0, "sm_clock_mhz": 0},
    "pdu": {"power_w": 0, "energy_kwh": 3, "voltage_v": 1, "current_a": 2, "pf": 2},
    "crac": {"power_w": -1, "supply_temp_c": 1, "return_temp_c": 1, "setpoint_c": 1, "fan_pct": 1,
             "cooling_w": -2, "outdoor_temp_c": 1},
    "inlet": {"temp_c": 1},
}


def omitted(name: str, omit: tuple[str, ...]) -> bool:
    """Whether column ``name`` is one the rack lacks: ``omit`` holds device kinds ("inlet"),
    ``kind.field`` pairs ("crac.cooling_w", "pdu.energy_kwh") or plain columns ("work_rate")."""
    parts = name.split(".")
    return name in omit or parts[0] in omit or f"{parts[0]}.{parts[-1]}" in omit


def device_columns(rack: RackParams) -> Iterator[tuple[str, str, int | None]]:
    """(column, key of the clean values, index on its device axis or None) in header order."""
    for i in range(rack.gpus):
        yield from ((f"gpu.{i}.{f}", f"gpu_{f}", i) for f in GPU_FIELDS)
    for j, p in enumerate(rack.pdu_ids):
        yield from ((f"pdu.{p}.{f}", f"pdu_{f}", j) for f in PDU_FIELDS)
    crac = (*CRAC_FIELDS, "outdoor_temp_c") if rack.cooling.outdoor_sensor else CRAC_FIELDS  # a probe?
    yield from ((f"crac.{rack.cooling.crac_id}.{f}", f"crac_{f}", None) for f in crac)
    for j, pos in enumerate(INLET_POSITIONS):
        yield f"inlet.{pos}.temp_c", "inlet_c", j


def places_of(name: str, overrides: tuple[tuple[str, int], ...] = ()) -> int:
    """Decimal places a device reports column ``name`` with (``kind.field`` overrides first)."""
    parts = name.split(".")
    key = f"{parts[0]}.{parts[-1]}"
    for k, v in overrides:
        if k == key:
            return v
    return RESOLUTION[parts[0]][parts[-1]]


def device_clean_values(clean: dict[str, np.ndarray], rack: RackParams) -> dict[str, np.ndarray]:
    """Canonical column name → clean per-second values (no sampling, no rounding)."""
    cols: dict[str, np.ndarray] = {"work_rate": clean["work_rate"]}
    for name, key, index in device_columns(rack):
        cols[name] = clean[key] if index is None else clean[key][:, index]
    return cols


class Sampler:
    """Applies device sampling to clean chunks; deterministic per (seed, chunk)."""

    def __init__(self, scenario: Scenario, job_ids: list[str]) -> None:
        self.rack = scenario.rack
        self.seed = scenario.seed
        self.driver_reset_s = driver_resets_s(scenario.faults)
        self._stage_labels = np.array(STAGES, dtype=object)
        self._job_labels = np.array([*job_ids, ""], dtype=object)  # index -1 → ""

    def to_chunk(self, clean: dict[str, np.ndarray], hints: bool) -> TraceChunk:
        rack, sp = self.rack, self.rack.sampling
        t = clean["t_s"].astype(np.int64)
        n = len(t)
        chunk, off = divmod(int(t[0]), CHUNK_S)
        rng = np.random.default_rng([self.seed, chunk + 1, S_SAMPLING])
        # Fixed-size draws per chunk, sliced, so results do not depend on how the chunk is split.
        miss_u = rng.random((CHUNK_S, 4 + rack.gpus))[off : off + n]
        glitch_u = rng.random((CHUNK_S, 8))[off : off + n]
        glitch_kind = rng.integers(0, 3, (CHUNK_S, 8))[off : off + n]
        glitch_col = rng.integers(0, 1 << 30, (CHUNK_S, 8))[off : off + n]
        spike = rng.uniform(3.0, 10.0, (CHUNK_S, 8))[off : off + n]

        values = device_clean_values(clean, rack)
        numeric: dict[str, np.ndarray] = {}
        nvml_ok = (t % sp.nvml_interval_s == 0) & (miss_u[:, 0] >= sp.miss_prob)
        for reset in self.driver_reset_s:
            nvml_ok &= ~((t >= reset) & (t < reset + DRIVER_GAP_S))
        pdu_phase = {p: (sp.pdu_b_offset_s if j else 0) for j, p in enumerate(rack.pdu_ids)}
        down = self._outage_masks(t)
        powered = clean.get("gpu_powered")  # (rows × GPUs); a drained node's GPUs are not read
        for name, col in values.items():
            if omitted(name, sp.omit):
                continue
            parts = name.split(".")
            kind = parts[0]
            if kind == "gpu":
                gpu = int(parts[1])
                ok = nvml_ok & (miss_u[:, 4 + gpu] >= sp.miss_prob / 4)
                if powered is not None:
                    ok = ok & powered[:, gpu]
            elif kind == "pdu":
                ok = (t % sp.pdu_interval_s == pdu_phase[parts[1]]) & (miss_u[:, 1] >= sp.miss_prob)
            elif kind == "crac":
                ok = (t % sp.crac_interval_s == sp.crac_offset_s) & (miss_u[:, 2] >= sp.miss_prob)
            elif kind == "inlet":
                ok = (t % sp.inlet_interval_s == sp.inlet_offset_s) & (miss_u[:, 3] >= sp.miss_prob)
            else:
                continue
            device = f"pdu.{parts[1]}" if kind == "pdu" else kind
            if device in down:
                ok = ok & ~down[device]
            numeric[name] = np.where(ok, np.round(col, places_of(name, sp.resolution)), np.nan)
        self._glitch(numeric, glitch_u, glitch_kind, glitch_col, spike)

        job = clean["job"]
        if hints:
            labelled = clean["labelled"]
            numeric["work_rate"] = np.round(values["work_rate"], 1)
            stage = self._stage_labels[clean["stage"]]
            job_labels = self._job_labels[job]
            if not labelled.all():  # jobs that report nothing
                numeric["work_rate"] = np.where(labelled, numeric["work_rate"], np.nan)
                stage = np.where(labelled, stage, "").astype(object)
                job_labels = np.where(labelled, job_labels, "").astype(object)
            if omitted("work_rate", sp.omit):
                del numeric["work_rate"]
        else:
            numeric["work_rate"] = np.full(n, np.nan)
            stage = np.full(n, "", dtype=object)
            job_labels = np.full(n, "", dtype=object)
        return TraceChunk(ts=clean["ts"].copy(), numeric=numeric, stage=stage, job=job_labels)

    def outages(self, chunk: int) -> list[tuple[str, int, int]]:
        """(device, start_s, end_s) outages that begin in hour-long ``chunk`` (seconds from the start)."""
        sp = self.rack.sampling
        rng = np.random.default_rng([self.seed, chunk + 1, S_OUTAGE])
        devices = [*(f"pdu.{p}" for p in self.rack.pdu_ids), "crac", "inlet"]
        draws = rng.random((len(devices), 3))
        found = []
        for device, (u, where, length) in zip(devices, draws.tolist(), strict=True):
            if u < sp.outage_per_h:
                start = chunk * CHUNK_S + int(where * CHUNK_S)
                lasts_s = round(sp.outage_s[0] + length * (sp.outage_s[1] - sp.outage_s[0]))
                found.append((device, start, start + lasts_s))
        return found

    def _outage_masks(self, t: np.ndarray) -> dict[str, np.ndarray]:
        chunk = int(t[0]) // CHUNK_S
        masks: dict[str, np.ndarray] = {}
        for c in (chunk - 1, chunk):  # an outage may spill over from the previous hour
            if c < 0:
                continue
            for device, start, end in self.outages(c):
                hit = (t >= start) & (t < end)
                masks[device] = masks.get(device, np.zeros(len(t), dtype=bool)) | hit
        return masks

    def _glitch(
        self, numeric: dict[str, np.ndarray], u: np.ndarray, kind: np.ndarray, col: np.ndarray,
        spike: np.ndarray,
    ) -> None:
        """Rarely replace one sampled cell by a sentinel or a spike (up to 8 candidates per row)."""
        names = [c for c in numeric if c.split(".")[-1] in GLITCH_FIELDS]
        if not names:
            return
        rows, slots = np.nonzero(u < self.rack.sampling.glitch_prob * len(names) / 8.0)
        for r, s in zip(rows.tolist(), slots.tolist(), strict=True):
            name = names[int(col[r, s]) % len(names)]
            arr = numeric[name]
            if np.isnan(arr[r]):
                continue
            places = places_of(name, self.rack.sampling.resolution)
            spiked = round(float(arr[r]) * float(spike[r, s]), places)
            arr[r] = (-1.0, 65535.0, spiked)[int(kind[r, s])]
