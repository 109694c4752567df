"""Per-job stage energy on a rack whose nodes run different jobs, against the twin's truth.

    .venv/bin/python bench/job_energy.py [--seeds 2] [--first-seed 0] [--days 1] [--jobs 2]
                                         [--drain] [--step 60] [--no-node-hints]

Each seed draws a randomised multi-job rack (agent.sim.randomize ``multijob``: 8 nodes of 8 GPUs,
``--jobs`` node groups, each with its own jobs and timeline; ``--drain`` powers one node down for
1–6 h). The trace is replayed through ``Engine.process`` in steps of ``--step`` seconds, and before
each step every node's stage changes in it are sent as stage hints that name their node
(``{"stage": …, "job": …, "node": "n3"}``), through the agent's own ``HintIntake`` into its
``NodeTimelines`` — the path a hint from the job takes live (the engine reads each node's stage
from it as it classifies rows). A hint is repeated every ``ttl / 2`` while a node stays in one
stage, as the client does. ``--no-node-hints`` sends none: every node's stage is then inferred
from its own GPUs (the rack-wide ``stage`` column is blanked too).

Truth: the twin's true AC power of each node credited to that node's own (job, stage) (multinode's
``NodeTruth``). Printed per seed and job: each (job, stage) cell with at least 1 % of its job's IT
energy, the engine's ``job_energy_kwh`` IT figure beside the truth, and the error; then the worst
cell and the worst job total over all seeds. The rack's own IT (Σ PDU) against Σ node truth is
printed too: a difference there is the PDUs' metering, shared by every cell.

Target (issue 14): per-job stage energy within 2 % of the truth. Dev seeds 0–9; report seeds
10000–10004. Measured (``--seeds 5 --first-seed 10000 --days 1``, docs/engine.md "Per-job stage
energy", with the decomposition of the error): job totals within 1.24 %, the worst cell 3.17 %
(before a window's split was final 6 h after it and each feed's readings were divided by its share
at every solve: 1.59 / 4.28 %; before its prior held a cell for one bin's readings instead of four:
1.89 / 6.53 %; before the
node model carried the fans' curve: 3.78 / 6.41 %; before readings were learned only
against GPU readings of their instant and unmeasured minutes filled: 3.76 / 13.1 %; before the
per-window split learned from PDU readings: 4.04 / 11.1 %): met per job, missed per cell.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from accuracy import step_slices
from multinode import STAGE_ENERGY_FLOOR, NodeTruth
from rack_feed import NodeHints, with_nodes

from agent.config.model import EngineSection
from agent.engine import Engine, rack_info
from agent.engine.job_energy import NO_JOB
from agent.sim.params import STAGES
from agent.sim.randomize import random_multijob_scenario
from agent.sim.twin import scenario_truth, simulate_hours, trace_meta
from agent.trace.model import TraceChunk

TARGET_PCT = 2.0


def _blank_stage(chunk: TraceChunk) -> TraceChunk:
    return replace(chunk, stage=np.full(len(chunk), "", dtype=object))


def run_seed(seed: int, days: float, jobs: int, drain: bool, step_s: float, node_hints: bool) -> dict:
    sc = random_multijob_scenario(seed, days=days, nodes=8, per_node=8, jobs=jobs, drain=drain)
    info = scenario_truth(sc)
    meta = trace_meta(sc)
    rack = with_nodes(rack_info(meta), sc, tuple(tuple(g) for g in info["node_gpus"]))
    engine = Engine(EngineSection(), rack, site=meta.site, rack_name=meta.rack)
    feed = NodeHints(engine, [j["id"] for j in info["jobs"]])
    if not node_hints:
        engine.node_hints = None
    truth = NodeTruth([j["id"] for j in info["jobs"]])
    t_engine = 0.0
    for chunk, clean in simulate_hours(sc):
        truth.observe(chunk, clean)
        if not node_hints:
            chunk = _blank_stage(chunk)
        for part in step_slices(chunk.ts, step_s):
            if node_hints:
                feed.send(chunk.ts[part], clean["node_stage"][part], clean["node_job"][part])
            t = time.perf_counter()
            engine.process(chunk.take(part))
            t_engine += time.perf_counter() - t
    engine.finish()
    return {"truth": truth, "table": engine.job_energy.table(), "engine_s": t_engine,
            "rack_it": float(engine.energy_kwh[:, 0].sum()), "counters": feed.intake.counters, "info": info}


def score(r: dict) -> tuple[float, float]:
    """Print the per-job tables; return (worst cell error %, worst job-total error %)."""
    truth: NodeTruth = r["truth"]
    table = r["table"]
    worst_cell = worst_job = 0.0
    for job in sorted({j for j, _ in truth.by_job_stage if j}):
        cells = table.get(job, {})
        t_total = sum(truth.by_job_stage.get((job, s), 0.0) for s in STAGES)
        e_total = sum(c["it"] for c in cells.values())
        err_total = 100.0 * (e_total / t_total - 1.0)
        worst_job = max(worst_job, abs(err_total))
        print(f"    {job:<10} total truth {t_total:8.1f} kWh  engine {e_total:8.1f}  {err_total:+5.2f} %")
        for stage in STAGES:
            t = truth.by_job_stage.get((job, stage), 0.0)
            if t < STAGE_ENERGY_FLOOR * t_total:
                continue
            e = cells.get(stage, {}).get("it", 0.0)
            err = 100.0 * (e / t - 1.0)
            worst_cell = max(worst_cell, abs(err))
            print(f"      {stage:<16} truth {t:8.1f}  engine {e:8.1f}  {err:+5.2f} %")
    known = {k for k, _ in truth.by_job_stage}
    other = {j: sum(c["it"] for c in s.values()) for j, s in table.items() if j not in known}
    if other:
        shown = [f"{'no job' if j == NO_JOB else j} {e:.1f}" for j, e in sorted(other.items())]
        print("    other cells (kWh IT): " + ", ".join(shown))
    return worst_cell, worst_job


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--first-seed", type=int, default=0)
    ap.add_argument("--days", type=float, default=1.0)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--drain", action="store_true")
    ap.add_argument("--step", type=float, default=60.0, help="seconds of trace per engine call")
    ap.add_argument("--no-node-hints", action="store_true")
    args = ap.parse_args()
    seeds = range(args.first_seed, args.first_seed + args.seeds)
    how = "node stages inferred from each node's GPUs" if args.no_node_hints else "per-node hints"
    drained = ", one node drained" if args.drain else ""
    print(f"8 nodes × 8 GPUs, {args.jobs} jobs{drained}, {args.days:g} days, {how}; "
          f"seeds {seeds[0]}…{seeds[-1]}")
    per_seed: list[tuple[float, float]] = []  # (worst cell, worst job) per seed
    for seed in seeds:
        r = run_seed(seed, args.days, args.jobs, args.drain, args.step, not args.no_node_hints)
        truth: NodeTruth = r["truth"]
        c = r["counters"]
        scen = r["info"]["scenario"]
        dropped = sum(v for k, v in c.items() if k not in ("accepted", "commands", "queries", "expired"))
        rack_err = 100 * (r["rack_it"] / truth.rack_kwh - 1)
        print(f"\nseed {seed}: groups {scen.get('node_groups')}, drains {scen.get('drains', [])}; "
              f"rack IT engine {r['rack_it']:.1f} kWh vs node truth {truth.rack_kwh:.1f} "
              f"({rack_err:+.2f} %); "
              "hints accepted "
              f"{c['accepted']}, dropped {dropped}; engine {r['engine_s']:.0f} s")
        cell, job = score(r)
        per_seed.append((cell, job))
        print(f"  seed {seed} worst: job {job:.2f} %, cell {cell:.2f} %")
    summarise(per_seed)
    return 0


def summarise(per_seed: list[tuple[float, float]]) -> None:
    """Over the seeds: the worst, and how the seeds' worst job and worst cell are spread."""
    cells, jobs = np.array([c for c, _ in per_seed]), np.array([j for _, j in per_seed])
    worst_cell, worst_job = float(cells.max()), float(jobs.max())
    verdict = "meets" if worst_cell <= TARGET_PCT else "MISSES"
    print(f"\nall seeds: worst (job, stage) cell {worst_cell:.2f} %, worst job total {worst_job:.2f} %; "
          f"target ≤ {TARGET_PCT} %: {verdict}")
    print(f"per seed ({len(per_seed)}): median worst job {float(np.median(jobs)):.2f} %, "
          f"seeds with a job over {TARGET_PCT} %: {int((jobs > TARGET_PCT).sum())}; "
          f"mean worst cell {float(cells.mean()):.2f} %, seeds with every cell within {TARGET_PCT} %: "
          f"{int((cells <= TARGET_PCT).sum())}, with a cell over 5 %: {int((cells > 5.0).sum())}")


if __name__ == "__main__":
    sys.exit(main())
