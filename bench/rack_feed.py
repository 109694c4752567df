"""What a multi-node twin rack's operator and jobs give the engine, shared by the multi-node benches.

- ``feed_max_w``: the PDU range limit an operator configures (``[[pdu]] max_power_w``) from the
  rack's PSU ratings: an 8-node feed at full load is above the engine's 30 kW default, whose
  readings would otherwise be rejected as out of range.
- ``NodeHints``: every node's stage changes sent as stage hints naming that node, through the
  agent's own ``HintIntake`` into its ``NodeTimelines``: the path a hint from the job takes live.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from agent.engine import Engine
from agent.engine.frames import RackInfo
from agent.sim.params import STAGES
from agent.sim.scenarios import Scenario
from agent.stages.hints import encode_hint
from agent.stages.intake import HintIntake
from agent.stages.timeline import NodeTimelines, StageTimeline


def feed_max_w(scenario: Scenario) -> float:
    """One PDU feed's limit: every node's PSUs at their rating, spread over the rack's feeds (a
    PDU cannot deliver more than the PSUs it powers can draw)."""
    rack, node = scenario.rack, scenario.rack.node
    return rack.nodes * node.psu_count * node.psu_rating_w / len(rack.pdu_ids)


def with_nodes(rack: RackInfo, scenario: Scenario, node_gpus: tuple[tuple[int, ...], ...]) -> RackInfo:
    """The rack as its configuration describes it: each node's GPUs and id, the PDUs' limit."""
    ids = tuple(f"n{i}" for i in range(len(node_gpus)))
    return replace(rack, node_gpus=node_gpus, node_ids=ids if node_gpus else (),
                   default_pdu_max_w=feed_max_w(scenario))


class NodeHints:
    """Turns the twin's per-node stage truth into hint datagrams, node by node, as jobs send them.

    A hint is sent as a node's stage or job changes and repeated every ``ttl / 2`` while it stays
    (as the client does); a powered-down node sends nothing, so its hints expire.
    """

    def __init__(self, engine: Engine, job_ids: list[str]) -> None:
        self.ids = list(engine.rack.node_ids)
        self.job_ids = [*job_ids, ""]
        timeline = StageTimeline()
        nodes = NodeTimelines(timeline, self.ids)
        self.clock = [0.0]
        self.intake = HintIntake(timeline, clock=lambda: self.clock[0], nodes=nodes)
        engine.node_hints = nodes.labels_at
        self.repeat_s = timeline.ttl_s / 2.0
        self.last: list[tuple[int, int, float]] = [(-2, -2, -np.inf)] * len(self.ids)  # stage, job, sent at

    def send(self, ts: np.ndarray, stage: np.ndarray, job: np.ndarray) -> None:
        """Hints for rows ``ts`` (per node stage codes, job indices; stage < 0: node powered off)."""
        for n, node in enumerate(self.ids):
            s_col, j_col = stage[:, n].astype(np.int64), job[:, n].astype(np.int64)
            prev_s, prev_j, sent = self.last[n]
            change = np.flatnonzero((s_col != np.concatenate(([prev_s], s_col[:-1])))
                                    | (j_col != np.concatenate(([prev_j], j_col[:-1]))))
            rows = set(change.tolist())
            t = sent
            for i in range(len(ts)):  # repeats inside a long stage
                if i in rows:
                    t = ts[i]
                elif ts[i] - t >= self.repeat_s:
                    rows.add(i)
                    t = ts[i]
            for i in sorted(rows):
                if s_col[i] < 0:
                    continue
                job_id = self.job_ids[j_col[i]] or None
                self.clock[0] = float(ts[i])  # sent as the stage begins: the rate limit sees real time
                self.intake.receive(encode_hint(STAGES[s_col[i]], job=job_id, ts=float(ts[i]), node=node),
                                    "udp", node)
            last = int(max(rows)) if rows else -1
            self.last[n] = (int(s_col[-1]), int(j_col[-1]), float(ts[last]) if last >= 0 else sent)
