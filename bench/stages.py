"""Stage inference on twin traces replayed without labels, and what it costs the engine.

    .venv/bin/python bench/stages.py                 # steady, plateau, tide; 3 days each
    .venv/bin/python bench/stages.py --days 1 --no-engine     # accuracy only, quick

For each scenario (seeds the tests never use) the twin trace is simulated with its ``stage``,
``job`` and ``work_rate`` columns blank (as ``rackwatt sim --no-hints`` writes it) and fed chunk
by chunk to a fresh ``StageInferrer``; every row's inferred stage is compared with the twin's
true stage, weighted by the row's duration:
- overall time-weighted accuracy;
- per canonical stage, over the time inside true segments that last ≥ 30 s (shorter ones, e.g.
  grad_sync bursts of 1–4 s, count only in the overall figure), and over all its time;
- inference speed (rows/s) and how long a 3-day trace takes.
Then the engine (``agent.engine.Engine``, as ``rackwatt replay`` runs it) is run over the same
trace twice, labelled and unlabelled, and the P95 of the window error
|predicted − measured| / measured is compared.

Targets (issue 5): overall ≥ 90 %; each canonical stage ≥ 75 % (segments ≥ 30 s);
P95 window error with inferred stages ≤ 1.5 × the labelled figure. Exit status 1 if one fails.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SCENARIOS = ("steady", "plateau", "tide")
SEED_BASE = 5500  # tests use seeds < 1000
MIN_SEGMENT_S = 30.0
TARGET_OVERALL = 0.90
TARGET_STAGE = 0.75
TARGET_P95_RATIO = 1.5


@dataclass
class Result:
    scenario: str
    seed: int
    rows: int = 0
    infer_s: float = 0.0
    infer_cpu_s: float = 0.0
    overall: float = float("nan")
    per_stage_long: dict[str, float] = field(default_factory=dict)
    per_stage_all: dict[str, float] = field(default_factory=dict)
    long_seconds: dict[str, float] = field(default_factory=dict)
    p95_labelled: float = float("nan")
    p95_inferred: float = float("nan")
    windows: int = 0


def truth_per_row(ts: np.ndarray, segments: list[list[Any]]) -> tuple[np.ndarray, np.ndarray]:
    """True stage per row, and the length of the true segment the row is in."""
    starts = np.array([s[0] for s in segments], dtype=float)
    ends = np.array([s[1] for s in segments], dtype=float)
    names = np.array([s[2] for s in segments], dtype=object)
    # merge consecutive segments with the same stage (a job boundary does not end a stage run)
    lengths = ends - starts
    run_len = lengths.copy()
    i = 0
    while i < len(names):
        j = i
        while j + 1 < len(names) and names[j + 1] == names[i] and starts[j + 1] == ends[j]:
            j += 1
        run_len[i : j + 1] = ends[j] - starts[i]
        i = j + 1
    idx = np.clip(np.searchsorted(starts, ts, side="right") - 1, 0, len(starts) - 1)
    return names[idx], run_len[idx]


def row_weights(ts: np.ndarray) -> np.ndarray:
    """Seconds each row stands for (its gap to the next row; the last row gets the median)."""
    if ts.size < 2:
        return np.ones_like(ts)
    gaps = np.diff(ts)
    return np.append(gaps, np.median(gaps))


def p95_window_error(records: list[dict[str, Any]]) -> tuple[float, int]:
    errs = [
        abs(r["predicted_kwh"] - r["measured_kwh"]) / r["measured_kwh"]
        for r in records
        if r.get("type") == "window"
        and r.get("predicted_kwh") is not None
        and r.get("measured_kwh")
        and r["measured_kwh"] > 0
    ]
    if not errs:
        return float("nan"), 0
    return float(np.percentile(errs, 95)), len(errs)


def run_engine(chunks: list[Any], scenario: Any) -> list[dict[str, Any]]:
    from agent.engine.engine import Engine
    from agent.engine.rackinfo import rack_info
    from agent.sim.twin import trace_meta

    meta = trace_meta(scenario)
    engine = Engine(rack=rack_info(meta), site=meta.site, rack_name=meta.rack)
    out: list[dict[str, Any]] = []
    for chunk in chunks:
        out += engine.process(chunk)
    out += engine.finish()
    return out


def evaluate(name: str, seed: int, days: float, with_engine: bool) -> Result:
    from agent.sim.scenarios import make_scenario
    from agent.sim.twin import scenario_truth, simulate
    from agent.stages.infer import StageInferrer
    from agent.trace.model import CANONICAL_STAGES

    scenario = make_scenario(name, days, seed, hints=False)
    chunks = list(simulate(scenario))
    result = Result(name, seed, rows=sum(len(c) for c in chunks))
    if any(str(s) for c in chunks for s in c.stage[:10]):
        raise SystemExit("bench/stages.py: the twin wrote stage labels with hints=False")
    inferrer = StageInferrer()
    labels = []
    t, cpu = time.perf_counter(), time.process_time()
    for chunk in chunks:
        out, _ = inferrer.infer_chunk(chunk, np.full(len(chunk), "", dtype=object))
        labels.append(out)
    result.infer_s = time.perf_counter() - t
    result.infer_cpu_s = time.process_time() - cpu
    ts = np.concatenate([c.ts for c in chunks])
    got = np.concatenate(labels)
    truth = scenario_truth(scenario)
    true_stage, run_len = truth_per_row(ts, truth["stage_segments"])
    w = row_weights(ts)
    right = got == true_stage
    result.overall = float(np.sum(w * right) / np.sum(w))
    for stage in CANONICAL_STAGES:
        mask = true_stage == stage
        if mask.any():
            result.per_stage_all[stage] = float(np.sum(w[mask] * right[mask]) / np.sum(w[mask]))
        long = mask & (run_len >= MIN_SEGMENT_S)
        if long.any():
            result.per_stage_long[stage] = float(np.sum(w[long] * right[long]) / np.sum(w[long]))
            result.long_seconds[stage] = float(np.sum(w[long]))
    if with_engine:
        result.p95_inferred, result.windows = p95_window_error(run_engine(chunks, scenario))
        labelled = list(simulate(make_scenario(name, days, seed, hints=True)))
        result.p95_labelled, _ = p95_window_error(run_engine(labelled, scenario))
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=float, default=3.0)
    parser.add_argument("--seeds", type=int, default=1, help="seeds per scenario")
    parser.add_argument("--no-engine", action="store_true", help="skip the window-error comparison")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    args = parser.parse_args()
    tasks = [
        (n, SEED_BASE + 17 * i + k, args.days) for k, n in enumerate(SCENARIOS) for i in range(args.seeds)
    ]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(evaluate, n, s, d, not args.no_engine) for n, s, d in tasks]
        results = [f.result() for f in futures]
    ok = True
    print(f"stage inference without labels, {args.days:g}-day twin traces (accuracy is time-weighted)")
    header = (
        f"{'scenario':9} {'seed':>5} {'overall':>8}  per stage, segments ≥ {MIN_SEGMENT_S:.0f} s (all time)"
    )
    print(header)
    for r in results:
        parts = []
        for stage, acc_all in r.per_stage_all.items():
            acc = r.per_stage_long.get(stage)
            parts.append(f"{stage} {'–' if acc is None else f'{acc:.1%}'} ({acc_all:.1%})")
            if acc is not None and acc < TARGET_STAGE:
                ok = False
        ok &= r.overall >= TARGET_OVERALL
        print(f"{r.scenario:9} {r.seed:5d} {r.overall:8.2%}  " + ", ".join(parts))
    total_rows = sum(r.rows for r in results)
    total_s = sum(r.infer_s for r in results)
    total_cpu_s = sum(r.infer_cpu_s for r in results)
    print(
        f"inference speed: {total_rows / total_cpu_s:,.0f} rows per CPU second, "
        f"{total_rows / total_s:,.0f} rows/s wall ({total_cpu_s / len(results):.2f} s CPU, "
        f"{total_s / len(results):.2f} s wall per {args.days:g}-day trace)"
    )
    if not args.no_engine:
        print(
            f"{'scenario':9} {'seed':>5} {'windows':>8} {'P95 labelled':>13} {'P95 inferred':>13} "
            f"{'ratio':>6}"
        )
        for r in results:
            ratio = r.p95_inferred / r.p95_labelled if r.p95_labelled > 0 else float("nan")
            ok &= bool(ratio <= TARGET_P95_RATIO)
            print(
                f"{r.scenario:9} {r.seed:5d} {r.windows:8d} {r.p95_labelled:13.2%} {r.p95_inferred:13.2%} "
                f"{ratio:6.2f}"
            )
    print(
        f"targets: overall ≥ {TARGET_OVERALL:.0%}, each stage ≥ {TARGET_STAGE:.0%}, "
        f"P95 ratio ≤ {TARGET_P95_RATIO}: {'MET' if ok else 'NOT MET'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
