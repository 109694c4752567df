"""Engine parts ↔ state arrays. Every piece of learned state is a fixed-shape array named by the
part that owns it (``state_arrays``/``load_arrays``); the structured parts of other modules (stage
inferrer, drift monitor) are JSON padded to a fixed size. A version-2 layout is upgraded, so an
upgrade keeps what was learned. A restored engine continues where the saved one stopped, except
for rows still in the look-ahead buffer (``finish()`` flushes them before a save in replay).

Every value is checked before a part uses it: the checksum proves the bytes are the ones written,
not that they are sensible, and an index outside its table or a count of 1e18 would crash the
first tick after a restore (or ask numpy for exabytes). A check raises ``StateError`` naming the
value, so the caller starts fresh with one clear message.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agent.engine.baselines import BaselineLibrary
from agent.engine.drift import DriftMonitor
from agent.engine.job_energy import JobEnergy
from agent.engine.model import ResponseModel
from agent.engine.response import IT_SEEN_COLUMNS, N_IT_BASE
from agent.engine.row_times import TS_FLOOR_S
from agent.engine.rows import RowBinner
from agent.engine.signals import FIELDS
from agent.engine.stage_slots import N_SLOTS, Segments, StageSlots, StageSource
from agent.engine.state import StateError, pack, unpack
from agent.engine.window_buffer import WindowBuffer

ENGINE_STATE_VERSION = 3  # 3: arrays named by their owner; the unused GPU-temperature terms gone
# v2's IT regression: [1, g, g², g³, gl, gl², gl³, t, t², t³, f…]; v3 before the feeds' view
# (response.IT_SEEN_COLUMNS): [1, g, g², g³, gl, gl², gl³, f…]
V2_IT_COLUMNS = 10 + N_SLOTS
UNSEEN_IT_COLUMNS = N_IT_BASE - len(IT_SEEN_COLUMNS) + N_SLOTS
BLOB_MIN_BYTES = 32768
BIG = 2**53  # floats count integers exactly up to here
# Largest magnitude a float in a state may hold. The largest accumulator the engine writes is a
# bin's GPU cube sum: (16 GPUs × 1500 W)^3 × a 900 s bin ≈ 1.2e16; 1e18 leaves room and still
# keeps every square and cube the engine takes of it finite.
MAX_MAGNITUDE = 1e18
MAX_TS_S = 1e11  # year 5138: beyond any wall clock (the live bound is checked when rows arrive)
# arrays where -inf means "never" (a signal not sampled yet); in a mixed array such as model_scalars
# "never" is NaN (unknown), so its other values keep the range check
NEVER_MARKED = frozenset({"last_ts"})


@dataclass
class EngineParts:
    """The engine's stateful parts (filled in place by ``load_engine``)."""

    rows: RowBinner
    model: ResponseModel
    slots: StageSlots
    segments: Segments
    baselines: BaselineLibrary
    buf: WindowBuffer
    stage_source: StageSource
    drift: DriftMonitor
    job_energy: JobEnergy


@dataclass
class EngineOwn:
    """The engine's own values: window grid, ``seq``, energy totals, the last window line."""

    window_s: float
    bin_s: float
    window_idx: int = -1
    window_warm: bool = False
    seq: int = 0
    last_ts: float = math.nan
    energy_kwh: np.ndarray = field(default_factory=lambda: np.zeros((N_SLOTS, 3)))
    last_window: dict[str, Any] = field(default_factory=dict)
    rewarms: int = 0


def _blob(obj: Any) -> np.ndarray:
    raw = json.dumps(obj, separators=(",", ":"), allow_nan=True).encode()
    size = BLOB_MIN_BYTES
    while size < len(raw):
        size *= 2
    return np.frombuffer(raw.ljust(size, b" "), dtype=np.uint8).copy()


def _unblob(arr: np.ndarray) -> Any:
    return json.loads(arr.tobytes().decode().strip() or "null")


def save_engine(p: EngineParts, own: EngineOwn) -> bytes:
    arrays: dict[str, np.ndarray] = {
        "engine_version": np.array([ENGINE_STATE_VERSION], dtype=np.int64),
        "engine_scalars": np.array([own.window_s, own.bin_s, float(own.window_idx), float(own.window_warm),
                                    float(own.seq), own.last_ts]),
        "energy_kwh": own.energy_kwh,
        "bin_fields": np.array(FIELDS),  # bin sums are read back by field name (``signals.remap_fields``)
    }
    for part in (p.rows, p.model, p.slots, p.segments, p.baselines, p.buf):
        arrays.update(part.state_arrays())
    misc = {"last_window": own.last_window, "jobs": p.buf.jobs[: p.buf.n], "rows": p.rows.state(),
            "rewarms": own.rewarms, "job_rates": p.model.job_rates.state(),
            "job_energy": p.job_energy.state()}
    arrays.update(misc=_blob(misc), stages=_blob(p.stage_source.state()), drift=_blob(p.drift.save_state()))
    return pack(arrays)


def load_engine(parts: EngineParts, blob: bytes, own: EngineOwn) -> EngineOwn:
    """Fill freshly built ``parts`` from ``blob``; returns the engine's own values (``own`` gives the
    window the caller runs with). Raises StateError when the state does not fit."""
    a = unpack(blob)
    try:
        version = int(a["engine_version"][0])
        if version == 2:
            a = _upgrade_v2(a)
        elif version != ENGINE_STATE_VERSION:
            raise StateError(f"engine state version {version}, this build reads {ENGINE_STATE_VERSION}")
        return _load(parts, _with_feed_view(a), own)
    except (KeyError, IndexError, ValueError, TypeError, AttributeError, ArithmeticError) as exc:
        if isinstance(exc, StateError):
            raise
        raise StateError(f"engine state does not fit this build ({exc})") from exc


def _load(p: EngineParts, a: dict[str, np.ndarray], own: EngineOwn) -> EngineOwn:
    e = a["engine_scalars"]
    if not math.isclose(e[0], own.window_s) or not math.isclose(e[1], own.bin_s):
        raise StateError(f"state was learned with window {e[0]:g} s; this run uses {own.window_s:g} s")
    raw_names = np.asarray(a["signal_names"])
    # signal names are ASCII ([a-z0-9_.]); a damaged blob can hold code points Python cannot
    # even represent, which crash str operations instead of failing a comparison
    if raw_names.dtype.kind != "U" or (raw_names.view(np.uint32) >= 128).any():
        raise StateError("state signal names are not ASCII (damaged state)")
    check_magnitudes(a)
    m, r = a["model_scalars"], a["rows_scalars"]
    scale(m[0], "GPU power scale")
    scale(m[1], "work-rate scale")
    index(m[3], 0, p.model.lag.K, "selected lag candidate")
    timestamp(r[0], "first row time")
    timestamp(r[1], "pending row time")
    index(r[2], 0, N_SLOTS, "pending stage slot")
    index(r[4], -1, BIG, "open bin")
    index(a["wb_n"][0], 0, p.buf.n_bins + 1, "bins in the open window")
    timestamp(a["seg"][0], "segment start")
    index(a["seg"][1], -1, 2 * N_SLOTS, "segment stage key")
    misc = _unblob(a["misc"]) or {}
    p.rows.load([str(n) for n in raw_names if str(n)], a, misc.get("rows") or {})
    p.model.load_arrays(a)
    p.model.job_rates.load(misc.get("job_rates") or {})
    for part in (p.slots, p.segments, p.baselines, p.buf):
        part.load_arrays(a)
    jobs = list(misc.get("jobs") or [])
    p.buf.jobs[: len(jobs)] = jobs
    p.stage_source.load(_unblob(a["stages"]) or {})
    if misc.get("job_energy"):  # states before per-job energy have none: it starts at zero
        p.job_energy.load(misc["job_energy"])
    drift = _unblob(a["drift"])
    if drift is not None:
        p.drift.load_state(drift)
    energy = np.zeros_like(own.energy_kwh)
    energy[...] = a["energy_kwh"]
    window_idx, seq = index(e[2], -1, BIG, "window index"), index(e[4], 0, BIG, "seq")
    last_ts = timestamp(e[5], "last sample time")
    return EngineOwn(own.window_s, own.bin_s, window_idx, bool(e[3]), seq, last_ts, energy,
                     misc.get("last_window") or {}, int(misc.get("rewarms", 0)))


def _with_feed_view(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A state saved before the IT regression read the PDU feeds' view (feed_load.py): its two
    coefficients start at 0, which is that state's own model (the feeds seeing the bins' means)."""
    if a["it_theta"].shape[-1] != UNSEEN_IT_COLUMNS:
        return a
    out = dict(a)
    at = [IT_SEEN_COLUMNS[0]] * len(IT_SEEN_COLUMNS)
    for prefix in ("it", "shadow_it0"):
        if f"{prefix}_theta" not in a:
            continue
        out[f"{prefix}_theta"] = np.insert(a[f"{prefix}_theta"], at, 0.0, axis=-1)
        out[f"{prefix}_r"] = np.insert(a[f"{prefix}_r"], at, 0.0, axis=-1)
        out[f"{prefix}_R"] = np.insert(np.insert(a[f"{prefix}_R"], at, 0.0, axis=-1), at, 0.0, axis=-2)
    return out


def _upgrade_v2(a: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A version-2 state in version-3 names: one ``scalars`` array split by owner, the IT model's
    three always-zero GPU-temperature terms dropped (they never held information: the regressor
    was off), bins laid out by ``signals.LEGACY_FIELDS`` (their field names were not saved)."""
    s = a["scalars"]
    out = dict(a)
    gpu_seen = float(out.pop("gpu_seen_ts", np.array([math.nan]))[0])
    gpu_seen = gpu_seen if math.isfinite(gpu_seen) else math.nan  # v2 saved "never" as -inf
    bias_it, fan_lag = float(a["bias_it"][0]), float(a["fan_lag"][0])
    out["model_scalars"] = np.array([s[2], s[3], s[5], s[8], s[9], s[16], s[17], gpu_seen, bias_it, fan_lag])
    out["rows_scalars"] = np.array(s[10:15])
    out["engine_scalars"] = np.array([s[0], s[1], s[4], s[6], s[7], s[15]])
    temp = [7, 8, 9]  # v2's [1, g, g², g³, gl, gl², gl³, t, t², t³, f…]
    if a["it_theta"].shape[-1] == V2_IT_COLUMNS:
        out["it_R"] = np.delete(np.delete(a["it_R"], temp, axis=1), temp, axis=2)
        out["it_r"] = np.delete(a["it_r"], temp, axis=1)
        out["it_theta"] = np.delete(a["it_theta"], temp, axis=1)
    misc = _unblob(a["misc"]) or {}
    rows = {k: misc.get(k) for k in ("pending_job", "open_job", "row_times", "gaps")}
    if not misc.get("row_times"):
        rows["row_times"] = {"out_of_order_rows": misc.get("dropped_rows", 0)}
    misc["rows"] = rows
    out["misc"] = _blob(misc)
    return out


def check_magnitudes(arrays: dict[str, np.ndarray]) -> None:
    """No float in any array is infinite or beyond ``MAX_MAGNITUDE`` (NaN means unknown: allowed;
    -inf where ``NEVER_MARKED`` says it means "never")."""
    for name, arr in arrays.items():
        if arr.dtype.kind != "f" or not arr.size:
            continue
        with np.errstate(invalid="ignore"):
            bad = np.abs(arr) > MAX_MAGNITUDE
            if name in NEVER_MARKED:
                bad &= arr != -np.inf
        if bad.any():
            value = arr.reshape(-1)[int(np.argmax(bad.reshape(-1)))]
            raise StateError(f"state array {name}: {value!r} is out of range")


def index(value: float, low: int, high: int, what: str) -> int:
    """An integer ``low <= value < high`` stored as a float."""
    if not (math.isfinite(value) and value == math.floor(value) and low <= value < high):
        raise StateError(f"state {what} = {value!r}: must be an integer in [{low}, {high})")
    return int(value)


def scale(value: float, what: str) -> float:
    """A normaliser: > 0, or NaN before it is fixed (a 0 would divide every later value by zero)."""
    if not (math.isnan(value) or value > 0):
        raise StateError(f"state {what} = {value!r}: must be > 0")
    return value


def timestamp(value: float, what: str) -> float:
    """A row time (NaN: none yet) no clock that was ever set could not have shown."""
    if math.isnan(value):
        return value
    if not TS_FLOOR_S <= value <= MAX_TS_S:
        raise StateError(f"state {what} = {value!r}: not a time (seconds since 1970, after {TS_FLOOR_S:.0f})")
    return value
