"""Stage inference on the per-GPU signatures recorded on real racks (issue 15), without labels.

The numbers are those of an 8-GPU H100 node training an 8B GPT model (1-s averages of 100-ms
nvidia-smi samples): idle 65 W; start-up with contexts up, utilisation 0, ~115 W; training
~650 W, flat at 1 s (steps of tenths of a second); a checkpoint written by one rank at ~145 W
and 1–4 % utilisation while the seven others spin in an NCCL collective at ~155 W and 100 %.
Each case also runs with every power scaled to other GPU models (A100 400 W, a 1000-W part):
the inferrer places power against the rack's own idle and training levels, not watts.
"""

from __future__ import annotations

import numpy as np
import pytest

from agent.stages.infer import StageInferrer
from agent.trace.model import TraceChunk
from tests.stages import node_rows
from tests.stages.node_rows import GPUS, SCALES, Signature, infer, share

# stage signature → per-GPU (power W, util %, mem util %) for rank 0 and for the other ranks
SIGNATURES: dict[str, Signature] = {
    "idle": ((65.0, 0.0, 0.0), (65.0, 0.0, 0.0)),
    "startup": ((115.0, 0.0, 0.0), (115.0, 0.0, 0.0)),
    "train": ((650.0, 99.0, 45.0), (650.0, 99.0, 45.0)),
    "writer_ckpt": ((145.0, 2.0, 3.0), (155.0, 100.0, 1.0)),
    "stall": ((155.0, 100.0, 1.0), (155.0, 100.0, 1.0)),
}
TRUE_STAGE = {
    "idle": "idle",
    "startup": "data_load",
    "train": "forward_backward",
    "writer_ckpt": "checkpoint",
    "stall": "grad_sync",
}


def node_chunk(
    plan: list[tuple[str, int]], scale: float = 1.0, seed: int = 0
) -> tuple[TraceChunk, np.ndarray]:
    """1-s rows of one node following (signature, seconds); returns the chunk and the true stages."""
    return node_rows.node_chunk(plan, SIGNATURES, TRUE_STAGE, scale, seed)


@pytest.mark.parametrize("scale", SCALES)
def test_one_writer_and_seven_spinning_peers_is_checkpoint_not_eval(scale: float) -> None:
    plan = [("idle", 120), ("startup", 120), ("train", 600), ("writer_ckpt", 180), ("train", 300)]
    chunk, truth = node_chunk(plan, scale)
    got = infer(chunk)
    ckpt = truth == "checkpoint"
    assert share(got, ckpt, "checkpoint") >= 0.95
    assert share(got, ckpt, "eval") == 0.0
    assert share(got, truth == "forward_backward", "forward_backward") >= 0.95


@pytest.mark.parametrize("scale", SCALES)
def test_short_bursts_between_frequent_checkpoints_are_not_eval(scale: float) -> None:
    # a run checkpointing every 10 steps: 1–3 s of training between checkpoints of seconds
    rng = np.random.default_rng(1)
    bursts = [p for _ in range(60) for p in (("writer_ckpt", int(rng.integers(4, 12))),
                                             ("train", int(rng.integers(1, 4))))]
    plan = [("idle", 120), ("startup", 90), ("train", 300), *bursts]
    chunk, truth = node_chunk(plan, scale, seed=2)
    got = infer(chunk)
    tail = np.arange(len(truth)) >= 510
    assert share(got, tail, "eval") == 0.0
    assert share(got, tail & (truth == "checkpoint"), "checkpoint") >= 0.85


@pytest.mark.parametrize("scale", SCALES)
def test_start_up_with_utilisation_zero_is_data_load(scale: float) -> None:
    # a fresh inferrer, no training seen yet: only the idle floor to place the start-up against
    chunk, truth = node_chunk([("idle", 300), ("startup", 240), ("train", 300)], scale, seed=3)
    got = infer(chunk)
    assert share(got, truth == "data_load", "data_load") >= 0.95
    assert share(got, truth == "idle", "idle") >= 0.95


def test_a_collective_stall_is_grad_sync_not_checkpoint() -> None:
    # every rank spinning and none writing: the job waits in a collective (a straggler, the network)
    chunk, truth = node_chunk([("idle", 120), ("train", 300), ("stall", 30), ("train", 120)], seed=4)
    got = infer(chunk)
    stall = truth == "grad_sync"
    assert share(got, stall, "grad_sync") >= 0.8
    assert share(got, stall, "checkpoint") + share(got, stall, "eval") == 0.0


def test_utilisation_alone_does_not_make_a_stage() -> None:
    # 100 % utilisation at a little above idle power is spinning, not computing: never eval or
    # forward_backward, whatever the utilisation says
    chunk, truth = node_chunk([("idle", 120), ("train", 300), ("writer_ckpt", 120), ("stall", 20)], seed=5)
    got = infer(chunk)
    low = np.isin(truth, ["checkpoint", "grad_sync"]) & (np.arange(len(truth)) >= 425)
    assert not np.isin(got[low], ["eval", "forward_backward"]).any()


def test_an_inferrer_per_node_looks_at_its_own_gpus_only() -> None:
    # two nodes, two jobs: node 0 checkpoints while node 1 idles; each node's inferrer follows
    # its own GPUs (the door to several jobs per rack)
    plan = [("idle", 120), ("train", 300), ("writer_ckpt", 120), ("train", 120)]
    node0, truth = node_chunk(plan, seed=6)
    node1, _ = node_chunk([("idle", len(truth))], seed=7)
    numeric = dict(node0.numeric)
    for name, values in node1.numeric.items():
        gpu, field = name.split(".")[1], name.split(".", 2)[2]
        numeric[f"gpu.{int(gpu) + GPUS}.{field}"] = values
    rack = TraceChunk(ts=node0.ts, numeric=numeric, stage=node0.stage, job=node0.job)
    blank = np.full(len(rack), "", dtype=object)
    first = StageInferrer(gpus=tuple(range(GPUS))).infer_chunk(rack, blank)[0]
    second = StageInferrer(gpus=tuple(range(GPUS, 2 * GPUS))).infer_chunk(rack, blank)[0]
    assert (first == infer(node0)).all()
    assert np.mean(first == truth) >= 0.95
    assert np.mean(second == "idle") >= 0.99
