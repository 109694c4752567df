"""The rack's device facts (``RackInfo``, ``rack_info``), the signal registry with its zero-order hold
(``Signals``: each signal held for at most ``HOLD_FACTOR`` × its own sampling interval,
trace-format.md), and the batches that flow from rows to bins (``BinBatch``, ``RowBatch``,
``split_pieces``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from agent.config.model import Config, EngineSection
from agent.engine.hygiene import Hygiene, kind_for
from agent.engine.signals import is_engine_signal
from agent.trace.model import TraceMeta
from drivers.snmp_pdu.config import PDU_MAX_POWER_W

HOLD_FACTOR = 3.0  # a signal is held for at most 3× its own sampling interval
DEFAULT_INTERVAL_S = 10.0  # until a signal's interval has been seen
INTERVAL_ALPHA = 0.05
_EW_WEIGHTS = (1.0 - INTERVAL_ALPHA) ** np.arange(199, -1, -1)


@dataclass
class RackInfo:
    """What the engine needs to know about the rack's devices (from trace metadata or config)."""

    crac_shares: dict[str, float] = field(default_factory=dict)  # default 1.0
    pdu_max_power_w: dict[str, float] = field(default_factory=dict)
    default_pdu_max_w: float = PDU_MAX_POWER_W
    gpu_max_power_w: float = 1500.0
    crac_max_power_w: float = 200000.0
    interval_s: dict[str, float] = field(default_factory=dict)  # signal → known polling interval
    # rack-wide GPU indices per node (config [[node]]/[[dcgm]] order; empty: the rack is one node)
    node_gpus: tuple[tuple[int, ...], ...] = ()
    node_ids: tuple[str, ...] = ()  # in node_gpus order (stage hints name nodes by it); empty: n0, n1, …

    def gpu_node(self, name: str) -> int:
        """Node index of column ``gpu.<i>.…`` (-1: not in any listed node)."""
        i = int(name.split(".")[1])
        return next((k for k, gpus in enumerate(self.node_gpus) if i in gpus), -1)

    def max_power_w(self, name: str) -> float:
        parts = name.split(".")
        if parts[0] == "gpu":
            return self.gpu_max_power_w
        if parts[0] == "crac":
            return self.crac_max_power_w
        if parts[0] == "pdu":
            return self.pdu_max_power_w.get(parts[1], self.default_pdu_max_w)
        return math.inf


def rack_info(meta: TraceMeta | None = None, config: Config | None = None,
              engine: EngineSection | None = None) -> RackInfo:
    """The device facts from trace metadata and/or configuration; configuration wins (trace-format.md:
    "A --config TOML given to replay overrides the metadata")."""
    eng = engine or (config.engine if config is not None else EngineSection())
    shares = dict(meta.crac_shares) if meta is not None else {}
    info = RackInfo(
        crac_shares=shares, gpu_max_power_w=eng.max_gpu_power_w, crac_max_power_w=eng.max_crac_power_w
    )
    if config is not None:
        for crac in config.cracs:
            info.crac_shares[crac.id] = crac.share
            info.interval_s[f"crac.{crac.id}.power_w"] = crac.interval_s
        for pdu in config.pdus:
            info.pdu_max_power_w[pdu.id] = pdu.max_power_w
            info.interval_s[f"pdu.{pdu.id}.power_w"] = pdu.interval_s
        from drivers.registry import gpu_nodes  # the drivers' own GPU numbering rule

        nodes = gpu_nodes(config)
        info.node_gpus = tuple(gpus for _, gpus in nodes)
        info.node_ids = tuple(node_id for node_id, _ in nodes)
    return info


# Per-slot blocks a bin carries after its sums: seconds in each stage, then seconds with GPU power
# known and its integral, then the same for GPU memory utilisation (``BinBatch``).
PER_SLOT_BLOCKS = 5
PER_SLOT_BLOCKS_BEFORE_MEMORY = 3  # states saved before the memory blocks (their prefix)


@dataclass
class BinBatch:
    """Completed bins: ``sums`` (n × N_FIELDS), ``stage_s`` (n × slots), bin starts, last job;
    ``stage_gpu_s`` / ``stage_gpu_ws`` (n × slots): per stage, seconds with GPU power known and its
    integral (each stage's own GPU power inside a bin: ``stage_attribution``, the drift sample);
    ``stage_mem_s`` / ``stage_mem_ws`` the same for the GPUs' mean memory utilisation (%·s)."""

    start: np.ndarray
    sums: np.ndarray
    stage_s: np.ndarray
    job: list[str]
    stage_gpu_s: np.ndarray
    stage_gpu_ws: np.ndarray
    stage_mem_s: np.ndarray
    stage_mem_ws: np.ndarray

    def __len__(self) -> int:
        return int(self.start.shape[0])


@dataclass
class RowBatch:
    """Emitted rows (for segments): their timestamps, stage slot and whether it was inferred."""

    ts: np.ndarray
    slot: np.ndarray
    inferred: np.ndarray


@dataclass(frozen=True)
class Held:
    """One signal's zero-order hold over the emitted rows (``Signals.hold``)."""

    values: np.ndarray  # per interval: the value held at its start, NaN once stale
    last_sample: np.ndarray  # per row: the row of the last sample at or before it (-1: one before these rows)
    sample_value: np.ndarray  # per row: that sample's value (the carried one where -1)
    sample_ts: np.ndarray  # per row: that sample's time
    limit_s: float  # a sample is held this long

    def at_rows(self, rows: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """The value held at the times of ``rows`` (their own samples included), NaN once stale."""
        fresh = ts[rows] - self.sample_ts[rows] <= self.limit_s
        out: np.ndarray = np.where(fresh, self.sample_value[rows], np.nan)
        return out


class Signals:
    """The registry of engine signals: names, hygiene, and the zero-order-hold state of each."""

    def __init__(self, rack: RackInfo, lookahead_s: float) -> None:
        self.rack = rack
        self.lookahead_s = lookahead_s
        self.names: list[str] = []
        self.hygiene = Hygiene([], [], lookahead_s)
        self.last_value = np.zeros(0)
        self.last_ts = np.zeros(0)
        self.interval_s = np.zeros(0)
        self.step = np.zeros(0)  # per counter: its step as meter_power judges it (NaN: not seen yet)
        self.meter_inc = np.zeros(0)  # per counter: its last increment between emitted readings

    def ensure(self, names: list[str]) -> None:
        """Register new signals (bounded by the rack's physical columns, never by uptime)."""
        new = [n for n in names if n not in self.names and is_engine_signal(n)]
        if not new:
            return
        old = self.hygiene
        self.names = self.names + sorted(new)
        kinds = [kind_for(n, self.rack.max_power_w(n)) for n in self.names]
        self.hygiene = Hygiene(self.names, kinds, self.lookahead_s)
        k = len(old.names)
        for key, arr in old.state_arrays().items():
            self.hygiene.state_arrays()[key][:k] = arr
        pad = len(new)
        self.last_value = np.concatenate([self.last_value, np.full(pad, np.nan)])
        self.last_ts = np.concatenate([self.last_ts, np.full(pad, -np.inf)])
        known = [self.rack.interval_s.get(n, np.nan) for n in self.names[k:]]
        self.interval_s = np.concatenate([self.interval_s, np.array(known, dtype=float)])
        self.step = np.concatenate([self.step, np.full(pad, np.nan)])
        self.meter_inc = np.concatenate([self.meter_inc, np.full(pad, np.nan)])

    def hold(self, k: int, ts: np.ndarray, clean: np.ndarray, start_ts: np.ndarray) -> Held:
        """Per emitted interval (``start_ts[i]``, ``ts[i]``]: the value held at its start (carried
        state, then rows 0..n-2), NaN where it is no longer fresh at its end (``Held``)."""
        n = ts.shape[0]
        valid = ~np.isnan(clean)
        idx = np.where(valid, np.arange(n), -1)
        np.maximum.accumulate(idx, out=idx)
        safe = np.maximum(idx, 0)
        held_v = np.where(idx >= 0, clean[safe], self.last_value[k])
        held_t = np.where(idx >= 0, ts[safe], self.last_ts[k])
        start_v = np.concatenate(([self.last_value[k]], held_v[:-1]))
        start_t = np.concatenate(([self.last_ts[k]], held_t[:-1]))
        self._learn_interval(k, ts[valid])
        interval = self.interval_s[k] if math.isfinite(self.interval_s[k]) else DEFAULT_INTERVAL_S
        limit = HOLD_FACTOR * interval + 1e-9
        fresh = (ts - start_t) <= limit
        self.last_value[k], self.last_ts[k] = held_v[-1], held_t[-1]
        return Held(np.where(fresh, start_v, np.nan), idx, held_v, held_t, limit)

    def _learn_interval(self, k: int, sample_ts: np.ndarray) -> None:
        if not sample_ts.size:
            return
        prev = self.last_ts[k]
        gaps = np.diff(sample_ts) if not math.isfinite(prev) else np.diff(np.concatenate(([prev], sample_ts)))
        gaps = gaps[gaps > 0]
        if not gaps.size or self.names[k] in self.rack.interval_s:
            return
        est = self.interval_s[k] if math.isfinite(self.interval_s[k]) else float(np.median(gaps))
        # EW mean of the gaps, clipped so an outage or a burst cannot drag it; only the last 200 gaps
        # carry weight worth computing (0.95**200 ≈ 3e-5)
        clipped = np.clip(gaps[-200:], est / 2.0, est * 2.0)
        w = _EW_WEIGHTS[-clipped.size :]
        decay = (1.0 - INTERVAL_ALPHA) ** clipped.size
        self.interval_s[k] = est * decay + INTERVAL_ALPHA * float(w @ clipped)

    def state_arrays(self) -> dict[str, np.ndarray]:
        out = {f"hyg_{k}": v for k, v in self.hygiene.state_arrays().items()}
        out.update(last_value=self.last_value, last_ts=self.last_ts, interval_s=self.interval_s,
                   meter_step=self.step, meter_inc=self.meter_inc)
        return out

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.hygiene.load_arrays({k[4:]: v for k, v in arrays.items() if k.startswith("hyg_")})
        for key in ("last_value", "last_ts", "interval_s"):
            getattr(self, key)[...] = arrays[key]
        if "meter_step" in arrays:  # a state saved before meter_power learns the steps again
            self.step[...] = arrays["meter_step"]
            self.meter_inc[...] = arrays["meter_inc"]


def split_pieces(starts: np.ndarray, ends: np.ndarray, t0: float,
                 bin_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split intervals at bin edges: (source interval index, piece duration, bin index)."""
    b_s = np.floor((starts - t0) / bin_s).astype(np.int64)
    b_e = np.ceil((ends - t0) / bin_s).astype(np.int64) - 1
    b_e = np.maximum(b_e, b_s)
    reps = b_e - b_s + 1
    if int(reps.max(initial=1)) == 1:
        return np.arange(starts.size), ends - starts, b_s
    src = np.repeat(np.arange(starts.size), reps)
    first = np.cumsum(reps) - reps
    k = np.arange(src.size) - np.repeat(first, reps)
    bins = b_s[src] + k
    lo = np.maximum(starts[src], t0 + bins * bin_s)
    hi = np.minimum(ends[src], t0 + (bins + 1) * bin_s)
    return src, np.maximum(hi - lo, 0.0), bins
