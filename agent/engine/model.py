"""``ResponseModel``: the IT, cooling and lag state of the engine, and the two things done with it.

``predict`` runs a window's bins through the model as it was at the window's start (load-side
inputs only: stages, work rate, GPU power); ``learn`` lets the closed window's PDU and cooling
samples in afterwards (prequential), skipping bins of components the drift monitor holds and with
a short half-life for those it re-learns. Regressions and lag bank: ``response.py``; the model:
docs/engine.md.
"""

from __future__ import annotations

import math

import numpy as np

from agent.engine.closed_window import ClosedWindow, bin_work_rate, feed_seen_dev, gpu_moments
from agent.engine.components import LEARNED
from agent.engine.job_rates import JobRates
from agent.engine.level_bank import LevelBank
from agent.engine.response import (
    COOL_RIDGE,
    EWLS,
    FAN_LAG_S,
    N_COOL,
    N_IT_BASE,
    N_RATE_CURVE,
    LagBank,
    SingleLag,
    cooling_features,
    daily_phase,
    feed_view_w,
    it_features,
    it_predict,
    it_ridge,
    prequential_score,
    stage_it_features,
    stage_it_ridge,
)
from agent.engine.shadow import ShadowFits
from agent.engine.signals import F
from agent.engine.window_buffer import Prediction, WindowBuffer
from agent.stages.job_scope import last_true_ts

WARMUP_H = 2.0  # hours of learned data (IT and cooling) before predictions are published
# GPU telemetry older than this is missing (the spec holds a signal for three of its intervals; the
# slowest GPU source, dcgm-exporter, refreshes every 30 s): such bins get the stage-only IT model.
GPU_FRESH_S = 90.0
RELEARN_HALFLIFE_H = 1.0
TRANSIENT_FRAC = 0.05  # lagged heat still > 5 % away from the heat → the facility is settling
# The residual levels' memories until each rack's own is chosen (level_bank.py): the former fixed
# ones, 5 min for cooling (other racks on the unit move it within minutes), 1 h for IT (rarer there)
BIAS_HALFLIFE_S = 300.0
IT_BIAS_HALFLIFE_S = 3600.0
HELD_IT, HELD_COOLING, HELD_GPU = (LEARNED.index(c) for c in ("it", "cooling", "gpu"))  # WindowBuffer.held
# The lag candidate before any is scored: a typical CRAC's response (τ ≈ 4 min, 1 min dead time)
START_TAU_S, START_DEAD_S = 240.0, 60.0


class ResponseModel:
    """IT (GPU-driven and stage-only), cooling (lag bank), GPU-per-work model, in fixed memory."""

    def __init__(self, window_s: float, bins_per_window: int, n_slots: int,
                 forgetting_halflife_h: float) -> None:
        self.window_s = window_s
        self.bin_s = bin_s = window_s / bins_per_window
        self.forgetting_halflife_h = forgetting_halflife_h
        self.lag = LagBank(bin_s, n_slots, bins_per_window)
        K = self.lag.K
        self.fan_lag = SingleLag(bin_s, FAN_LAG_S, bins_per_window)
        self.it = EWLS(1, N_IT_BASE + n_slots, it_ridge(n_slots))
        # IT from stages and work rate alone: bins without fresh GPU telemetry, and all until GPU warm-up
        self.it_stage = EWLS(1, 2 * n_slots + N_RATE_CURVE, stage_it_ridge(n_slots))
        self.cool = EWLS(K, N_COOL, COOL_RIDGE)
        self.gpu_model = EWLS(n_slots, 2, np.array([1e-6, 1e-3]))
        # what held components would have learned (shadow.py), per ``components.LEARNED``
        self.shadow = ShadowFits({"it": [self.it, self.it_stage], "cooling": [self.cool],
                                  "gpu": [self.gpu_model]})
        self.job_rates = JobRates()
        self.gpu_seen_ts = -math.inf  # end of the last bin with a GPU sample
        self.score = np.zeros(K)
        self.it_level = LevelBank(1, IT_BIAS_HALFLIFE_S)  # recent IT residual level (level_bank.py)
        self.cool_level = LevelBank(K, BIAS_HALFLIFE_S)  # recent cooling residual level, per lag candidate
        self.last_res = np.full(K, np.nan)  # last bin's normalised cooling residual, per candidate
        self.scored = False
        start_dist = np.abs(self.lag.tau_s - START_TAU_S) + np.abs(self.lag.dead_s - START_DEAD_S)
        self.best = int(np.argmin(start_dist))
        self.scale_w = math.nan  # GPU power normaliser, fixed at the first learned window
        self.g_lo_w = math.nan  # GPU power range the IT model has learned from
        self.g_hi_w = math.nan
        self.wr_scale = math.nan
        self.warm = False
        self.last_g = np.array([math.nan, math.nan, math.nan])
        self.job_level = JobLevel(n_slots, self.bin_s)  # the running job's own IT level per stage

    @property
    def bias_it(self) -> float:
        """W: the recent IT residual level the next window's forecast adds."""
        return float(self.it_level.level[0])

    @property
    def bias_cool(self) -> np.ndarray:
        """W, per lag candidate: the recent cooling residual level the next window's forecast adds."""
        return self.cool_level.level

    @property
    def learned_lag(self) -> tuple[float, float]:
        """(time constant, dead time) of the cooling response, seconds."""
        return float(self.lag.tau_s[self.best]), float(self.lag.dead_s[self.best])

    @property
    def gpu_warm(self) -> bool:
        return bool(self.it.weight[0] >= WARMUP_H)

    def gpu_fresh_at(self, ts: float) -> bool:
        """Was GPU telemetry known within ``GPU_FRESH_S`` of ``ts`` (the end of the last bin seen)?"""
        return math.isfinite(ts) and ts - self.gpu_seen_ts <= GPU_FRESH_S + self.bin_s

    def cooling_ab(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The selected cooling fit's a(t) and b(t) at times ``t`` (normalised; with their daily cycle)."""
        cos_t, sin_t = daily_phase(t)
        th = self.cool.theta[self.best]
        return th[0] + th[2] * cos_t + th[3] * sin_t, th[1] + th[4] * cos_t + th[5] * sin_t

    def cooling_shares(self, frac: np.ndarray, hl_stage_w: np.ndarray, start: np.ndarray) -> np.ndarray:
        """Per bin and stage: the share of the cooling power its lagged heat caused (selected lag)."""
        a_t, b_t = self.cooling_ab(start + 0.5 * self.bin_s)
        scale = self.scale_w if math.isfinite(self.scale_w) else 1.0
        contrib = np.maximum(a_t[:, None] * frac + b_t[:, None] * hl_stage_w / scale, 0.0)
        tot = contrib.sum(axis=1, keepdims=True)
        out: np.ndarray = np.where(tot > 0, contrib / np.maximum(tot, 1e-12), frac)
        return out

    def predict(self, sums: np.ndarray, frac: np.ndarray, start: np.ndarray, jobs: list[str],
                window_warm: bool, gpu_level_w: np.ndarray, node_frac: np.ndarray) -> Prediction:
        """The frozen model's view of bins (sums, stage fractions, starts, jobs) of one window.

        ``window_warm``: the model was warm at the window's start (else the heat is the PDU's own);
        ``gpu_level_w``: per stage, the GPU power the baseline expects where no work rate is known;
        ``node_frac``: per stage, the share of node time in it as hints say (the stage-only IT model's
        regressors). Advances only the input-side state (lag filters, last GPU load, freshness, job
        scales)."""
        g = self._gpu_moments(sums)
        scale = self.scale_w if math.isfinite(self.scale_w) else 1.0
        gl = self.fan_lag.run(g[:, 0])
        it_gpu = it_predict(self.it.theta[0], g, gl, frac, scale, self.g_lo_w, self.g_hi_w)
        # the PDU power as its samples will see it (feed_load.py); the heat is the rack's own
        it_seen = it_gpu + feed_view_w(self.it.theta[0], feed_seen_dev(sums, g), scale)
        rates = self.job_rates.normalised(list(jobs), bin_work_rate(sums))
        Xs = stage_it_features(node_frac, *rates, rated_share(sums))
        it_stage = Xs @ self.it_stage.theta[0] * scale
        stage_warm = self.it_stage.weight[0] >= WARMUP_H
        use_gpu = self.gpu_warm & (self._gpu_fresh(sums, start) | ~stage_warm)
        it_pred = np.where(use_gpu, it_seen, it_stage)
        if window_warm:
            heat = np.where(use_gpu, it_gpu, it_stage)
        else:  # warm-up: heat from the PDU itself (no prediction is published yet)
            pdu_mean = np.where(
                sums[:, F["pdu_s"]] > 0, sums[:, F["pdu_ws"]] / np.maximum(sums[:, F["pdu_s"]], 1e-9), np.nan
            )
            heat = np.where(np.isfinite(pdu_mean), pdu_mean, np.nan_to_num(g[:, 0]))
        hl, hl_s = self.lag.run(heat, heat[:, None] * frac, self.best)
        cos_t, sin_t = daily_phase(start + 0.5 * self.bin_s)
        Xc = cooling_features(hl / scale, cos_t, sin_t)
        cool_pred = np.einsum("kni,ki->kn", Xc, self.cool.theta) * scale
        with np.errstate(invalid="ignore", divide="ignore"):
            transient = np.abs(hl[self.best] - heat) > TRANSIENT_FRAC * np.maximum(np.abs(heat), 1.0)
        gpu_exp = self._gpu_expected(sums, frac, gpu_level_w)
        return Prediction(it_pred, heat, hl, hl_s, cool_pred, gpu_exp, transient, gl)

    def _gpu_moments(self, sums: np.ndarray) -> np.ndarray:
        g = gpu_moments(sums)
        ok = sums[:, F["gpu_s"]] > 0
        if not ok.all():  # no GPU sample in a bin: hold the last known load
            last = self.last_g
            for i in range(g.shape[0]):
                if ok[i]:
                    last = g[i]
                else:
                    g[i] = last
        if ok.any():
            self.last_g = g[np.flatnonzero(ok)[-1]].copy()
        return np.asarray(np.nan_to_num(g))

    def _gpu_fresh(self, sums: np.ndarray, start: np.ndarray) -> np.ndarray:
        """Per bin: was GPU telemetry known within ``GPU_FRESH_S`` (in the bin or just before)?"""
        end = start + self.bin_s
        last = last_true_ts(end, sums[:, F["gpu_s"]] > 0, self.gpu_seen_ts)
        if last.size:
            self.gpu_seen_ts = float(last[-1])
        return np.asarray(end - last <= GPU_FRESH_S + self.bin_s)

    def _gpu_expected(self, sums: np.ndarray, frac: np.ndarray, gpu_level_w: np.ndarray) -> np.ndarray:
        """Per-stage GPU power the baseline expects for the work rate (load-side only)."""
        wr_known = sums[:, F["wr_s"]] > 0
        wr = np.nan_to_num(bin_work_rate(sums))
        wr_n = wr / self.wr_scale if math.isfinite(self.wr_scale) else np.zeros_like(wr)
        theta = self.gpu_model.theta  # (S, 2)
        per_slot = theta[None, :, 0] + theta[None, :, 1] * wr_n[:, None]  # (n, S)
        fitted = self.gpu_model.weight[None, :] > 0.05
        expect = np.where(fitted & wr_known[:, None], per_slot * max(self.scale_w, 1.0), gpu_level_w[None, :])
        out: np.ndarray = (frac * expect).sum(axis=1)
        return out

    def _halflife_h(self, component: str, relearn: frozenset[str], paced_h: dict[str, float]) -> float:
        usual_h = float(self.forgetting_halflife_h)  # re-learning: the drift monitor's pace, if any
        return min(paced_h.get(component, RELEARN_HALFLIFE_H), usual_h) if component in relearn else usual_h

    def learn(self, wb: WindowBuffer, window_warm: bool, relearn: frozenset[str],
              relearn_halflife_h: dict[str, float] | None = None,
              work_change: tuple[float, float, float] = (math.nan, math.nan, math.nan),
              faulted: frozenset[str] = frozenset()) -> None:
        """Let a closed window's measurements into the models (after its report line was written).

        ``window_warm``: the model was warm at the window's start (lag candidates are scored only then);
        ``relearn``: components the drift monitor re-learns, at ``relearn_halflife_h`` where it paces
        them, else ``RELEARN_HALFLIFE_H``; ``work_change``: the monitor's last new-work change point, the
        end of its bounded re-learn and the start of a job still being judged (``JobLevel``);
        ``faulted``: components with a confirmed fault (the job level does not learn it)."""
        c = ClosedWindow.of(wb)
        # each component's forgetting over this window (the same factor for its main and shadow fits)
        lam = {comp: 0.5 ** (c.length_h / self._halflife_h(comp, relearn, relearn_halflife_h or {}))
               for comp in LEARNED}
        if not math.isfinite(self.scale_w):
            # The power normaliser: the GPUs' peak when they are seen, else (a rack without GPU
            # telemetry) the PDUs'. It only scales the regressions, so either is fine once fixed.
            finite = c.gpu_mean[np.isfinite(c.gpu_mean)]
            if not finite.size or finite.max() <= 0:
                finite = c.pdu_mean[np.isfinite(c.pdu_mean)]
            if not finite.size or finite.max() <= 0:
                return
            self.scale_w = float(finite.max())
        for comp in LEARNED:  # a hold begins: its shadow starts from the model as it is
            if wb.held[: c.n, LEARNED.index(comp)].any():
                self.shadow.start(comp)
        # what the window's IT prediction added for the running job's own level (JobLevel)
        level_w = self.job_level_w(wb, slice(0, c.n), work_change)
        self._learn_it(wb, c, lam, level_w)
        resid_w = np.nan_to_num(c.pdu_mean) - wb.it_pred_w[: c.n]
        self.job_level.learn(wb.start[: c.n], c.frac, c.dur, c.it_ok, resid_w, work_change,
                             c.sums[:, F["gpu_s"]] > 0, learn="it" not in faulted)
        self._learn_cooling(wb, c, window_warm, lam)
        self._learn_gpu(wb, c, lam)
        self._learn_shadows(wb, c, lam, level_w)
        for comp in LEARNED:  # a hold that is over by the window's last bin: adopt or discard its shadow
            if not wb.held[c.n - 1, LEARNED.index(comp)]:
                self.shadow.end(comp)
        # a rack whose cooling-unit power never arrives (no column, or always empty) warms up on IT alone
        has_cooling = float(self.cool.weight.max()) > 0
        cool_ready = float(self.cool.weight.min()) >= WARMUP_H or not has_cooling
        it_ready = max(float(self.it.weight[0]), float(self.it_stage.weight[0])) >= WARMUP_H
        if not self.warm and it_ready and cool_ready:
            self.warm = True

    def job_level_w(self, wb: WindowBuffer, sl: slice, change: tuple[float, float, float]) -> np.ndarray:
        """Per bin of ``wb[sl]``: what the running job's own level adds to its IT prediction
        (``JobLevel.per_bin_w``, for the bins with GPU power); one rule for the prediction the
        report line carries, the drift detectors' expectation and learning."""
        sums = wb.sums[sl]
        frac = wb.stage_s[sl] / np.maximum(sums[:, F["dur_s"]], 1e-9)[:, None]
        return self.job_level.per_bin_w(wb.start[sl], frac, change, sums[:, F["gpu_s"]] > 0)

    def _learn_it(self, wb: WindowBuffer, c: ClosedWindow, lam: dict[str, float],
                  level_w: np.ndarray) -> None:
        """The IT residual level and learned GPU range (main model only), then the IT regressions."""
        n, sums, dur, seen_it, g = c.n, c.sums, c.dur, c.it_ok, c.g
        rows = c.gpu_ok & seen_it & ~wb.held[:n, HELD_IT]
        # Without GPU power in a bin, the IT residual is mostly the running job's own level, which the
        # last window measured best: its memory is one window instead of the GPU model's hour.
        memory_s = np.where(sums[:, F["gpu_s"]] > 0, np.nan, self.window_s)
        resid = (np.nan_to_num(c.pdu_mean) - wb.it_pred_w[:n] - level_w)[:, None]
        self.it_level.update(resid, seen_it, dur, c.length_h, score=self.warm, memory_s=memory_s)
        if rows.any():
            lo = float(min(g[rows, 0].min(), wb.gpu_lag_w[:n][rows].min()))
            hi = float(max(g[rows, 0].max(), wb.gpu_lag_w[:n][rows].max()))
            self.g_lo_w = lo if not math.isfinite(self.g_lo_w) else min(self.g_lo_w, lo)
            self.g_hi_w = hi if not math.isfinite(self.g_hi_w) else max(self.g_hi_w, hi)
        self._fit_it(wb, c, lam, wb.held[:n, HELD_IT], self.it, self.it_stage, level_w)

    def _fit_it(self, wb: WindowBuffer, c: ClosedWindow, lam: dict[str, float], held: np.ndarray,
                it: EWLS, it_stage: EWLS, level_w: np.ndarray) -> None:
        """The IT regressions ``it`` (GPU-driven) and ``it_stage`` learn the bins not ``held``: the
        PDU power less the running job's own level (``level_w``, W per bin: ``JobLevel``), so that
        they stay the rack's usual and a job's level is not counted twice once they learned it."""
        n, scale, sums, frac, w_h, seen_it, g = c.n, self.scale_w, c.sums, c.frac, c.w_h, c.it_ok, c.g
        rows = c.gpu_ok & seen_it & ~held
        X = it_features(g[:, 0], g[:, 1], g[:, 2], wb.gpu_lag_w[:n], frac, scale, c.seen_dev)
        pdu = np.nan_to_num(c.pdu_mean) - level_w
        y = np.where(rows, pdu / scale, 0.0)
        lam_it = lam["it"]
        if rows.any():  # no data (held, or PDU unknown): no forgetting either
            it.update(X[None], y[None], (w_h * rows)[None], lam_it)
        # the stage-only IT model learns from every bin whose PDU power is known, GPU telemetry or not
        rows_s = seen_it & ~held
        if rows_s.any():
            rates = self.job_rates.normalised(wb.jobs[:n], bin_work_rate(sums), learn=False)  # read again
            Xs = stage_it_features(wb.node_frac[:n], *rates, rated_share(sums))
            ys = np.where(rows_s, pdu / scale, 0.0)
            it_stage.update(Xs[None], ys[None], (w_h * rows_s)[None], lam_it)

    def _learn_cooling(self, wb: WindowBuffer, c: ClosedWindow, warm: bool, lam: dict[str, float]) -> None:
        """Score every lag candidate on its frozen predictions, then update all."""
        n, scale, dur, w_h = c.n, self.scale_w, c.dur, c.w_h
        rows_c = c.cool_ok & ~wb.held[:n, HELD_COOLING]
        y_c = np.where(rows_c, np.nan_to_num(c.cool_mean) / scale, 0.0)
        w_c = w_h * rows_c
        # Candidates are scored only once the models have learned for a while (warm): the first hours'
        # errors say how fast each candidate's fit converged, not which lag is right.
        if w_c.sum() > 0 and warm:
            # Score the changes of the residual between consecutive bins (the previous window's last
            # one carried): slow disturbances cancel out, what is left is how well (τ, d) follow heat.
            res = np.concatenate([self.last_res[:, None], wb.cool_pred_w[:n].T / scale - y_c[None]], axis=1)
            ok = np.concatenate([[bool(np.isfinite(self.last_res).all())], rows_c])
            pair = ok[1:] & ok[:-1]
            d = np.where(pair[None], res[:, 1:] - res[:, :-1], 0.0)
            err = (d**2).sum(axis=1) / max(int(pair.sum()), 1)
            self.score = prequential_score(self.score, err, c.length_h, first=not self.scored)
            self.scored = True
        # The residual level follows the data even while the model is held: it is the short-term state
        # of disturbances no regressor sees (other racks on the unit); the detectors judge theta.
        unknown = np.full_like(self.last_res, np.nan)
        self.last_res = wb.cool_pred_w[n - 1] / scale - y_c[n - 1] if n and rows_c[-1] else unknown
        resid = np.nan_to_num(c.cool_mean)[:, None] - wb.cool_pred_w[:n]
        self.cool_level.update(resid, c.cool_ok, dur, c.length_h, score=warm)
        self._fit_cooling(wb, c, lam, wb.held[:n, HELD_COOLING], self.cool)
        if self.scored:
            self.best = int(np.argmin(self.score))

    def _fit_cooling(self, wb: WindowBuffer, c: ClosedWindow, lam: dict[str, float], held: np.ndarray,
                     cool: EWLS) -> None:
        """Every lag candidate's cooling regression ``cool`` learns the bins not ``held``."""
        n, scale, w_h = c.n, self.scale_w, c.w_h
        rows_c = c.cool_ok & ~held
        y_c = np.where(rows_c, np.nan_to_num(c.cool_mean) / scale, 0.0)
        w_c = w_h * rows_c
        cos_t, sin_t = daily_phase(wb.start[:n] + 0.5 * self.bin_s)
        Xc = cooling_features(wb.hl_w[:n].T / scale, cos_t, sin_t)
        if w_c.sum() > 0:
            K = Xc.shape[0]
            cool.update(Xc, np.broadcast_to(y_c, (K, n)), np.broadcast_to(w_c, (K, n)), lam["cooling"])

    def _learn_shadows(self, wb: WindowBuffer, c: ClosedWindow, lam: dict[str, float],
                       level_w: np.ndarray) -> None:
        """Shadows of held components learn every bin of the window, held or not (shadow.py)."""
        free = np.zeros(c.n, dtype=bool)
        it = self.shadow.learning("it")
        if it is not None:
            self._fit_it(wb, c, lam, free, it[0], it[1], level_w)
        cool = self.shadow.learning("cooling")
        if cool is not None:
            self._fit_cooling(wb, c, lam, free, cool[0])
        gpu = self.shadow.learning("gpu")
        if gpu is not None and math.isfinite(self.wr_scale):
            self._fit_gpu(wb, c, lam, free, gpu[0])

    def _learn_gpu(self, wb: WindowBuffer, c: ClosedWindow, lam: dict[str, float]) -> None:
        """GPU power per stage against work rate (for the gpu_hardware drift channel)."""
        if not math.isfinite(self.wr_scale) and c.wr_ok.any() and np.nanmax(c.wr[c.wr_ok]) > 0:
            self.wr_scale = float(np.nanmax(c.wr[c.wr_ok]))
        if math.isfinite(self.wr_scale):
            self._fit_gpu(wb, c, lam, wb.held[: c.n, HELD_GPU], self.gpu_model)

    def _fit_gpu(self, wb: WindowBuffer, c: ClosedWindow, lam: dict[str, float], held: np.ndarray,
                 model: EWLS) -> None:
        """The GPU-per-work regression ``model`` learns the pure-stage bins not ``held``."""
        n, frac, w_h, wr, wr_ok = c.n, c.frac, c.w_h, c.wr, c.wr_ok
        dom = np.argmax(frac, axis=1)
        pure = frac[np.arange(n), dom] >= 0.9
        use = wr_ok & c.gpu_ok & pure & ~held
        S = model.theta.shape[0]
        Xg = np.stack([np.ones(n), np.where(use, wr, 0.0) / self.wr_scale], axis=1)
        Wg = (np.arange(S)[:, None] == dom[None, :]) * (w_h * use)[None, :]
        yg = np.where(use, np.nan_to_num(c.gpu_mean), 0.0) / self.scale_w
        lam_slots = np.where(Wg.sum(axis=1) > 0, lam["gpu"], 1.0)  # only slots seen in this window forget
        if use.any():
            model.update(np.broadcast_to(Xg, (S, n, 2)), np.broadcast_to(yg, (S, n)), Wg, lam_slots)

    def state_arrays(self) -> dict[str, np.ndarray]:
        """Every piece of the model as named fixed-shape arrays (``load_arrays`` reads them back)."""
        out = {
            "model_scalars": np.array([self.scale_w, self.wr_scale, float(self.warm), float(self.best),
                                       float(self.scored), self.g_lo_w, self.g_hi_w,
                                       _never_nan(self.gpu_seen_ts), self.bias_it, self.fan_lag.y]),
            "last_g": self.last_g, "score": self.score, "last_res": self.last_res,
        }
        out.update(self.cool_level.state_arrays("cool"))
        out.update(self.it_level.state_arrays("it"))
        out.update(self.lag.state_arrays())
        out.update(self.it.state_arrays("it"))
        out.update(self.cool.state_arrays("cool"))
        out.update(self.gpu_model.state_arrays("gpum"))
        out.update(self.it_stage.state_arrays("itstage"))
        out.update(self.shadow.state_arrays())
        out.update(self.job_level.state_arrays())
        return out

    def load_arrays(self, a: dict[str, np.ndarray]) -> None:
        """The inverse of ``state_arrays``; raises ValueError/KeyError on a shape that does not fit.
        Ranges are checked by the caller (``persist``) before the values are used."""
        p = self.it_stage.theta.shape[1]
        a = _with_rate_curve(_with_rate_curve(a, "itstage", p), "shadow_it1", p)  # the model, its shadow
        s = a["model_scalars"]
        self.scale_w, self.wr_scale, self.warm = float(s[0]), float(s[1]), bool(s[2])
        self.best, self.scored = int(s[3]), bool(s[4])
        self.g_lo_w, self.g_hi_w = float(s[5]), float(s[6])
        self.gpu_seen_ts = float(s[7]) if math.isfinite(s[7]) else -math.inf  # NaN: no GPU sample yet
        self.fan_lag.y = float(s[9])  # (s[8]: the IT level in use, saved for states before the bank)
        self.it_level.load_arrays("it", a, before_bank=s[8:9])
        for key in ("last_g", "score", "last_res"):
            getattr(self, key)[...] = a[key]
        self.cool_level.load_arrays("cool", a, before_bank=a.get("bias_cool"))
        self.lag.load_arrays(a)
        self.it.load_arrays("it", a)
        self.cool.load_arrays("cool", a)
        self.gpu_model.load_arrays("gpum", a)
        if "itstage_theta" in a:  # state saved before the stage-only IT model: it starts fresh
            self.it_stage.load_arrays("itstage", a)
        self.shadow.load_arrays(a)
        self.job_level.load_arrays(a)

    def restart_inputs(self) -> None:
        """After a discontinuity: the lag filters and the held GPU load restart from the next bins."""
        self.lag.started = False
        self.fan_lag.y = math.nan
        self.last_g[:] = math.nan


class JobLevel:
    """The running job's own IT level per stage, over what the IT model (the rack's usual) predicts.

    A job sets its nodes' CPU, storage and network load in each stage (two jobs' training levels
    differ by up to ~10 % of the rack's IT power on a churning rack), not how PDU power follows GPU
    power. So the IT model learns every job at its usual pace from the PDU power less the job's level,
    and each new job's own offset per stage is measured here: the mean of the model's residual in that
    stage over the job's own bins.

    - It starts from nothing at each new-work change point and learns during that change's bounded
      re-learn, then stays as learned for the rest of the job, so a later fault is not learned as the
      job's level. A restart of the same work keeps the level of the run before.
    - The prior: one engine bin at the rack's usual level (a bin's PDU noise, ≈ 1 %, is far below the
      spread between jobs); it only keeps a stage the job has not run at the rack's.
    - It learns while a component is suspected, not while the IT side carries a confirmed fault.

    Fixed memory: two floats per stage slot and the change point's time."""

    def __init__(self, n_slots: int, bin_s: float) -> None:
        self.prior_s = bin_s
        self.sum_ws = np.zeros(n_slots)  # W·s: residual × stage time, this job
        self.seen_s = np.zeros(n_slots)  # s: stage time with a known PDU power, this job
        self.since_ts = math.nan  # the change point the sums start at

    @property
    def level_w(self) -> np.ndarray:
        """Per stage slot: the job's own level over the IT model's, W (0 where not seen yet)."""
        out: np.ndarray = self.sum_ws / (self.seen_s + self.prior_s)
        return out

    def per_bin_w(self, start: np.ndarray, frac: np.ndarray,
                  change: tuple[float, float, float], gpu_bins: np.ndarray | None = None) -> np.ndarray:
        """Per bin: the level its prediction adds, W. ``change``: (new-work change point, end of its
        re-learn, start of a job still being judged). Bins after a change point the level was not learned
        since get the rack's usual level (0). Only ``gpu_bins`` (bins with GPU power; None: every bin) get
        a level: without GPU power the IT residual's one-window memory already is the job's level, and two
        estimators of one offset would chase each other."""
        out: np.ndarray = frac @ self.level_w
        if gpu_bins is not None:
            out = np.where(gpu_bins, out, 0.0)
        cuts = [t for t in (change[0], change[2]) if math.isfinite(t) and t != self.since_ts]
        if cuts:
            out = np.where(start >= min(cuts), 0.0, out)
        return out

    def learn(self, start: np.ndarray, frac: np.ndarray, dur: np.ndarray, seen: np.ndarray,
              resid_w: np.ndarray, change: tuple[float, float, float],
              gpu_bins: np.ndarray | None = None, learn: bool = True) -> None:
        """A closed window's bins (starts, stage shares, durations, PDU known, model residual W);
        ``change``, ``gpu_bins``: as ``per_bin_w``'s."""
        changed_ts, until_ts = change[0], change[1]
        use = seen & (start < until_ts) & (True if gpu_bins is None else gpu_bins)
        if math.isfinite(changed_ts) and changed_ts != self.since_ts:  # a new job: its bins only
            self.sum_ws[:] = 0.0
            self.seen_s[:] = 0.0
            self.since_ts = changed_ts
            use &= start >= changed_ts
        if not learn or not use.any() or math.isnan(self.since_ts):  # no change point yet: the model's
            return  # own job (a level summed from its warm-up on would keep the warm-up's errors)
        w = frac * (dur * use)[:, None]
        self.sum_ws += (w * np.where(use, resid_w, 0.0)[:, None]).sum(axis=0)
        self.seen_s += w.sum(axis=0)

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {"job_level_sum": self.sum_ws, "job_level_seen": self.seen_s,
                "job_level_since": np.array([self.since_ts])}

    def load_arrays(self, a: dict[str, np.ndarray]) -> None:
        """The inverse of ``state_arrays``; a state saved before it starts with no job level."""
        if "job_level_sum" not in a:
            return
        for key, arr in (("job_level_sum", self.sum_ws), ("job_level_seen", self.seen_s)):
            if a[key].shape != arr.shape:
                raise ValueError(f"state '{key}': shape {a[key].shape}, expected {arr.shape}")
            arr[...] = a[key]
        self.since_ts = float(a["job_level_since"][0])


def rated_share(sums: np.ndarray) -> np.ndarray:
    """Per bin: the share of its time with a reported work rate."""
    out: np.ndarray = np.clip(sums[:, F["wr_s"]] / np.maximum(sums[:, F["dur_s"]], 1e-9), 0.0, 1.0)
    return out


def _with_rate_curve(a: dict[str, np.ndarray], prefix: str, p: int) -> dict[str, np.ndarray]:
    """A stage-only IT regression's saved arrays (``prefix``) widened to ``p`` regressors: a state
    saved before the rate curve (``response.RATE_KNOTS``) keeps its levels and slopes, and the curve
    starts from nothing."""
    theta = a.get(f"{prefix}_theta")
    if theta is None or theta.ndim != 2 or theta.shape[1] >= p:
        return a
    k = p - theta.shape[1]
    out = dict(a)
    out[f"{prefix}_theta"] = np.pad(theta, ((0, 0), (0, k)))
    out[f"{prefix}_r"] = np.pad(a[f"{prefix}_r"], ((0, 0), (0, k)))
    out[f"{prefix}_R"] = np.pad(a[f"{prefix}_R"], ((0, 0), (0, k), (0, k)))
    return out


def _never_nan(ts: float) -> float:
    """A "never" time (-inf) saved as NaN, which the state's range check reads as unknown."""
    return ts if math.isfinite(ts) else math.nan
