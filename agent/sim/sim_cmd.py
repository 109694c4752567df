"""``rackwatt sim``: simulate a scenario and write DIR/trace.csv and DIR/truth.json."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from agent.sim.faults import SHAPES
from agent.sim.randomize import FAMILIES, LAYOUT_FAMILIES, random_scenario
from agent.sim.scenarios import SCENARIOS, make_scenario
from agent.sim.twin import columns, decimals, scenario_truth, simulate, trace_meta
from agent.trace.writer import TraceWriter


def configure(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--scenario", default="steady", choices=list(SCENARIOS), help="scenario name")
    add("--days", type=float, default=3.0, help="simulated days (default 3)")
    add("--seed", type=int, default=0, help="random seed (same seed → same trace)")
    add("--out", type=Path, required=True, help="output directory (created if missing)")
    add("--gpus", type=int, default=16, help="GPUs in the rack, 8 per node (default 16)")
    add("--no-hints", action="store_true", help="blank stage, job and work_rate in the trace")
    add("--fault-magnitude", type=float, metavar="PCT", help="override every fault's magnitude, %%")
    add("--fault-shape", choices=SHAPES, help="override every fault's shape")
    add("--fault-start-h", type=float, metavar="H", help="override every fault's start, hours")
    add("--no-outdoor-sensor", action="store_true",
        help="leave out the cooling unit's outdoor air temperature (a unit without that probe)")
    add("--randomize", action="store_true",
        help="draw the rack, its instruments and its jobs from wide ranges (seed decides; see docs/twin.md)")
    add("--family", choices=[*FAMILIES, *LAYOUT_FAMILIES], default="single",
        help="with --randomize: single (one job kind, restarts), churn (short mixed jobs) or "
        "multijob (node groups with their own jobs, a drained node)")
    add("--quiet", action="store_true", help="print nothing on success")


def run(args: argparse.Namespace) -> int:
    try:
        if args.randomize:
            scenario = random_scenario(args.seed, args.family, days=args.days, hints=not args.no_hints)
        else:
            scenario = make_scenario(
                args.scenario, days=args.days, seed=args.seed, gpus=args.gpus, hints=not args.no_hints,
                fault_magnitude_pct=args.fault_magnitude, fault_shape=args.fault_shape,
                fault_start_h=args.fault_start_h, outdoor_sensor=not args.no_outdoor_sensor,
            )
    except ValueError as exc:
        print(f"rackwatt sim: {exc}", file=sys.stderr)
        return 2
    out: Path = args.out
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        print(f"rackwatt sim: cannot create {out}: {exc.strerror}", file=sys.stderr)
        return 1
    started = time.perf_counter()
    rows = 0
    trace_path = out / "trace.csv"
    try:
        with TraceWriter(trace_path, trace_meta(scenario), columns(scenario), decimals(scenario)) as writer:
            for chunk in simulate(scenario):
                writer.write(chunk)
                rows += len(chunk)
        truth_path = out / "truth.json"
        tmp = truth_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(scenario_truth(scenario), separators=(",", ":")) + "\n", encoding="utf-8")
        tmp.replace(truth_path)
    except OSError as exc:
        print(f"rackwatt sim: writing {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if not args.quiet:
        elapsed = time.perf_counter() - started
        summary = f"{rows} rows, {scenario.gpus} GPUs, {elapsed:.1f} s"
        print(f"wrote {trace_path} and {out / 'truth.json'} ({summary})")
    return 0
