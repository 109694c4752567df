"""Several jobs side by side on one rack (node groups, each with its own ``WorkloadPlan``), and drains.

Real racks are multi-tenant and lose nodes to maintenance (drained and powered down for hours
while the job goes on, slower, on the rest). ``RackWorkload`` gives the physics per-node arrays
and the trace the one rack-wide label view its ``stage``/``job``/``work_rate`` columns can carry
(the per-node truth goes to truth.json only). Without groups, every node runs ``scenario.plan``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from agent.sim.stages import Timeline, WorkloadPlan, build_timeline, stage_runs


@dataclass(frozen=True)
class NodeGroup:
    """Nodes (rack order, 0-based) that run one workload together, e.g. one data-parallel job."""

    nodes: tuple[int, ...]
    plan: WorkloadPlan


@dataclass(frozen=True)
class Drain:
    """A node drained and powered down from ``start_h`` for ``hours``: no GPU readings, no power."""

    node: int
    start_h: float
    hours: float

    def span_s(self) -> tuple[int, int]:
        """[first, end) second from the scenario start at which the node is off."""
        return math.ceil(self.start_h * 3600.0 - 1e-6), math.ceil((self.start_h + self.hours) * 3600.0 - 1e-6)


def check_layout(
    nodes: int, groups: tuple[NodeGroup, ...], drains: tuple[Drain, ...], base: WorkloadPlan
) -> None:
    """Refuse layouts the physics cannot run, naming what is wrong."""
    if groups:
        seen = [n for g in groups for n in g.nodes]
        if sorted(seen) != list(range(nodes)):
            raise ValueError(f"node groups must cover nodes 0…{nodes - 1} once each, got {sorted(seen)}")
        for g in groups:
            if g.plan.job_kinds != base.job_kinds:  # profile codes index one shared table
                raise ValueError("every node group's plan must use the scenario plan's job_kinds")
    for d in drains:
        if not 0 <= d.node < nodes:
            raise ValueError(f"drain: node {d.node} is not in 0…{nodes - 1}")
        if d.hours <= 0 or d.start_h < 0:
            raise ValueError(f"drain of node {d.node}: start_h must be ≥ 0 and hours > 0")


class RackWorkload:
    """Per-node stage truth and the rack-wide label view, for ``[s0, s1)`` slices of seconds."""

    def __init__(
        self, plan: WorkloadPlan, groups: tuple[NodeGroup, ...], drains: tuple[Drain, ...], nodes: int,
        total_s: int, seed: int,
    ) -> None:
        check_layout(nodes, groups, drains, plan)
        self.groups = groups or (NodeGroup(tuple(range(nodes)), plan),)
        self.multi = len(self.groups) > 1
        # Group 0 draws from the stream a single-job rack always used; the others from their own.
        self.timelines: list[Timeline] = [
            build_timeline(
                g.plan, total_s, np.random.default_rng([seed, 0, 1] if k == 0 else [seed, 0, 1, k])
            )
            for k, g in enumerate(self.groups)
        ]
        self.group_of_node = np.zeros(nodes, dtype=np.intp)
        for k, g in enumerate(self.groups):
            self.group_of_node[list(g.nodes)] = k
        self.drains = drains
        self.total_s = total_s
        self.jobs: list[dict[str, Any]] = []
        self._offset: list[int] = []
        for k, (g, tl) in enumerate(zip(self.groups, self.timelines, strict=True)):
            self._offset.append(len(self.jobs))
            for j in tl.jobs:
                job = dict(j)
                if self.multi:  # job ids unique across the rack, naming the group
                    job["id"] = f"g{k}-{j['id']}"
                    job["nodes"] = list(g.nodes)
                self.jobs.append(job)
        self.timeline = self.timelines[0] if not self.multi else self._label_view()

    def job_ids(self) -> list[str]:
        return [str(j["id"]) for j in self.jobs]

    def global_job(self, k: int, local: np.ndarray) -> np.ndarray:
        """Rack-wide job index of group ``k``'s local job indices (-1 stays -1)."""
        return np.where(local >= 0, local + self._offset[k], -1).astype(np.int32)

    def powered(self, s0: int, s1: int) -> np.ndarray:
        """(seconds × nodes) bool: the node is powered (not drained)."""
        t = np.arange(s0, s1)
        on = np.ones((s1 - s0, len(self.group_of_node)), dtype=bool)
        for d in self.drains:
            a, b = d.span_s()
            on[(t >= a) & (t < b), d.node] = False
        return on

    def per_node(self, s0: int, s1: int) -> dict[str, np.ndarray]:
        """(seconds × nodes) stage, profile, global job, nominal work_rate and variant of each node."""
        def column(name: str) -> list[np.ndarray]:
            if name == "job":  # rack-wide job indices
                return [self.global_job(k, tl.job[s0:s1]) for k, tl in enumerate(self.timelines)]
            return [getattr(tl, name)[s0:s1] for tl in self.timelines]

        names = ("stage", "profile", "job", "work_rate", "variant")
        return {name: np.stack(column(name), axis=1)[:, self.group_of_node] for name in names}

    def live_fraction(self, s0: int, s1: int) -> np.ndarray:
        """(seconds × groups) share of each group's nodes that are powered: its throughput scale (a
        data-parallel job that loses a node keeps each rank's load and loses that node's share)."""
        on = self.powered(s0, s1)
        return np.stack([on[:, list(g.nodes)].mean(axis=1) for g in self.groups], axis=1)

    def _label_view(self) -> Timeline:
        """The one stage/job per second a trace row can carry: the job on the most powered nodes (ties:
        the group listed first; only idle groups left: idle)."""
        total = self.total_s
        counts = np.stack([np.full(total, len(g.nodes), dtype=np.float64) for g in self.groups], axis=1)
        for d in self.drains:
            a, b = d.span_s()
            counts[a : min(b, total), int(self.group_of_node[d.node])] -= 1
        busy = np.stack([tl.job >= 0 for tl in self.timelines], axis=1)
        score = counts + np.where(busy, 1000.0, 0.0)  # a running job outranks an idle group
        pick = np.argmax(score, axis=1)
        rows = np.arange(total)

        def take(name: str, dtype: Any) -> np.ndarray:
            picked: np.ndarray = np.stack([getattr(tl, name) for tl in self.timelines], axis=1)[rows, pick]
            return picked.astype(dtype)

        jobs = [self.global_job(k, tl.job) for k, tl in enumerate(self.timelines)]
        job = np.stack(jobs, axis=1)[rows, pick]
        self.label_group = pick
        return Timeline(
            stage=take("stage", np.int8),
            job=job.astype(np.int32),
            work_rate=take("work_rate", np.float64),
            profile=take("profile", np.int8),
            variant=take("variant", np.int8),
            labelled=take("labelled", bool),
            jobs=self.jobs,
        )

    def node_segments(self, t0: float) -> list[list[list[Any]]]:
        """Per node: ``[start_ts, end_ts, stage, job_id]`` runs of its group's timeline, drains as
        ``"off"`` runs with an empty job (truth.json ``node_stage_segments``)."""
        ids = self.job_ids()
        out: list[list[list[Any]]] = []
        for node, k in enumerate(self.group_of_node.tolist()):
            tl = self.timelines[k]
            stage = tl.stage.astype(np.int16)
            job = self.global_job(k, tl.job)
            off = ~self.powered(0, self.total_s)[:, node]
            out.append(stage_runs(np.where(off, -1, stage), np.where(off, -1, job), ids, t0))
        return out

