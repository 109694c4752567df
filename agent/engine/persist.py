"""Engine ↔ state arrays. Every piece of learned state is a fixed-shape array; the few structured
parts owned by other modules (stage inferrer, drift monitor) are JSON padded to a fixed size.

A restored engine continues exactly where the saved one stopped, except for rows still in the
look-ahead buffer (at most ``LOOKAHEAD_S`` of rows; ``finish()`` flushes them before a save in
replay).
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from agent.engine.frames import widen_saved_sums
from agent.engine.stage_slots import N_SLOTS
from agent.engine.state import StateError, pack, unpack
from agent.engine.state_checks import check_magnitudes, index, scale, timestamp

if TYPE_CHECKING:
    from agent.engine.engine import Engine

ENGINE_STATE_VERSION = 2  # 2: per-stage GPU sums in bins (mixed-bin stage attribution)
BLOB_MIN_BYTES = 32768
NAME_WIDTH = 64


def _blob(obj: Any) -> np.ndarray:
    raw = json.dumps(obj, separators=(",", ":"), allow_nan=True).encode()
    size = BLOB_MIN_BYTES
    while size < len(raw):
        size *= 2
    return np.frombuffer(raw.ljust(size, b" "), dtype=np.uint8).copy()


def _unblob(arr: np.ndarray) -> Any:
    return json.loads(arr.tobytes().decode().strip() or "null")


def _scalars(engine: Engine) -> np.ndarray:
    r = engine.rows
    return np.array(
        [
            engine.window_s,
            engine.bin_s,
            engine.scale_w,
            engine.wr_scale,
            float(engine.window_idx),
            float(engine.warm),
            float(engine.window_warm),
            float(engine.seq),
            float(engine.best),
            float(engine.scored),
            r.t0,
            r._pending_ts,
            float(r._pending_slot),
            float(r._pending_hint),
            float(r._open_bin),
            engine.last_ts,
            engine.g_lo_w,
            engine.g_hi_w,
            engine.t_lo_c,
            engine.t_hi_c,
            engine.last_temp_c,
        ]
    )


def save_engine(engine: Engine) -> bytes:
    r = engine.rows
    arrays: dict[str, np.ndarray] = {
        "engine_version": np.array([ENGINE_STATE_VERSION], dtype=np.int64),
        "scalars": _scalars(engine),
        "signal_names": np.array(r.signals.names or [""], dtype=f"<U{NAME_WIDTH}"),
        "open_sums": r._open_sums,
        "last_g": engine.last_g,
        "energy_kwh": engine.energy_kwh,
        "score": engine.score,
        "bias_cool": engine.bias_cool,
        "bias_it": np.array([engine.bias_it]),
        "fan_lag": np.array([engine.fan_lag.y]),
        "last_res": engine.last_res,
    }
    arrays.update(r.signals.state_arrays())
    arrays.update(engine.slots.state_arrays())
    arrays.update(engine.segments.state_arrays())
    arrays.update(engine.lag.state_arrays())
    arrays.update(engine.it.state_arrays("it"))
    arrays.update(engine.cool.state_arrays("cool"))
    arrays.update(engine.gpu_model.state_arrays("gpum"))
    arrays.update(engine.it_stage.state_arrays("itstage"))
    arrays["gpu_seen_ts"] = np.array([engine.gpu_seen_ts])
    arrays.update(engine.baselines.state_arrays())
    arrays.update(engine.buf.state_arrays())
    misc = {
        "last_window": engine.last_window,
        "jobs": engine.buf.jobs[: engine.buf.n],
        "pending_job": r._pending_job,
        "open_job": r._open_job,
        "row_times": r.times.state(),
        "gaps": r.gaps,
        "rewarms": engine.rewarms,
        "job_rates": engine.job_rates.state(),
    }
    arrays["misc"] = _blob(misc)
    arrays["stages"] = _blob(engine.stage_source.state())
    arrays["drift"] = _blob(engine.drift.save_state() if engine.drift is not None else None)
    return pack(arrays)


def load_engine(engine: Engine, blob: bytes) -> None:
    """Fill a freshly built engine from ``blob``; raises StateError when it does not fit."""
    a = unpack(blob)
    try:
        version = int(a["engine_version"][0])
        if version != ENGINE_STATE_VERSION:
            raise StateError(f"engine state version {version}, this build reads {ENGINE_STATE_VERSION}")
        s = a["scalars"]
        if not math.isclose(s[0], engine.window_s) or not math.isclose(s[1], engine.bin_s):
            raise StateError(f"state was learned with window {s[0]:g} s; this run uses {engine.window_s:g} s")
        r = engine.rows
        raw_names = np.asarray(a["signal_names"])
        # signal names are ASCII ([a-z0-9_.]); a damaged blob can hold code points Python cannot
        # even represent, which crash str operations instead of failing a comparison
        if raw_names.dtype.kind != "U" or (raw_names.view(np.uint32) >= 128).any():
            raise StateError("state signal names are not ASCII (damaged state)")
        names = [str(n) for n in raw_names if str(n)]
        r.signals.ensure(names)
        if r.signals.names != names:
            raise StateError("state signal table does not match")
        check_magnitudes(a)
        r.signals.load_arrays(a)
        big = 2**53  # floats count integers exactly up to here
        engine.scale_w, engine.wr_scale = scale(s[2], "GPU power scale"), scale(s[3], "work-rate scale")
        engine.window_idx = index(s[4], -1, big, "window index")
        engine.warm, engine.window_warm = bool(s[5]), bool(s[6])
        engine.seq = index(s[7], 0, big, "seq")
        engine.best = index(s[8], 0, engine.lag.K, "selected lag candidate")
        engine.scored = bool(s[9])
        r.t0, r._pending_ts = timestamp(s[10], "first row time"), timestamp(s[11], "pending row time")
        r._pending_slot, r._pending_hint = index(s[12], 0, N_SLOTS, "pending stage slot"), bool(s[13])
        r._open_bin, engine.last_ts = index(s[14], -1, big, "open bin"), timestamp(s[15], "last sample time")
        index(a["wb_n"][0], 0, engine.buf.n_bins + 1, "bins in the open window")
        timestamp(a["seg"][0], "segment start")
        index(a["seg"][1], -1, 2 * N_SLOTS, "segment stage key")
        engine.g_lo_w, engine.g_hi_w = float(s[16]), float(s[17])
        engine.t_lo_c, engine.t_hi_c, engine.last_temp_c = float(s[18]), float(s[19]), float(s[20])
        r._open_sums[...] = widen_saved_sums(a["open_sums"], trailing=3 * N_SLOTS)
        engine.last_g[...] = a["last_g"]
        engine.energy_kwh[...] = a["energy_kwh"]
        engine.score[...] = a["score"]
        engine.bias_cool[...] = a["bias_cool"]
        engine.bias_it = float(a["bias_it"][0])
        engine.fan_lag.y = float(a["fan_lag"][0])
        engine.last_res[...] = a["last_res"]
        engine.slots.load_arrays(a)
        engine.segments.load_arrays(a)
        engine.lag.load_arrays(a)
        engine.it.load_arrays("it", a)
        engine.cool.load_arrays("cool", a)
        engine.gpu_model.load_arrays("gpum", a)
        if "itstage_theta" in a:  # state saved before the stage-only IT model: it starts fresh
            engine.it_stage.load_arrays("itstage", a)
            engine.gpu_seen_ts = float(a["gpu_seen_ts"][0])
        engine.baselines.load_arrays(a)
        engine.buf.load_arrays(a)
        misc = _unblob(a["misc"]) or {}
        engine.last_window = misc.get("last_window") or {}
        jobs = list(misc.get("jobs") or [])
        engine.buf.jobs[: len(jobs)] = jobs
        r._pending_job, r._open_job = str(misc.get("pending_job", "")), str(misc.get("open_job", ""))
        r.times.load(misc.get("row_times") or {"out_of_order_rows": misc.get("dropped_rows", 0)})
        r.gaps, engine.rewarms = int(misc.get("gaps", 0)), int(misc.get("rewarms", 0))
        engine.job_rates.load(misc.get("job_rates") or {})
        engine.stage_source.load(_unblob(a["stages"]) or {})
        drift = _unblob(a["drift"])
        if drift is not None and engine.drift is not None:
            engine.drift.load_state(drift)
    except (KeyError, IndexError, ValueError, TypeError, AttributeError, ArithmeticError) as exc:
        if isinstance(exc, StateError):
            raise
        raise StateError(f"engine state does not fit this build ({exc})") from exc
