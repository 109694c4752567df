"""Input hygiene: reject readings that are not physics before anything reaches a baseline.

A per-signal, vectorised filter over a row buffer's columns; a rejected sample becomes NaN ("not
sampled"), so the hold keeps the previous good value, and is counted per signal and rule
(``RULES``, in the order applied; each rule and its reason: docs/engine.md, "Input hygiene").
The spike rule needs the next sample (the engine looks ahead ``lookahead_s``; a sample whose
successor is further away is never a spike, so chunking cannot change the outcome); the stuck
rule's run-length threshold adapts to how often the signal repeats a value when healthy.
State is fixed per signal: the last accepted value, the current run length, the repeat rate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from agent.engine.signals import column_of
from agent.stages.job_scope import run_length

RULES: tuple[str, ...] = ("nonfinite", "sentinel", "negative", "above_max", "spike", "stuck", "reset")
# Register "no reading" codes: -1, -410 (SNMP gauges, PDU sensor probes), 0xFFFF/0x8000/0x7FFF and
# their 0.1/0.01-scaled forms, the 32-bit extremes. Applied only where ``SignalKind.register``.
SENTINELS = np.array([-1.0, -410.0, 65535.0, 32768.0, 32767.0, -32768.0, 6553.5, 655.35, 3276.8, 327.68,
                      3276.7, 4294967295.0, 2147483647.0, -2147483648.0, 429496729.5])
SPIKE_FACTOR = 3.0  # a spike is ≥ 3× above (or ≤ 1/3 of) both neighbours …
SPIKE_AGREE = 0.25  # … while the neighbours agree within 25 %
SPIKE_FLOOR_FRAC = 0.01  # ignore "spikes" on levels below 1 % of the signal's maximum
STUCK_MIN_SAMPLES = 30  # never call a run shorter than this stuck
STUCK_FALSE_RATE = 1e-9  # a healthy signal repeats this long with at most this probability
REPEAT_RATE_ALPHA = 0.002  # EW rate of "same value as the previous sample" on healthy data


@dataclass(frozen=True)
class SignalKind:
    """Physical range and which rules apply to one column (``signals.COLUMNS`` says which kind)."""

    min_value: float
    max_value: float
    shape_rules: bool  # spike and stuck detection
    counter: bool = False  # cumulative: only checked for resets
    register: bool = False  # a raw device register: its "no reading" codes (``SENTINELS``) are rejected


# kind → (minimum, maximum (× the device's max power for "power"/"heat"), shape rules, counter).
# Heat: a cooling unit removes up to its COP (< 20) times its own power. Temperatures: −40…120 °C
# covers outdoor air and hot GPUs; a rack inlet below 0 °C is not a data hall's air (ASHRAE's
# widest allowable class, A4, starts at 5 °C). Fan speed: up to 110 % (units report overdrive).
RANGES: dict[str, tuple[float, float, bool, bool]] = {
    "power": (0.0, 1.0, True, False),
    "heat": (0.0, 20.0, False, False),
    "counter": (0.0, math.inf, False, True),
    "temp": (-40.0, 120.0, False, False),
    "inlet": (0.0, 120.0, False, False),
    "pct": (0.0, 110.0, False, False),
    "rate": (0.0, math.inf, False, False),
}


def kind_for(name: str, max_power_w: float) -> SignalKind:
    """Range and rules for a canonical column name; ``max_power_w`` is that device's maximum."""
    col = column_of(name)
    if col is None:
        return SignalKind(-math.inf, math.inf, False)
    lo, hi, shape, counter = RANGES[col.kind]
    if col.kind in ("power", "heat"):
        hi *= max_power_w
    return SignalKind(lo, hi, shape, counter, col.register)


class Hygiene:
    """Cleans a fixed set of signals; the set is given once (the trace's or config's columns)."""

    def __init__(self, names: list[str], kinds: list[SignalKind], lookahead_s: float) -> None:
        self.names = list(names)
        self.kinds = list(kinds)
        self.lookahead_s = lookahead_s
        n = len(names)
        self.counts = np.zeros((n, len(RULES)), dtype=np.int64)
        self.last = np.full(n, np.nan)  # last accepted (emitted) value
        self.run = np.zeros(n)  # repeats of ``last`` so far
        self.repeat_rate = np.full(n, 0.5)
        # per counter signal: the rows of the last ``clean`` that went backwards (read by the row binner)
        self.reset_rows: dict[int, np.ndarray] = {}

    def clean(self, k: int, ts: np.ndarray, values: np.ndarray, n_emit: int) -> np.ndarray:
        """Cleaned copy of ``values[:n_emit]`` for signal ``k`` (``values`` past ``n_emit`` is look-ahead);
        advances this signal's state past row ``n_emit - 1`` only."""
        kind = self.kinds[k]
        self.reset_rows.pop(k, None)
        v = values
        present = ~np.isnan(v)
        out = v[:n_emit].copy()
        if not present[:n_emit].any():
            return out
        counts = self.counts[k]
        nonfinite = present & np.isinf(v)
        finite = present & ~nonfinite
        sentinel = finite & np.isin(v, SENTINELS) if kind.register else np.zeros_like(finite)
        negative = finite & ~sentinel & (v < kind.min_value)
        above = finite & ~sentinel & (v > kind.max_value)
        bad = nonfinite | sentinel | negative | above
        for rule, mask in enumerate((nonfinite, sentinel, negative, above)):
            counts[rule] += int(mask[:n_emit].sum())
        good = present & ~bad
        out[bad[:n_emit]] = np.nan
        if kind.counter:
            self.reset_rows[k] = self._count_resets(k, v[:n_emit], good[:n_emit])
            return out
        if not kind.shape_rules:
            idx = np.flatnonzero(good[:n_emit])
            if idx.size:
                self.last[k] = v[idx[-1]]
            return out
        idx = np.flatnonzero(good)
        vals = v[idx]
        n_e = int((idx < n_emit).sum())
        if n_e == 0:
            return out
        spike = self._spikes(k, ts[idx], vals, n_e)
        counts[4] += int(spike.sum())
        out[idx[:n_e][spike]] = np.nan
        kept_idx, kept = idx[:n_e][~spike], vals[:n_e][~spike]
        if kept.size:
            stuck = self._stuck(k, kept)
            counts[5] += int(stuck.sum())
            out[kept_idx[stuck]] = np.nan
        return out

    def _spikes(self, k: int, ts_s: np.ndarray, vals: np.ndarray, n_e: int) -> np.ndarray:
        prev = np.concatenate(([self.last[k]], vals[: n_e - 1]))
        nxt = np.full(n_e, np.nan)
        m = min(vals.size - 1, n_e)
        nxt[:m] = vals[1 : m + 1]
        near = np.zeros(n_e, dtype=bool)
        near[:m] = (ts_s[1 : m + 1] - ts_s[:m]) <= self.lookahead_s
        nxt[~near] = np.nan
        x = vals[:n_e]
        floor = SPIKE_FLOOR_FRAC * (self.kinds[k].max_value if math.isfinite(self.kinds[k].max_value) else 0)
        lo = np.minimum(prev, nxt)
        hi = np.maximum(prev, nxt)
        with np.errstate(invalid="ignore", divide="ignore"):
            agree = (hi - lo) <= SPIKE_AGREE * np.maximum(hi, 1e-9)
            up = x > SPIKE_FACTOR * hi + floor
            down = (x * SPIKE_FACTOR < lo) & (lo > floor)
        return np.asarray(agree & (up | down))

    def _stuck(self, k: int, kept: np.ndarray) -> np.ndarray:
        prev = np.concatenate(([self.last[k]], kept[:-1]))
        eq = kept == prev
        run = run_length(eq, float(self.run[k])).astype(float)
        rate = float(min(max(self.repeat_rate[k], 1e-3), 0.999))
        limit = max(STUCK_MIN_SAMPLES, math.log(STUCK_FALSE_RATE) / math.log(rate))
        stuck = run >= limit
        healthy = ~stuck
        if healthy.any():
            frac = float(eq[healthy].mean())
            w = 1.0 - (1.0 - REPEAT_RATE_ALPHA) ** int(healthy.sum())
            self.repeat_rate[k] += w * (frac - self.repeat_rate[k])
        self.last[k] = kept[-1]
        self.run[k] = run[-1]
        return stuck

    def _count_resets(self, k: int, v: np.ndarray, good: np.ndarray) -> np.ndarray:
        """Count the rows where the counter went backwards; returns them as a mask over ``v``."""
        mask = np.zeros(v.shape[0], dtype=bool)
        vals = v[good]
        if vals.size == 0:
            return mask
        prev = np.concatenate(([self.last[k]], vals[:-1]))
        with np.errstate(invalid="ignore"):
            back = vals < prev
        self.counts[k, 6] += int(back.sum())
        mask[np.flatnonzero(good)[back]] = True
        self.last[k] = vals[-1]
        return mask

    def counts_by_signal(self) -> dict[str, dict[str, int]]:
        """Non-zero rejection counts: {signal: {rule: n}}."""
        return {name: {rule: int(c) for rule, c in zip(RULES, row, strict=True) if c}
                for name, row in zip(self.names, self.counts, strict=True) if row.any()}

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {"counts": self.counts, "last": self.last, "run": self.run, "repeat_rate": self.repeat_rate}

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        for key, arr in self.state_arrays().items():
            src = arrays[key]
            if src.shape != arr.shape:
                raise ValueError(f"hygiene state '{key}': shape {src.shape}, expected {arr.shape}")
            arr[...] = src
