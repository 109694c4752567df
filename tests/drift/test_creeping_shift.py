"""A shift that creeps in below the alarm size is judged on all it moved, not cut into pieces.

A suspicion that never reaches the channel's minimum effect lapses after ``max_suspect_s`` and its
level becomes the normal. A slow ramp (GPU ageing over half a day) used to be adopted that way in
sub-threshold slices, one per lapse, and never alarmed. The channel now remembers what lapses
adopted (``absorbed``, fading at the level's own half-life), so the next suspicion the same way is
judged on the sum; a move back the other way, or a known change point, forgets it.
"""

from __future__ import annotations

import math

import numpy as np

from agent.engine.drift.channel import ACTIVE, GRACE, ResidualChannel, params_for

BIN_S = 60.0
H = 6.5  # a CUSUM threshold of the order the monitor derives from its false-alarm target


def feed(channel: ResidualChannel, rng: np.random.Generator, t: float, hours: float, level: float,
         noise: float = 0.3) -> tuple[float, list[str]]:
    """``hours`` of one-minute GPU residuals at ``level`` (%) plus white noise; the transitions seen."""
    kinds: list[str] = []
    for _ in range(int(hours * 3600 / BIN_S)):
        t += BIN_S
        tr = channel.add(level + noise * float(rng.standard_normal()), 0, t)
        if tr is not None:
            kinds.append(tr.kind)
    return t, kinds


def settled_channel(seed: int) -> tuple[ResidualChannel, np.random.Generator, float]:
    channel = ResidualChannel("gpu", params_for("gpu", H, BIN_S, 1))
    rng = np.random.default_rng(seed)
    t, _ = feed(channel, rng, 1.7e9, 24.0, 0.0)
    return channel, rng, t


def test_two_sub_threshold_pieces_the_same_way_confirm_on_their_sum() -> None:
    channel, rng, t = settled_channel(1)
    min_effect = channel.params.min_effect
    piece = 0.7 * min_effect  # each alone too small to alarm
    t, kinds = feed(channel, rng, t, 4.0, piece)
    assert "onset" not in kinds and channel.mode == GRACE  # lapsed: adopted as the normal
    assert channel.absorbed > 0.5 * piece
    t, kinds = feed(channel, rng, t, 4.0, 2 * piece)  # the creep goes on the same way
    assert "onset" in kinds and channel.mode == ACTIVE
    assert channel.onset_dev >= min_effect  # judged on the sum, not the last piece


def test_a_move_back_the_other_way_is_not_added() -> None:
    channel, rng, t = settled_channel(2)
    piece = 0.7 * channel.params.min_effect
    t, _ = feed(channel, rng, t, 4.0, piece)
    t, kinds = feed(channel, rng, t, 4.0, 0.0)  # back where it was: the weather, not a fault
    assert "onset" not in kinds and channel.absorbed <= 0.0


def test_a_known_change_point_forgets_what_lapses_adopted() -> None:
    channel, rng, t = settled_channel(3)
    t, _ = feed(channel, rng, t, 4.0, 0.7 * channel.params.min_effect)
    assert channel.absorbed > 0
    channel.start_grace(t + 600.0)  # a new job: its level is new work, not a creep
    assert channel.absorbed == 0.0


def test_what_lapses_adopted_fades_at_the_level_half_life_and_survives_a_restart() -> None:
    channel, rng, t = settled_channel(4)
    piece = 0.7 * channel.params.min_effect
    t, _ = feed(channel, rng, t, 4.0, piece)
    before = channel.absorbed
    copy = ResidualChannel("gpu", channel.params)
    copy.restore(channel.state())
    assert copy.absorbed == before
    level_halflife_h = channel.params.loc_halflife_bins * BIN_S / 3600.0
    t, kinds = feed(channel, rng, t, level_halflife_h, piece)  # the new normal holds for a day
    assert "onset" not in kinds and channel.mode != GRACE  # no new lapse: it only fades
    assert math.isclose(channel.absorbed, before / 2.0, rel_tol=0.05)


def test_a_state_saved_before_lapses_were_remembered_loads_with_none_absorbed() -> None:
    channel, _, _ = settled_channel(5)
    old = channel.state()
    del old["absorbed"]
    copy = ResidualChannel("gpu", channel.params)
    copy.restore(old)
    assert copy.absorbed == 0.0
