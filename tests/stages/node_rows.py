"""One GPU node's 1-s rows from a plan of per-GPU signatures, for the stage-inference tests.

A signature is (power W, util %, mem util %) of rank 0 and of the other ranks; each test module
keeps its own table (the recorded signatures of issue 15, the job-scope cases) and its own truth.
"""

from __future__ import annotations

import numpy as np

from agent.stages.infer import StageInferrer
from agent.trace.model import TraceChunk

T0 = 1_717_200_000.0
GPUS = 8
SCALES = [1.0, 400.0 / 700.0, 1000.0 / 700.0]  # H100, A100, a 1000-W accelerator

Signature = tuple[tuple[float, float, float], tuple[float, float, float]]


def node_chunk(
    plan: list[tuple[str, int]],
    signatures: dict[str, Signature],
    true_stage: dict[str, str],
    scale: float = 1.0,
    seed: int = 0,
    gpus: int = GPUS,
    noise_frac: float = 0.02,
) -> tuple[TraceChunk, np.ndarray]:
    """1-s rows of one node following (signature, seconds); returns the chunk and the true stages.

    ``noise_frac``: each GPU's power reading noise (σ as a fraction of its level)."""
    rng = np.random.default_rng(seed)
    names = [s for s, n in plan for _ in range(n)]
    n = len(names)
    numeric: dict[str, np.ndarray] = {}
    for gpu in range(gpus):
        sig = np.array([signatures[s][0 if gpu == 0 else 1] for s in names])
        numeric[f"gpu.{gpu}.power_w"] = sig[:, 0] * scale * (1 + noise_frac * rng.standard_normal(n))
        numeric[f"gpu.{gpu}.util_pct"] = np.clip(np.round(sig[:, 1] + rng.normal(0, 1, n)), 0, 100)
        numeric[f"gpu.{gpu}.mem_util_pct"] = np.clip(np.round(sig[:, 2] + rng.normal(0, 1, n)), 0, 100)
    chunk = TraceChunk(
        ts=T0 + np.arange(n, dtype=float),
        numeric=numeric,
        stage=np.full(n, "", dtype=object),
        job=np.full(n, "", dtype=object),
    )
    return chunk, np.array([true_stage[s] for s in names], dtype=object)


def infer(chunk: TraceChunk) -> np.ndarray:
    """The stages a fresh inferrer gives every row of ``chunk``, with no label."""
    return StageInferrer().infer_chunk(chunk, np.full(len(chunk), "", dtype=object))[0]


def share(got: np.ndarray, mask: np.ndarray, stage: str) -> float:
    return float(np.mean(got[mask] == stage))
