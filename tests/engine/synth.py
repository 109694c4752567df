"""A cheap synthetic rack for engine tests: stages, PSU curve, lagged cooling, a daily COP cycle.

Deliberately not the twin (agent/sim): different numbers, GPU count, device ids and sampling
rates, so tests do not lean on one simulator's quirks. Deterministic for a seed.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Iterator

import numpy as np

from agent.trace.model import TraceChunk, TraceMeta

STAGE_W = {
    "idle": 70.0,
    "data_load": 180.0,
    "forward_backward": 650.0,
    "grad_sync": 380.0,
    "checkpoint": 150.0,
    "eval": 500.0,
}
CYCLE = (
    ("data_load", 40),
    ("forward_backward", 300),
    ("grad_sync", 60),
    ("forward_backward", 300),
    ("eval", 120),
    ("checkpoint", 90),
    ("idle", 200),
)
T0 = 1_750_000_000.0


def meta() -> TraceMeta:
    return TraceMeta(rack="rt", site="st", crac_shares={"c1": 0.3}, interval_s=2.0)


def chunks(
    days: float,
    seed: int = 1,
    row_s: float = 2.0,
    n_gpu: int = 4,
    chunk_rows: int = 20000,
    pdu_every: int = 3,
    crac_every: int = 5,
    hints: bool = True,
    light_until_h: float = 0.0,
    cycle: tuple[tuple[str, int], ...] = CYCLE,
) -> list[TraceChunk]:
    """The whole trace as a list of chunks (fine for the short traces tests use)."""
    return list(
        iter_chunks(days, seed, row_s, n_gpu, chunk_rows, pdu_every, crac_every, hints, light_until_h, cycle)
    )


def iter_chunks(
    days: float,
    seed: int = 1,
    row_s: float = 2.0,
    n_gpu: int = 4,
    chunk_rows: int = 20000,
    pdu_every: int = 3,
    crac_every: int = 5,
    hints: bool = True,
    light_until_h: float = 0.0,
    cycle: tuple[tuple[str, int], ...] = CYCLE,
) -> Iterator[TraceChunk]:
    rng = np.random.default_rng(seed)
    n = int(days * 86400 / row_s)
    cycle_s = sum(d for _, d in cycle)
    names = np.array([s for s, _ in cycle], dtype=object)
    edges = np.cumsum([d for _, d in cycle])
    heat_lag = math.nan
    removed = math.nan
    a = math.exp(-row_s / 200.0)
    for c0 in range(0, n, chunk_rows):
        idx = np.arange(c0, min(n, c0 + chunk_rows))
        ts = T0 + idx * row_s
        pos = (idx * row_s) % cycle_s
        stage = names[np.searchsorted(edges, pos, side="right")]
        level = np.array([STAGE_W[s] for s in stage])
        light = idx * row_s < light_until_h * 3600.0  # a light job first: GPUs at ≤ 250 W
        level = np.where(light, np.minimum(level, 250.0), level)
        gpu = level[:, None] * (1 + 0.02 * rng.standard_normal((idx.size, n_gpu)))
        g_tot = gpu.sum(axis=1)
        base = 600.0 + 150.0 * np.isin(stage, ["data_load", "checkpoint"])
        dc = g_tot + base
        load = dc / 6000.0
        eff = 0.96 - 0.12 * (load - 0.5) ** 2
        pdu_w = dc / eff
        heat = np.empty(idx.size)
        rem = np.empty(idx.size)
        for i in range(idx.size):  # first-order lags (slow, but only in the generator)
            heat_lag = pdu_w[i] if math.isnan(heat_lag) else heat_lag
            removed = pdu_w[i] if math.isnan(removed) else a * removed + (1 - a) * heat_lag
            heat_lag = pdu_w[i]
            rem[i] = removed
            heat[i] = heat_lag
        hour = (ts % 86400.0) / 3600.0
        cop = 3.5 - 0.6 * np.cos(2 * math.pi * (hour - 15.0) / 24.0)
        crac_w = (rem + 30000.0) / cop + 800.0
        numeric: dict[str, np.ndarray] = {"work_rate": np.where(level > 300, level * 2.0, 0.0)}
        for g in range(n_gpu):
            numeric[f"gpu.{g}.power_w"] = np.round(gpu[:, g], 1)
        pdu_a = np.full(idx.size, np.nan)
        pdu_b = np.full(idx.size, np.nan)
        m_a = idx % pdu_every == 0
        m_b = idx % pdu_every == 1 % pdu_every
        pdu_a[m_a] = np.round(pdu_w[m_a] * 0.5 + rng.normal(0, 5, m_a.sum()))
        pdu_b[m_b] = np.round(pdu_w[m_b] * 0.5 + rng.normal(0, 5, m_b.sum()))
        numeric["pdu.feed_a.power_w"] = pdu_a
        numeric["pdu.feed_b.power_w"] = pdu_b
        crac = np.full(idx.size, np.nan)
        m_c = idx % crac_every == 2 % crac_every
        crac[m_c] = np.round(crac_w[m_c], -1)
        numeric["crac.c1.power_w"] = crac
        labels = stage if hints else np.full(idx.size, "", dtype=object)
        yield TraceChunk(
            ts=ts.astype(float),
            numeric=numeric,
            stage=labels.astype(object),
            job=np.full(idx.size, "j1" if hints else "", dtype=object),
        )


def rechunk(chunks_in: list[TraceChunk], size: int) -> list[TraceChunk]:
    """The same rows in chunks of ``size`` rows (to compare live-sized and replay-sized feeding)."""
    out: list[TraceChunk] = []
    for c in chunks_in:
        for a in range(0, len(c), size):
            b = min(len(c), a + size)
            out.append(
                TraceChunk(
                    ts=c.ts[a:b],
                    numeric={k: v[a:b] for k, v in c.numeric.items()},
                    stage=c.stage[a:b],
                    job=c.job[a:b],
                )
            )
    return out


def scale_facility_inside(
    chunks_in: list[TraceChunk], t_from: float, t_to: float, factor: float
) -> list[TraceChunk]:
    """The same rows with every PDU and cooling-unit sample in [t_from, t_to) scaled by ``factor``
    (what the causality tests perturb: no such sample may move its own window's prediction)."""
    out = copy.deepcopy(chunks_in)
    for c in out:
        inside = (c.ts >= t_from) & (c.ts < t_to)
        for name, col in c.numeric.items():
            if name.startswith(("pdu.", "crac.")):
                col[inside] = col[inside] * factor
    return out
