"""Online, fixed-memory inference of the training stage from telemetry, for rows with no label.

A nearest-centroid classifier over the scale-free ``features.FEATURES``, followed by a causal
hysteresis filter so segments do not flicker. Centroids start from physics priors (it works with
no label ever seen) and move toward per-stage means learned from hinted rows, which are returned
unchanged (hints win). Memory: a (stages × features) table of means and variances, a few scalars.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agent.stages.features import FEATURES, N_FEATURES, FeatureExtractor
from agent.stages.steps import ALT_S, SWING_ROWS
from agent.trace.model import TraceChunk

# Physics priors in feature space (the order of FEATURES); NaN = no opinion. A stage may have more
# than one signature (a prototype "<stage>~<variant>"); docs/stage-hints.md says what each shows.
# data_load: contexts up, no kernel (H100 ~115 W against 65 W idle: lift ≈ log 1.7); grad_sync~stall:
# every rank spinning in NCCL (100 % utilisation a little above idle, ~155 W); eval~serve: another
# model's forward passes may draw more than a lighter job trained before: no opinion on the level.
# The low stages have no opinion on the alternation: checkpoints every step or two and input
# stalls alternate with 1–3 s training bursts, and the low side of that is not grad_sync.
# Utilisation has a wide scale: alone it tells a spinning rank from a computing one no better than
# power does, so it only separates signatures that power leaves alike.
_NAN = float("nan")
PRIOR_CENTROIDS: dict[str, tuple[float, ...]] = {
    "idle": (0.00, 0.00, 0.00, 0.00, 0.0, 0.15, _NAN, _NAN, _NAN, _NAN, _NAN),
    "data_load": (0.08, 0.50, 0.02, 0.00, 0.0, 0.65, _NAN, _NAN, _NAN, _NAN, 0.00),
    "forward_backward": (1.00, _NAN, 0.95, _NAN, 0.0, _NAN, _NAN, 1.0, _NAN, 0.0, _NAN),
    "grad_sync": (0.55, _NAN, 0.75, _NAN, 0.0, _NAN, _NAN, 0.0, 1.0, 0.0, _NAN),
    "checkpoint": (0.13, 0.70, 0.03, 0.10, 0.0, 0.55, _NAN, _NAN, _NAN, _NAN, _NAN),
    "eval": (0.70, _NAN, 0.85, _NAN, 0.0, 0.50, 0.0, _NAN, _NAN, _NAN, _NAN),
    "grad_sync~stall": (0.15, 0.80, 1.00, _NAN, 0.0, _NAN, _NAN, _NAN, _NAN, _NAN, _NAN),
    "checkpoint~spin": (0.15, 0.80, 0.97, _NAN, 1.0, 0.55, _NAN, _NAN, _NAN, _NAN, _NAN),
    "eval~serve": (_NAN, _NAN, 0.85, _NAN, 0.0, _NAN, 0.0, _NAN, 0.0, 1.0, _NAN),
}
# Typical spread of each feature within a stage, used to weigh distances before labels arrive.
# over_start's (last, log units): half the lift of the least-drawing writer over its job's
# start-up (H100: 145 / 115 W, 0.23), so a writing rank sits two spreads from a data stall while
# sample noise (1–4 % per GPU, less for the median) moves a row by a tenth of one.
PRIOR_SCALE = np.array([0.12, 0.25, 0.25, 0.05, 0.10, 0.40, 0.20, 0.25, 0.30, 0.30, 0.12])
VARIANT_SEP = "~"  # "<stage>~<variant>": another signature of the same stage
# Stages a training step alternates between within seconds: no dwell between these two.
FAST_ALTERNATING = frozenset({"forward_backward", "grad_sync"})
# Evals last minutes; a step's ramp or a 1–3 s burst of training between frequent checkpoints
# passes through eval's level for a second or two. An eval is believed after this long only:
# several times that passage, and short beside an eval (the alternation feature has already
# waited ALT_S past the last step before eval can be the nearest stage at all).
SLOW_ENTRY_S = {"eval": 10.0}
_NO_OPINION_COST = 1.0
MAX_STAGES = 16  # canonical stages and their variants plus up to 8 custom labels learned from hints
_PRIOR_WEIGHT_ROWS = 300.0  # labelled rows after which learned means outweigh the priors
_MIN_LEARN_RATE = 0.002  # EWMA floor so learned levels keep following a drifting job
STATE_VERSION = 3  # 3: the job's start-up power (over_start); 2: features relative to the job's level
# Versions an engine state may still hold: they are read as "nothing learned", so the rest of a
# saved engine (baselines, drift) is not refused for the inferrer's sake.
_FORMER_VERSIONS = (1, 2)
LEARN_BLOCK_ROWS = 512  # all-hinted chunks: contiguous rows per learning sample block …
LEARN_EVERY_ROWS = 8192  # … one per this many rows, and one of this many at each steady-stage run:
STEADY_BLOCK_ROWS = 96
# rows (≈ seconds) a learning block needs before its features are those of a full pass: the
# alternation window and the time since the last alternation
LOOKBACK_ROWS = max(SWING_ROWS, int(ALT_S) + 1)


def stage_of(slot: str) -> str:
    """The stage a prototype slot stands for ("checkpoint~spin" → "checkpoint")."""
    return slot.split(VARIANT_SEP, 1)[0]


class StageInferrer:
    """Labels unlabelled rows of trace chunks; learns per-stage levels from labelled ones."""

    def __init__(
        self,
        dwell_s: float = 5.0,
        margin: float = 8.0,
        strong_margin: float = 15.0,
        power_ref_w: float | None = None,
        max_hold_s: float = 30.0,
        gpus: tuple[int, ...] | None = None,
    ):
        """``gpus``: infer from these GPU indices only (one node, one job); None = the whole rack."""
        self.dwell_s = dwell_s
        self.margin = margin  # squared-z distance by which a new stage must win on two rows
        # … or on one row: 15 is about four prior spreads (√15), far past what sample noise moves a
        # row, while a row straddling a change lands between the levels and wins by less
        self.strong_margin = strong_margin
        self.features = FeatureExtractor(max_hold_s=max_hold_s, power_ref_w=power_ref_w, gpus=gpus)
        self._stages: list[str] = list(PRIOR_CENTROIDS)  # prototype slots
        self._mean = np.zeros((MAX_STAGES, N_FEATURES))
        self._var = np.zeros((MAX_STAGES, N_FEATURES))
        self._count = np.zeros(MAX_STAGES)
        for i, name in enumerate(self._stages):
            self._mean[i] = PRIOR_CENTROIDS[name]
            self._var[i] = PRIOR_SCALE**2
        # causal hysteresis filter state
        self._current = ""  # the stage the filter is in
        self._candidate = ""  # a different stage seen recently
        self._candidate_since = float("nan")
        self._decisive_last = False

    # ------------------------------------------------------------------ public API
    def infer_chunk(self, chunk: TraceChunk, hint_stage: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Stage per row and whether it was inferred.

        ``hint_stage``: object array of str, ``""`` where the row has no label. Labelled rows keep
        their label (and teach the classifier); the others get the inferred stage.
        """
        n = len(chunk)
        hinted = np.array([bool(s) for s in hint_stage], dtype=bool) if n else np.zeros(0, bool)
        if n and hinted.all():  # nothing to infer: only learn, and keep the filter in step
            self._learn_all_hinted(chunk, hint_stage)
            self._current, self._candidate = str(hint_stage[-1]), ""
            return np.asarray(hint_stage, dtype=object), np.zeros(n, dtype=bool)
        feats = self.features.extract(chunk)
        if hinted.any():
            self._learn(feats[hinted], hint_stage[hinted])
        raw, dist = self._classify(feats)
        smoothed = self._dwell(chunk.ts, raw, dist, hint_stage, hinted)
        out = np.where(hinted, hint_stage, smoothed).astype(object)
        return out, ~hinted

    def save_state(self) -> dict[str, Any]:
        """A snapshot of everything learned, strict JSON (NaN written as null)."""
        k = len(self._stages)
        return {
            "version": STATE_VERSION,
            "stages": list(self._stages),
            "mean": _nulls(self._mean[:k].tolist()),
            "var": _nulls(self._var[:k].tolist()),
            "count": self._count[:k].tolist(),
            "features": _nulls(self.features.state()),
            "current": self._current,
        }

    def load_state(self, state: dict[str, Any]) -> None:
        """Restore a snapshot from ``save_state``; a foreign or corrupt one raises ValueError."""
        if state.get("version") in _FORMER_VERSIONS:
            return  # learned on other features: nothing carries over, the priors start afresh
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"stage inferrer state: unsupported version {state.get('version')!r}")
        stages = [str(s) for s in state["stages"]][:MAX_STAGES]
        mean = np.asarray(state["mean"], dtype=float)
        var = np.asarray(state["var"], dtype=float)
        count = np.asarray(state["count"], dtype=float)
        k = len(stages)
        if mean.shape != (k, N_FEATURES) or var.shape != (k, N_FEATURES) or count.shape != (k,):
            raise ValueError("stage inferrer state: table shapes do not match the stage list")
        self._stages = stages
        self._mean[:] = 0.0
        self._var[:] = 0.0
        self._count[:] = 0.0
        self._mean[:k], self._var[:k], self._count[:k] = mean, var, count
        features = state.get("features") or {}
        self.features.load({key: float("nan") if v is None else float(v) for key, v in features.items()})
        self._current = str(state.get("current", ""))

    @property
    def stages(self) -> tuple[str, ...]:
        """The stages it can infer (variants folded into their stage)."""
        return tuple(dict.fromkeys(stage_of(s) for s in self._stages))

    def centroids(self) -> dict[str, tuple[float, ...]]:
        """The effective centroid of each prototype (prior blended with learned), for status pages."""
        eff, _ = self._effective()
        return {s: tuple(float(v) for v in eff[i]) for i, s in enumerate(self._stages)}

    # ------------------------------------------------------------------ learning
    def _slot(self, stage: str) -> int | None:
        try:
            return self._stages.index(stage)
        except ValueError:
            if len(self._stages) >= MAX_STAGES:
                return None
            self._stages.append(stage)
            i = len(self._stages) - 1
            self._mean[i] = np.nan
            self._var[i] = PRIOR_SCALE**2
            return i

    def _learn_all_hinted(self, chunk: TraceChunk, hint_stage: np.ndarray) -> None:
        """Learn from a chunk whose every row is labelled, on contiguous sample blocks.

        Features cost most of the inferrer's time, and a replay chunk of tens of thousands of
        hinted rows teaches as well from a part of them. Blocks (contiguous: the alternation and
        node-power features look at consecutive rows): ``STEADY_BLOCK_ROWS`` at the start of every
        run of a steady stage (rare, and where the node-power range is learned), one every
        ``LEARN_EVERY_ROWS`` rows, and one ending at the chunk's end (so the carried values are the
        end's). A block's first ``LOOKBACK_ROWS`` rows teach nothing; each learned row counts for
        its stage's rows in the chunk. Small chunks are learned whole.
        """
        n = len(chunk)
        if n < LEARN_EVERY_ROWS:
            self._learn(self.features.extract(chunk), hint_stage)
            return
        labels = np.asarray(hint_stage, dtype=object)
        run_start = np.concatenate(([0], np.flatnonzero(labels[1:] != labels[:-1]) + 1))
        spans = [
            (max(int(i) - LOOKBACK_ROWS, 0), int(i) + STEADY_BLOCK_ROWS)
            for i in run_start
            if labels[i] not in FAST_ALTERNATING
        ]
        regular_spans = [(a, a + LEARN_BLOCK_ROWS) for a in range(0, n - LEARN_BLOCK_ROWS, LEARN_EVERY_ROWS)]
        regular_spans.append((n - LEARN_BLOCK_ROWS, n))
        spans += regular_spans
        # training rows teach from the regular blocks only: those just after a steady run (a
        # stall's end) are not typical of training and would be over-weighted
        regular = np.zeros(n, dtype=bool)
        for a, b in regular_spans:
            regular[a:b] = True
        blocks: list[list[int]] = []
        for a, b_end in sorted(spans):  # merge overlapping blocks
            b = min(b_end, n)
            if blocks and a <= blocks[-1][1]:
                blocks[-1][1] = max(blocks[-1][1], b)
            else:
                blocks.append([a, b])
        # one extraction over the blocks laid end to end (per-call overhead dominates small blocks);
        # the gaps between them are seen as time gaps, and each block's first rows do not teach
        idx = np.concatenate([np.arange(a, b) for a, b in blocks])
        teach = np.concatenate([np.arange(b - a) >= LOOKBACK_ROWS for a, b in blocks])
        teach &= regular[idx] | ~np.isin(labels[idx], list(FAST_ALTERNATING))
        feats = self.features.extract(chunk.take(idx))[teach]
        learned = labels[idx[teach]]
        for stage in set(learned.tolist()):
            mask = learned == stage
            weight = float(np.count_nonzero(labels == stage)) / float(np.count_nonzero(mask))
            self._learn(feats[mask], learned[mask], weight=weight)

    def _learn(self, feats: np.ndarray, labels: np.ndarray, weight: float = 1.0) -> None:
        """Per-stage running mean and variance of the features; ``weight``: how many rows each
        given row stands for (sampled learning)."""
        for stage in set(labels.tolist()):
            rows_all = feats[labels == stage]
            for slot, rows in self._by_variant(str(stage), rows_all):
                self._learn_slot(slot, rows, weight)

    def _by_variant(self, stage: str, rows: np.ndarray) -> list[tuple[int, np.ndarray]]:
        """Labelled rows of ``stage`` split among its prototype slots, each to the nearest."""
        slots = [i for i, s in enumerate(self._stages) if stage_of(s) == stage]
        if not slots:
            slot = self._slot(stage)
            return [] if slot is None else [(slot, rows)]
        if len(slots) == 1:
            return [(slots[0], rows)]
        dist = self._distances(rows)[:, slots]
        nearest = np.argmin(dist, axis=1)
        return [(slots[k], rows[nearest == k]) for k in range(len(slots)) if np.any(nearest == k)]

    def _learn_slot(self, slot: int, rows: np.ndarray, weight: float) -> None:
        """One prototype slot's running mean and variance (EWMA with a floor rate)."""
        for j in range(N_FEATURES):
            col = rows[:, j]
            col = col[np.isfinite(col)]
            if col.size == 0:
                continue
            n0 = self._count[slot]
            m = float(col.mean())
            v = float(col.var())
            size = col.size * weight
            rate = max(size / (n0 + size), _MIN_LEARN_RATE * min(size, 100))
            rate = min(rate, 1.0)
            old_m = self._mean[slot, j]
            if not np.isfinite(old_m):
                old_m = m
            new_m = old_m + rate * (m - old_m)
            new_v = (1 - rate) * (self._var[slot, j] + rate * (m - old_m) ** 2) + rate * v
            self._mean[slot, j] = new_m
            self._var[slot, j] = new_v
        self._count[slot] += rows.shape[0] * weight

    def _effective(self) -> tuple[np.ndarray, np.ndarray]:
        """Centroids and scales: priors for canonical stages, blended toward learned values. A
        prior's "no opinion" (NaN) stays so after learning: its reason (a lag, a stage's first
        seconds) does not go away."""
        k = len(self._stages)
        mean = self._mean[:k].copy()
        scale = np.sqrt(np.maximum(self._var[:k], 0.0))
        for i, name in enumerate(self._stages):
            prior_values = PRIOR_CENTROIDS.get(name)
            if prior_values is None:
                continue
            prior = np.asarray(prior_values)
            if self._count[i] == 0:
                mean[i] = prior
                scale[i] = PRIOR_SCALE
                continue
            w = self._count[i] / (self._count[i] + _PRIOR_WEIGHT_ROWS)
            blend = w * mean[i] + (1 - w) * prior
            blend = np.where(np.isnan(prior), np.nan, blend)  # "no opinion" stays so
            mean[i] = np.where(np.isnan(mean[i]), prior, blend)
            scale[i] = w * scale[i] + (1 - w) * PRIOR_SCALE
        # a short labelled period understates how far a stage wanders (its job's reference moves
        # with time): keep at least half the prior spread
        scale = np.maximum(np.nan_to_num(scale, nan=1.0), PRIOR_SCALE * 0.5)
        return mean, scale

    # ------------------------------------------------------------------ classification
    def _classify(self, feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Index of the nearest stage per row (-1 when no feature is known), and all distances.

        Distance: squared z-scores over the features both the row and the centroid have, plus
        the Gaussian normalisation term; a feature the row has but the centroid has no opinion
        on costs a flat 1 (about one standard deviation).
        """
        n = feats.shape[0]
        out_stages = self.stages
        if n == 0:
            return np.zeros(0, dtype=int), np.zeros((0, len(out_stages)))
        slot_dist = self._distances(feats)
        # a stage is as near as its nearest signature
        dist = np.full((n, len(out_stages)), np.inf)
        for i, slot in enumerate(self._stages):
            j = out_stages.index(stage_of(slot))
            dist[:, j] = np.minimum(dist[:, j], slot_dist[:, i])
        best = np.argmin(dist, axis=1)
        best[~np.isfinite(feats).any(axis=1)] = -1
        return best, dist

    def _distances(self, feats: np.ndarray) -> np.ndarray:
        """(rows, slots) distance of each row to each prototype slot."""
        mean, scale = self._effective()
        # a slot with an opinion on some feature: eval~serve has none on the level, a custom slot
        # none until it has learned
        usable = np.isfinite(mean).any(axis=1)
        z = (feats[:, None, :] - mean[None, :, :]) / scale[None, :, :]
        row_known = np.isfinite(feats)[:, None, :]
        both = row_known & np.isfinite(mean)[None, :, :]
        log_term = np.where(np.isfinite(mean), 2.0 * np.log(scale), 2.0 * np.log(PRIOR_SCALE))
        dist = np.where(both, z * z, 0.0).sum(axis=2)
        dist += np.where(row_known & ~both, _NO_OPINION_COST, 0.0).sum(axis=2)
        dist += np.where(row_known, log_term[None, :, :], 0.0).sum(axis=2)
        dist[:, ~usable] = np.inf
        return np.asarray(dist)

    def _dwell(
        self, ts: np.ndarray, raw: np.ndarray, dist: np.ndarray, hint_stage: np.ndarray, hinted: np.ndarray
    ) -> np.ndarray:
        """Causal hysteresis: switch to a new stage when it is decisively nearer than the current
        one (by ``margin``) on two consecutive rows (or by ``strong_margin`` on one), or after it
        stayed the nearest for ``dwell_s``; forward_backward ↔ grad_sync switch at once. Works
        over runs of equal raw labels (cost grows with changes, not rows); hinted rows reset it.
        """
        n = raw.shape[0]
        out = np.empty(n, dtype=object)
        stages = self.stages
        names = [*stages, "unknown"]
        index = {name: i for i, name in enumerate(stages)}
        labels = np.where(hinted, -2, raw)
        if n == 0:
            return out
        change = np.flatnonzero(np.diff(labels)) + 1
        starts = np.concatenate(([0], change))
        ends = np.concatenate((change, [n]))
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            code = int(labels[a])
            if code == -2:
                self._current = str(hint_stage[b - 1])
                self._candidate = ""
                out[a:b] = ""
                continue
            name = names[code] if code >= 0 else self._current or "unknown"
            if not self._current:
                self._current = name
            if name == self._current:
                self._candidate = ""
                out[a:b] = name
                continue
            if name != self._candidate:
                self._candidate = name
                self._candidate_since = float(ts[a])
                self._decisive_last = False
            fast = name in FAST_ALTERNATING and self._current in FAST_ALTERNATING
            slow = SLOW_ENTRY_S.get(name)
            switch_at = self._candidate_since + (0.0 if fast else slow or self.dwell_s)
            k = a + int(np.searchsorted(ts[a:b], switch_at, side="left"))
            cur = index.get(self._current)
            if k > a and code >= 0 and cur is not None and slow is None:
                gap = dist[a:k, cur] - dist[a:k, code]
                decisive = gap > self.margin
                # two decisive rows in a row (one may be the previous chunk's last), or one overwhelming
                confirmed = (decisive & np.concatenate(([self._decisive_last], decisive[:-1]))) | (
                    gap > self.strong_margin
                )
                if confirmed.any():
                    k = a + int(np.argmax(confirmed))
                self._decisive_last = bool(decisive[-1]) if k == b else False
            out[a:k] = self._current
            if k < b:
                self._current = name
                self._candidate = ""
                out[k:b] = name
        return out



def _nulls(obj: Any) -> Any:
    """NaN → None, recursively, so the state is strict JSON."""
    if isinstance(obj, float):
        return None if obj != obj else obj
    if isinstance(obj, list):
        return [_nulls(v) for v in obj]
    if isinstance(obj, dict):
        return {key: _nulls(v) for key, v in obj.items()}
    return obj


__all__ = ["FEATURES", "PRIOR_CENTROIDS", "StageInferrer"]
