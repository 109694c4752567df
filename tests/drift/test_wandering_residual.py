"""A residual that wanders slowly (a weather-blind cooling unit) still confirms a large step in time.

Where a residual wanders over hours, a block's mean is noisier than its bins say: the channel learns
that (its block noise, several bin σ) and divides by it. Bins were clipped at ``Z_CLIP`` bin σ
before that division, so every block's z was capped at ``Z_CLIP`` over the block noise (about 1.3 σ
at 4.5): the CUSUM then needed about an hour, as long as the suspicion may last, and a 25 % COP step
lapsed into the normal (development churn seed 19). Bins are now clipped in units of the block
noise, so a step many block σ large confirms once its evidence spans the minimum.
"""

from __future__ import annotations

import numpy as np

from agent.engine.drift import tuning as T
from agent.engine.drift.channel import ACTIVE, ResidualChannel, params_for

BIN_S = 60.0
H = 6.6  # a CUSUM threshold of the order the monitor derives from its false-alarm target


def blocks_noisier_than_bins(channel: ResidualChannel, rng: np.random.Generator) -> None:
    """Teach the channel's block noise what slow wander taught it on the twin: 2.25 bin σ per block,
    lag-1 correlation at the cap (the figures of development churn seed 19's cooling channel)."""
    z = 0.0
    for _ in range(2000):
        z = 0.8 * z + 2.25 * 0.6 * float(rng.standard_normal())
        channel.noise.update(z)


def warmed_blind_cooling(seed: int) -> tuple[ResidualChannel, np.random.Generator, float]:
    channel = ResidualChannel("cooling", params_for("cooling", H, BIN_S, 1, drivers_measured=False))
    rng = np.random.default_rng(seed)
    t = 1.7e9
    for _ in range(int(30 * 3600 / BIN_S)):
        t += BIN_S
        channel.add(float(rng.standard_normal()), 0, t)
    blocks_noisier_than_bins(channel, rng)
    return channel, rng, t


def test_the_block_noise_is_several_bin_sigma() -> None:
    channel, _, _ = warmed_blind_cooling(3)
    assert channel.block_noise > 3.0


def test_a_step_many_block_sigma_large_confirms_once_its_evidence_spans_the_minimum() -> None:
    for seed in (3, 4, 5):
        channel, rng, t = warmed_blind_cooling(seed)
        start = t
        kinds: list[str] = []
        step = 4.0 * T.Z_CLIP * (channel.levels.scale(0) or 1.0)  # far beyond the old bin clip
        while t - start < 2 * T.BLIND_COOLING_MAX_SUSPECT_S and channel.mode != ACTIVE:
            t += BIN_S
            tr = channel.add(step + float(rng.standard_normal()), 0, t)
            if tr is not None:
                kinds.append(tr.kind)
        assert channel.mode == ACTIVE, (seed, kinds)
        assert "release" not in kinds
        # Over five block σ per block: the CUSUM passes h within a few blocks, so the wait is the
        # minimum evidence span (with the old clip, 1.3 σ per block, about an hour).
        assert t - start <= T.MIN_EVIDENCE_S + 2 * T.BLOCK_S
