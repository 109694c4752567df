"""``NodeStages``: the stage and job of every GPU node of the rack, row by row.

Nodes of one rack may run different jobs, so one stage per row cannot say which job a node's
energy belongs to. Per node and row the label is that node's own fresh hint, else the rack-wide
hint, else the stage inferred from that node's own GPUs (one ``StageInferrer`` per node); the job
follows the label's source. A rack that lists no nodes is one node: the rack's own labels.
Fixed memory: one inferrer per configured node.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from agent.engine.frames import RackInfo
from agent.stages.infer import StageInferrer
from agent.trace.model import TraceChunk

# (node id, row times) → (stage, job) object arrays, "" where the node has no fresh hint of its own
NodeHints = Callable[[str, np.ndarray], tuple[np.ndarray, np.ndarray]]


class NodeStages:
    """Per node and row: (stage, job, from a hint?) — node hint, else rack hint, else inferred."""

    def __init__(self, rack: RackInfo) -> None:
        given = len(rack.node_ids) == len(rack.node_gpus)  # in node_gpus order; else n0, n1, …
        self.ids = tuple(rack.node_ids) if given else tuple(f"n{i}" for i in range(len(rack.node_gpus)))
        self.gpus = tuple(frozenset(g) for g in rack.node_gpus)
        self.inferrers = [StageInferrer() for _ in self.ids]
        self._columns: dict[tuple[str, ...], list[list[str]]] = {}  # chunk columns → per node

    @property
    def n(self) -> int:
        """Nodes the accounting splits the rack into (1 for a rack that lists none)."""
        return max(1, len(self.ids))

    def labels(self, chunk: TraceChunk, rack_hints: np.ndarray, rack_labels: np.ndarray,
               hints: NodeHints | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(stage, job) as (rows × nodes) object arrays, and (rows × nodes) bool: the label is a hint.

        ``rack_hints``: the rows' valid stage hints ("" none); ``rack_labels``: the rack's stage per
        row (hint or inferred); ``hints``: each node's own hints (None: no node hints at all).
        """
        rows = len(chunk)
        job_col = np.asarray(chunk.job, dtype=object)
        if not self.ids:
            hinted = (np.asarray(rack_hints, dtype=object) != "")[:, None]
            return np.asarray(rack_labels, dtype=object)[:, None], job_col[:, None], hinted
        stage = np.empty((rows, len(self.ids)), dtype=object)
        hinted = np.zeros((rows, len(self.ids)), dtype=bool)
        job = np.empty((rows, len(self.ids)), dtype=object)
        columns = self._node_columns(chunk)
        for k, node in enumerate(self.ids):
            if hints is not None:
                own_stage, own_job = hints(node, chunk.ts)
                mine = own_stage != ""
                hint = np.where(mine, own_stage, rack_hints).astype(object)
                job[:, k] = np.where(mine, own_job, job_col)
            else:
                hint = np.asarray(rack_hints, dtype=object)
                job[:, k] = job_col
            hinted[:, k] = hint != ""
            if rows and hinted[:, k].all():  # hinted throughout: nothing to infer (the rack's own
                stage[:, k] = hint           # inferrer learns from the hints; 8 more would double the cost)
                continue
            sub = TraceChunk(ts=chunk.ts, numeric={c: chunk.numeric[c] for c in columns[k]}, stage=hint,
                             job=job[:, k], first_line=chunk.first_line)
            labelled, _ = self.inferrers[k].infer_chunk(sub, hint)
            stage[:, k] = labelled
        return stage, job, hinted

    def _node_columns(self, chunk: TraceChunk) -> list[list[str]]:
        """Per node: the chunk's columns except other nodes' ``gpu.<i>.*`` (cached per column set)."""
        key = tuple(chunk.numeric)
        cached = self._columns.get(key)
        if cached is None:
            cached = [[c for c in key if not c.startswith("gpu.") or _gpu_index(c) in gpus]
                      for gpus in self.gpus]
            self._columns = {key: cached}  # one column set at a time: a trace keeps its columns
        return cached

    def state(self) -> dict[str, Any]:
        return {"ids": list(self.ids), "inferrers": [inf.save_state() for inf in self.inferrers]}

    def load(self, state: dict[str, Any]) -> None:
        """Restore the inferrers of nodes that are still configured (by id; others start afresh)."""
        saved = dict(zip(state.get("ids", []), state.get("inferrers", []), strict=False))
        for node, inferrer in zip(self.ids, self.inferrers, strict=True):
            if saved.get(node):
                inferrer.load_state(saved[node])


def _gpu_index(column: str) -> int:
    part = column.split(".")[1]
    return int(part) if part.isdigit() else -1
