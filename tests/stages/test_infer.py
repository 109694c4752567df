"""Stage inference: works with no labels, learns from labels, hysteresis, fixed memory, state."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from agent.stages.infer import MAX_STAGES, SLOW_ENTRY_S, StageInferrer
from agent.stages.steps import SWING_ROWS, StepWatch
from agent.trace.model import TraceChunk

T0 = 1_717_200_000.0
# per-stage (GPU power W, util %, mem util %, node extra W) of a synthetic 8-GPU node
LEVELS = {
    "idle": (65.0, 0.0, 0.0, 0.0),
    "data_load": (120.0, 12.0, 8.0, 700.0),
    "forward_backward": (665.0, 98.0, 45.0, 350.0),
    "grad_sync": (350.0, 55.0, 30.0, 450.0),
    "checkpoint": (105.0, 6.0, 15.0, 550.0),
    "eval": (505.0, 82.0, 35.0, 300.0),
}


def synthetic(
    stages: list[tuple[str, int]],
    t0: float = T0,
    seed: int = 0,
    gpus: int = 8,
    levels: dict[str, tuple[float, float, float, float]] | None = None,
) -> TraceChunk:
    """A chunk with 1-s GPU rows and a PDU every 5 s, following the (stage, seconds) plan."""
    levels = levels or LEVELS
    rng = np.random.default_rng(seed)
    names = [s for s, n in stages for _ in range(n)]
    n = len(names)
    ts = t0 + np.arange(n, dtype=float)
    lv = np.array([levels[s] for s in names])
    numeric: dict[str, np.ndarray] = {}
    gpu_sum = np.zeros(n)
    for i in range(gpus):
        p = lv[:, 0] * (1 + 0.02 * rng.standard_normal(n))
        gpu_sum += p
        numeric[f"gpu.{i}.power_w"] = p
        numeric[f"gpu.{i}.util_pct"] = np.clip(np.round(lv[:, 1] + 2 * rng.standard_normal(n)), 0, 100)
        numeric[f"gpu.{i}.mem_util_pct"] = np.clip(np.round(lv[:, 2] + 2 * rng.standard_normal(n)), 0, 100)
    pdu = (gpu_sum + 1000 + lv[:, 3]) / 0.94
    numeric["pdu.a.power_w"] = np.where(np.arange(n) % 5 == 0, pdu, np.nan)
    return TraceChunk(
        ts=ts, numeric=numeric, stage=np.array(names, dtype=object), job=np.full(n, "", dtype=object)
    )


def blank(n: int) -> np.ndarray:
    return np.full(n, "", dtype=object)


def unlabelled(chunk: TraceChunk) -> TraceChunk:
    return dataclasses.replace(chunk, stage=blank(len(chunk)))


def split(chunk: TraceChunk, sizes: list[int]) -> list[TraceChunk]:
    out, i = [], 0
    for k in sizes:
        j = min(len(chunk), i + k)
        out.append(
            dataclasses.replace(
                chunk,
                ts=chunk.ts[i:j],
                numeric={c: v[i:j] for c, v in chunk.numeric.items()},
                stage=chunk.stage[i:j],
                job=chunk.job[i:j],
            )
        )
        i = j
    if i < len(chunk):
        out += split(
            dataclasses.replace(
                chunk,
                ts=chunk.ts[i:],
                numeric={c: v[i:] for c, v in chunk.numeric.items()},
                stage=chunk.stage[i:],
                job=chunk.job[i:],
            ),
            [len(chunk)],
        )
    return out


def training(steps: int) -> list[tuple[str, int]]:
    return [p for _ in range(steps) for p in (("forward_backward", 7), ("grad_sync", 2))]


PLAN = [
    ("idle", 300),
    ("data_load", 120),
    *training(30),
    ("checkpoint", 180),
    *training(20),
    ("eval", 240),
    ("data_load", 40),
    *training(20),
    ("idle", 120),
]


def accuracy(got: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean(got == truth))


def test_infers_every_stage_with_no_label_ever_seen() -> None:
    chunk = synthetic(PLAN)
    got, inferred = StageInferrer().infer_chunk(unlabelled(chunk), blank(len(chunk)))
    assert inferred.all()
    assert accuracy(got, chunk.stage) >= 0.95
    for stage in LEVELS:
        mask = chunk.stage == stage
        assert accuracy(got[mask], chunk.stage[mask]) >= 0.8, stage


def test_hinted_rows_win_and_unhinted_are_inferred() -> None:
    chunk = synthetic(PLAN)
    hints = blank(len(chunk))
    hints[:100] = "custom_warmup"
    got, inferred = StageInferrer().infer_chunk(chunk, hints)
    assert (got[:100] == "custom_warmup").all() and not inferred[:100].any()
    assert inferred[100:].all()


def test_levels_learned_from_hints_are_used_later() -> None:
    # a job whose forward_backward draws what the prior's eval draws, and a custom stage (its
    # utilisation is a training step's: one held below that is no step, see test_infer_jobs)
    odd = dict(LEVELS, forward_backward=(500.0, 96.0, 36.0, 300.0), warmup=(300.0, 30.0, 60.0, 200.0))
    plan = [("idle", 120), ("warmup", 200), ("forward_backward", 600), ("checkpoint", 100)]
    taught = synthetic(plan, levels=odd, seed=1)
    later = synthetic(plan, levels=odd, seed=2, t0=T0 + 10_000)
    naive = StageInferrer().infer_chunk(unlabelled(later), blank(len(later)))[0]
    learner = StageInferrer()
    learner.infer_chunk(taught, taught.stage)
    got = learner.infer_chunk(unlabelled(later), blank(len(later)))[0]
    # levels are relative to the job's own training level, so the priors alone already place
    # this job's 500-W forward_backward; only the custom stage needs the labels
    fb = later.stage == "forward_backward"
    assert accuracy(naive[fb], later.stage[fb]) >= 0.9
    assert "warmup" not in set(naive.tolist())
    assert accuracy(got, later.stage) >= 0.95
    assert "warmup" in learner.stages


def _set_row(chunk: TraceChunk, row: int, power_w: float, util: float, mem: float) -> None:
    for col, values in chunk.numeric.items():
        if col.startswith("gpu.") and col.endswith(".power_w"):
            values[row] = power_w
        elif col.endswith(".mem_util_pct"):
            values[row] = mem
        elif col.endswith(".util_pct"):
            values[row] = util


# Levels are placed between the rack's idle floor and its training level, so a fresh inferrer is
# first shown both (the filter tests below look at the checkpoint after them).
SEEN = [("idle", 120), *training(10)]
SEEN_S = sum(n for _, n in SEEN)


def test_lone_borderline_rows_do_not_split_a_segment() -> None:
    chunk = synthetic([*SEEN, ("checkpoint", 120)])
    _set_row(chunk, SEEN_S + 40, 120.0, 12.0, 0.0)  # one row that looks like data_load
    _set_row(chunk, SEEN_S + 80, 68.0, 0.0, 0.0)  # one row that looks like idle
    got = StageInferrer().infer_chunk(unlabelled(chunk), blank(len(chunk)))[0]
    assert (got[SEEN_S + 5 :] == "checkpoint").all()


def test_an_overwhelming_row_is_followed_at_once() -> None:
    # the GPUs really did a second of full work: that second is labelled so, and only it. The
    # job trains flat (steps too short to see at 1 s): in a job that steps visibly, a lone
    # full-power second minutes after its last step is no training step.
    flat = [("idle", 120), ("forward_backward", 90)]
    chunk = synthetic([*flat, ("checkpoint", 120)])
    start = sum(n for _, n in flat)
    _set_row(chunk, start + 60, 665.0, 98.0, 45.0)
    got = StageInferrer().infer_chunk(unlabelled(chunk), blank(len(chunk)))[0][start + 5 :]
    assert got[55] == "forward_backward"
    assert (np.delete(got, 55) == "checkpoint").all()


def test_a_real_change_is_followed_within_the_dwell() -> None:
    chunk = synthetic([("idle", 120), ("checkpoint", 120), ("eval", 120)])
    inferrer = StageInferrer(dwell_s=5.0)
    got = inferrer.infer_chunk(unlabelled(chunk), blank(len(chunk)))[0]
    changes = np.flatnonzero(got[1:] != got[:-1]) + 1
    assert len(changes) == 2  # no flicker
    # an eval is believed only after SLOW_ENTRY_S (a training burst passes through its level)
    assert 120 <= changes[0] <= 126 and 240 <= changes[1] <= 240 + SLOW_ENTRY_S["eval"] + 1


def test_result_does_not_depend_on_chunking() -> None:
    chunk = unlabelled(synthetic(PLAN))
    whole = StageInferrer().infer_chunk(chunk, blank(len(chunk)))[0]
    rng = np.random.default_rng(3)
    inferrer = StageInferrer()
    parts = [
        inferrer.infer_chunk(c, blank(len(c)))[0]
        for c in split(chunk, [int(k) for k in rng.integers(1, 300, 200)])
    ]
    assert (np.concatenate(parts) == whole).all()


def test_state_round_trips_through_json_and_is_fixed_size() -> None:
    chunk = synthetic(PLAN)
    inferrer = StageInferrer()
    inferrer.infer_chunk(chunk, chunk.stage)
    size_after_one = len(json.dumps(inferrer.save_state()))
    for k in range(5):
        more = synthetic(PLAN, t0=T0 + (k + 1) * 10_000, seed=k)
        inferrer.infer_chunk(more, more.stage)
    state = json.loads(json.dumps(inferrer.save_state(), allow_nan=False))  # strict JSON
    assert abs(len(json.dumps(state)) - size_after_one) < 200  # numbers change, the shape does not
    test = unlabelled(synthetic(PLAN, t0=T0 + 100_000, seed=9))
    restored = StageInferrer()
    restored.load_state(state)
    a = inferrer.infer_chunk(test, blank(len(test)))[0]
    b = restored.infer_chunk(test, blank(len(test)))[0]
    assert (a == b).all()


def test_custom_labels_are_capped() -> None:
    inferrer = StageInferrer()
    for i in range(40):
        chunk = synthetic([("idle", 5)], t0=T0 + 10 * i)
        inferrer.infer_chunk(chunk, np.full(5, f"custom_{i}", dtype=object))
    assert len(inferrer.centroids()) == MAX_STAGES  # slots: stages, their variants, custom labels
    assert len(inferrer.stages) < MAX_STAGES


def test_a_former_state_version_starts_afresh() -> None:
    # learned on other features: nothing carries, and the engine state around it is not refused
    inferrer = StageInferrer()
    inferrer.load_state({"version": 1, "stages": ["idle"], "mean": [[0.1] * 7], "var": [[0.01] * 7]})
    fresh = StageInferrer().centroids()
    assert inferrer.centroids().keys() == fresh.keys()
    assert all(np.allclose(inferrer.centroids()[k], v, equal_nan=True) for k, v in fresh.items())


def test_foreign_state_is_refused() -> None:
    with pytest.raises(ValueError, match="version"):
        StageInferrer().load_state({"version": 99})
    state = StageInferrer().save_state()
    state["mean"] = state["mean"][:2]
    with pytest.raises(ValueError, match="shapes"):
        StageInferrer().load_state(state)


def test_empty_chunk_and_chunk_without_gpu_columns() -> None:
    inferrer = StageInferrer()
    empty = TraceChunk(ts=np.zeros(0), numeric={}, stage=blank(0), job=blank(0))
    got, inferred = inferrer.infer_chunk(empty, blank(0))
    assert got.shape == (0,) and inferred.shape == (0,)
    bare = TraceChunk(
        ts=T0 + np.arange(5.0), numeric={"pdu.a.power_w": np.full(5, 3000.0)}, stage=blank(5), job=blank(5)
    )
    got, inferred = inferrer.infer_chunk(bare, blank(5))
    assert inferred.all() and all(isinstance(s, str) and s for s in got)


def test_glitch_cells_do_not_poison_the_learned_peak() -> None:
    chunk = synthetic(PLAN)
    chunk.numeric["gpu.3.power_w"][500] = 65535.0  # sentinel
    chunk.numeric["gpu.4.power_w"][501] = 4000.0  # spike
    inferrer = StageInferrer()
    got = inferrer.infer_chunk(unlabelled(chunk), blank(len(chunk)))[0]
    assert inferrer.features.state()["peak_w"] < 800
    assert accuracy(got, chunk.stage) >= 0.95


def test_power_limit_column_is_used_as_the_reference() -> None:
    # a rack that only ever idles and loads data: without a limit the training level is guessed
    # as TRAIN_OVER_IDLE × the floor; with the NVML limit column it is LIMIT_TRAIN_FRAC × limit
    from agent.stages.features import LIMIT_TRAIN_FRAC, TRAIN_OVER_IDLE

    chunk = synthetic([("idle", 200), ("data_load", 200)])
    with_limit = dataclasses.replace(
        chunk,
        numeric={**chunk.numeric, **{f"gpu.{i}.power_limit_w": np.full(len(chunk), 700.0) for i in range(8)}},
    )
    limited = StageInferrer().features.extract(with_limit)[200:, 0]
    guessed = StageInferrer().features.extract(chunk)[200:, 0]
    floor = 65.0
    assert abs(np.nanmedian(limited) - (120.0 - floor) / (LIMIT_TRAIN_FRAC * 700.0 - floor)) < 0.02
    assert abs(np.nanmedian(guessed) - (120.0 - floor) / ((TRAIN_OVER_IDLE - 1) * floor)) < 0.03


@pytest.mark.parametrize(("scenario", "seed"), [("tide", 7), ("plateau", 8)])
def test_twin_trace_without_labels(scenario: str, seed: int) -> None:
    """The twin's mixed job kinds, replayed unlabelled in its own chunks (bench/stages.py does 3 days)."""
    from agent.sim.scenarios import make_scenario
    from agent.sim.twin import simulate

    labelled = list(simulate(make_scenario(scenario, 0.3, seed, hints=True)))
    inferrer = StageInferrer()
    got = np.concatenate([inferrer.infer_chunk(unlabelled(c), blank(len(c)))[0] for c in labelled])
    truth = np.concatenate([c.stage for c in labelled])
    assert accuracy(got, truth) >= 0.9
    for stage in set(truth.tolist()):
        mask = truth == stage
        if mask.sum() >= 300:
            assert accuracy(got[mask], truth[mask]) >= 0.75, stage


def test_a_job_stepping_below_the_last_jobs_level_is_placed_against_its_own_steps() -> None:
    # a dense job (665 W steps), a short idle gap, then a memory-offload job stepping at 60 % of
    # that: its steps, not the last job's peak, are its training level, so its compute phases
    # are forward_backward (not eval at "60 % of training") and its communication grad_sync
    low = {
        **LEVELS,
        "forward_backward": (400.0, 97.0, 75.0, 350.0),
        "grad_sync": (240.0, 70.0, 35.0, 450.0),
    }
    first = synthetic([("idle", 120), ("data_load", 60), *training(40), ("idle", 300)])
    second = synthetic([("data_load", 60), *training(60)], t0=T0 + len(first), seed=1, levels=low)
    inferrer = StageInferrer()
    inferrer.infer_chunk(unlabelled(first), blank(len(first)))
    got = inferrer.infer_chunk(unlabelled(second), blank(len(second)))[0]
    later = np.arange(len(second)) >= 120  # after the new job's first steps
    for stage in ("forward_backward", "grad_sync"):
        mask = later & (second.stage == stage)
        assert accuracy(got[mask], second.stage[mask]) >= 0.9, stage
    assert "eval" not in set(got[later].tolist())


def test_a_swing_within_the_levels_own_noise_is_no_alternation() -> None:
    # white noise of σ 0.03 in level units: 15-row ranges often reach the fixed least swing (0.08),
    # 7 noise widths about once in 10 000 windows; a real step (compute vs communication 0.35
    # apart) stays a swing
    rng = np.random.default_rng(12)
    n = 3000
    noise = np.full(n, 0.03)
    flat = 0.9 + 0.03 * rng.standard_normal(n)
    assert (StepWatch().swing(flat)[0] > 0).mean() > 0.05  # the fixed least alone is fooled
    assert (StepWatch().swing(flat, noise)[0] > 0).mean() <= 0.001  # ~1 in 10 000 windows
    step = np.tile([1.0] * 6 + [0.65] * 2, n // 8) + 0.03 * rng.standard_normal(n)
    assert (StepWatch().swing(step, noise)[0][SWING_ROWS:] > 0.25).mean() > 0.9
