"""Stage inference from what a node's current job has shown (agent/stages/job_scope.py), no labels.

A busy flat row alone cannot tell forward passes from training whose steps are shorter than a
sample; the job can: a job that checkpoints trains, and a job that shows neither steps nor a
checkpoint on a node whose training jobs step visibly runs forward passes only. Levels are those
of an 8-GPU H100 node (idle 65 W, start-up 115 W, training 650 W); each case also runs scaled to
an A100 (400 W) and a 1000-W part.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from agent.stages.infer import SLOW_ENTRY_S, StageInferrer
from agent.stages.job_scope import CKPT_PROOF_ROWS, UNPROVEN_TRAINING_S, JobScope
from agent.trace.model import TraceChunk
from tests.stages import node_rows
from tests.stages.node_rows import SCALES, T0, Signature, infer, share

# signature → (power W, util %, mem util %) of rank 0 and of the other ranks
SIGNATURES: dict[str, Signature] = {
    "idle": ((65.0, 0.0, 0.0), (65.0, 0.0, 0.0)),
    "startup": ((115.0, 0.0, 0.0), (115.0, 0.0, 0.0)),
    "stall": ((115.0, 1.0, 1.0), (115.0, 1.0, 1.0)),  # a data stall: as the start-up left them
    "step": ((650.0, 99.0, 45.0), (650.0, 99.0, 45.0)),  # forward/backward of a visible step
    "sync": ((360.0, 70.0, 25.0), (360.0, 70.0, 25.0)),  # its gradient all-reduce
    "flat": ((650.0, 99.0, 45.0), (650.0, 99.0, 45.0)),  # training with sub-second steps
    "writer_ckpt": ((145.0, 2.0, 3.0), (155.0, 100.0, 1.0)),
    # every rank writes its shard, memory barely busier than the SMs, power above the start-up
    "shard_ckpt": ((150.0, 4.0, 6.0), (150.0, 4.0, 6.0)),
    "serve": ((540.0, 95.0, 35.0), (540.0, 95.0, 35.0)),  # forward passes only, steady
    # forward passes waiting on requests: kernels resident four fifths of the time
    "serve_gaps": ((540.0, 80.0, 35.0), (540.0, 80.0, 35.0)),
    "light_step": ((455.0, 97.0, 60.0), (455.0, 97.0, 60.0)),  # a lighter job's steps
    "light_sync": ((260.0, 70.0, 30.0), (260.0, 70.0, 30.0)),
}
TRUE_STAGE = {
    "idle": "idle", "startup": "data_load", "stall": "data_load", "step": "forward_backward",
    "sync": "grad_sync", "flat": "forward_backward", "writer_ckpt": "checkpoint",
    "shard_ckpt": "checkpoint", "serve": "eval", "serve_gaps": "eval", "light_step": "forward_backward",
    "light_sync": "grad_sync",
}


def steps(n: int, kind: str = "") -> list[tuple[str, int]]:
    return [p for _ in range(n) for p in ((kind + "step", 6), (kind + "sync", 2))]


def node_chunk(
    plan: list[tuple[str, int]], scale: float = 1.0, seed: int = 0
) -> tuple[TraceChunk, np.ndarray]:
    """1-s rows of one node following (signature, seconds); the chunk and the true stages."""
    return node_rows.node_chunk(plan, SIGNATURES, TRUE_STAGE, scale, seed)


@pytest.mark.parametrize("scale", SCALES)
def test_forward_passes_after_a_stepping_job_are_eval(scale: float) -> None:
    # a training job that steps visibly, a long idle, then a job that serves for an hour: steady
    # at 83 % of the training level, busy, with neither a step nor a checkpoint
    plan = [("idle", 120), ("startup", 90), *steps(60), ("writer_ckpt", 60), ("idle", 2400),
            ("startup", 60), ("serve", 3600), ("idle", 120)]
    chunk, truth = node_chunk(plan, scale)
    got = infer(chunk)
    serve = truth == "eval"
    assert share(got, serve, "eval") >= 0.95
    assert share(got, truth == "forward_backward", "forward_backward") >= 0.95
    assert share(got, truth == "data_load", "data_load") >= 0.9


@pytest.mark.parametrize("scale", SCALES)
def test_a_flat_trainer_proven_by_its_checkpoint_stays_forward_backward(scale: float) -> None:
    # the 8B GPT recording: no visible step; a job that checkpointed trains, and so does the
    # node's next job at the same level before its own first checkpoint
    plan = [("idle", 120), ("startup", 120), ("flat", 600), ("writer_ckpt", 60), ("flat", 600),
            ("idle", 300), ("startup", 120), ("flat", 900), ("writer_ckpt", 60), ("flat", 300)]
    chunk, truth = node_chunk(plan, scale, seed=1)
    got = infer(chunk)
    train = truth == "forward_backward"
    assert share(got, train, "forward_backward") >= 0.97
    assert share(got, train, "eval") == 0.0
    assert share(got, truth == "checkpoint", "checkpoint") >= 0.9


@pytest.mark.parametrize("scale", SCALES)
def test_a_lighter_job_that_steps_is_placed_against_its_own_steps_not_read_as_eval(scale: float) -> None:
    # the next job steps at 70 % of the last job's level: training at its own level
    plan = [("idle", 120), ("startup", 90), *steps(60), ("idle", 300), ("startup", 90),
            *steps(120, "light_")]
    chunk, truth = node_chunk(plan, scale, seed=2)
    got = infer(chunk)
    second = np.arange(len(truth)) >= len(truth) - 120 * 8 + 30  # past its first steps
    assert share(got, second & (truth == "forward_backward"), "forward_backward") >= 0.9
    assert share(got, second, "eval") == 0.0


@pytest.mark.parametrize("scale", SCALES)
def test_a_sharded_checkpoint_above_the_start_up_is_not_a_data_stall(scale: float) -> None:
    # every rank writes its own shard with memory barely busier than the SMs: its power above the
    # job's start-up tells it from a data stall, which sits at the start-up's power
    plan = [("idle", 120), ("startup", 120), *steps(40), ("stall", 40), *steps(20), ("shard_ckpt", 120),
            *steps(20), ("stall", 30), *steps(20)]
    chunk, truth = node_chunk(plan, scale, seed=3)
    got = infer(chunk)
    assert share(got, truth == "checkpoint", "checkpoint") >= 0.9
    assert share(got, truth == "data_load", "data_load") >= 0.9


def test_job_scope_state_round_trips_and_chunking_does_not_matter() -> None:
    plan = [("idle", 120), ("startup", 90), *steps(30), ("writer_ckpt", 30), ("idle", 200),
            ("startup", 60), ("serve", 600)]
    chunk, _ = node_chunk(plan, seed=4)
    whole = infer(chunk)
    cut = 700
    first = StageInferrer()
    blank = np.full(len(chunk), "", dtype=object)
    a = first.infer_chunk(chunk.take(slice(None, cut)), blank[:cut])[0]
    restored = StageInferrer()
    restored.load_state(json.loads(json.dumps(first.save_state(), allow_nan=False)))
    b = restored.infer_chunk(chunk.take(slice(cut, None)), blank[cut:])[0]
    assert (np.concatenate((a, b)) == whole).all()


def test_a_checkpoint_is_believed_after_consecutive_rows_only() -> None:
    scope = JobScope()
    ts = T0 + np.arange(12.0)
    idle = np.zeros(12, dtype=bool)
    idle[0] = True
    busy = np.zeros(12, dtype=bool)
    like = np.zeros(12, dtype=bool)
    like[[3, 5, 7]] = True  # lone rows: a lagging GPU, a rounding
    like[9:9 + CKPT_PROOF_ROWS] = True
    _, checkpointed, _, _ = scope.update(ts, np.full(12, 150.0), idle, busy, like)
    assert not checkpointed[: 9 + CKPT_PROOF_ROWS - 1].any()
    assert checkpointed[9 + CKPT_PROOF_ROWS - 1:].all()


@pytest.mark.parametrize("scale", SCALES)
def test_forward_passes_above_a_lighter_trainers_level_are_eval(scale: float) -> None:
    # the job trained before drew less (a memory-offload job): serving at more than its level,
    # still with neither a step nor a checkpoint, is forward passes, not training
    plan = [("idle", 120), ("startup", 90), *steps(60, "light_"), ("writer_ckpt", 60), ("idle", 600),
            ("startup", 60), ("serve", 3600), ("idle", 120)]
    chunk, truth = node_chunk(plan, scale, seed=5)
    got = infer(chunk)
    assert share(got, truth == "eval", "eval") >= 0.95
    assert share(got, truth == "forward_backward", "forward_backward") >= 0.95


@pytest.mark.parametrize("scale", SCALES)
def test_a_flat_run_after_a_run_that_checkpoints_every_few_steps_is_training(scale: float) -> None:
    # the recording's runs: one checkpointing every 10 steps (1–3 s bursts between checkpoints:
    # an alternation, but its low side is a checkpoint, not a step's communication), then one
    # checkpointing every 1000 steps, flat for minutes before its first checkpoint
    rng = np.random.default_rng(6)
    bursts = [p for _ in range(40) for p in (("writer_ckpt", int(rng.integers(4, 12))),
                                             ("flat", int(rng.integers(1, 4))))]
    plan = [("idle", 120), ("startup", 90), ("flat", 120), *bursts, ("idle", 300), ("startup", 90),
            ("flat", 900), ("writer_ckpt", 30), ("flat", 300)]
    chunk, truth = node_chunk(plan, scale, seed=6)
    got = infer(chunk)
    second = np.arange(len(truth)) >= len(truth) - (900 + 30 + 300)
    assert share(got, second & (truth == "forward_backward"), "forward_backward") >= 0.97
    assert share(got, second, "eval") == 0.0


@pytest.mark.parametrize("scale", SCALES)
def test_a_first_job_that_serves_below_a_steps_utilisation_is_eval(scale: float) -> None:
    # a fresh node whose first job serves: no training level or habit known yet, and its power
    # alone reads as flat training; its utilisation, held below what a training step keeps,
    # says it is not one. The next job trains flat at saturation: forward_backward from the start
    plan = [("idle", 120), ("startup", 60), ("serve_gaps", 1800), ("idle", 300), ("startup", 90),
            ("flat", 900), ("writer_ckpt", 30), ("flat", 300)]
    chunk, truth = node_chunk(plan, scale, seed=7)
    got = infer(chunk)
    serve = truth == "eval"
    assert share(got, serve, "eval") >= 0.95
    assert share(got, truth == "forward_backward", "forward_backward") >= 0.97
    assert share(got, truth == "forward_backward", "eval") == 0.0



@pytest.mark.parametrize("util", [90.0, 100.0])
def test_a_first_job_training_flat_at_a_steps_utilisation_is_not_eval(util: float) -> None:
    # the false-alarm side: flat training at the low end of a step's utilisation (90 %), with
    # NVML's integer rounding and per-GPU noise, before any checkpoint proves it
    signatures = dict(SIGNATURES, flat=((650.0, util, 45.0), (650.0, util, 45.0)))
    plan = [("idle", 120), ("startup", 60), ("flat", 1800)]
    chunk, truth = node_rows.node_chunk(plan, signatures, TRUE_STAGE, seed=8)
    got = infer(chunk)
    assert share(got, truth == "forward_backward", "forward_backward") >= 0.97
    assert share(got, truth == "forward_backward", "eval") == 0.0


def test_a_small_noisy_node_serving_below_a_steps_utilisation_is_eval() -> None:
    # 4 GPUs reading 4 % noise: the median's sample noise alone spans more than the least swing
    # in 15 rows; measured from the GPUs' own spread it is no alternation, so the job stays flat
    plan = [("idle", 120), ("startup", 60), ("serve_gaps", 1800)]
    chunk, truth = node_rows.node_chunk(plan, SIGNATURES, TRUE_STAGE, seed=9, gpus=4, noise_frac=0.04)
    got = infer(chunk)
    assert share(got, truth == "eval", "eval") >= 0.95


def test_a_first_job_busy_for_over_an_hour_with_no_step_or_checkpoint_is_not_training() -> None:
    # serving at a step's utilisation: nothing tells it from flat training until it has gone
    # longer than a training job goes without a checkpoint (job_scope.UNPROVEN_TRAINING_S)
    plan = [("idle", 120), ("startup", 60), ("serve", 5400)]
    chunk, _ = node_chunk(plan, seed=10)
    got = infer(chunk)
    late = chunk.ts - chunk.ts[0] >= 180 + UNPROVEN_TRAINING_S + SLOW_ENTRY_S["eval"]
    assert share(got, late, "eval") >= 0.99


def test_a_flat_trainer_checkpointing_within_the_hour_stays_forward_backward() -> None:
    # the false-alarm side: checkpoints 50 min apart prove the job before the hour is out
    plan = [("idle", 120), ("startup", 60), ("flat", 3000), ("writer_ckpt", 60), ("flat", 3000),
            ("writer_ckpt", 60), ("flat", 1200)]
    chunk, truth = node_chunk(plan, seed=11)
    got = infer(chunk)
    train = truth == "forward_backward"
    assert share(got, train, "forward_backward") >= 0.99
    assert share(got, train, "eval") == 0.0
