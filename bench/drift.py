"""Drift detection on twin traces at seeds the tests never use: detection, delay, cause, false alarms.

    .venv/bin/python bench/drift.py              # default: a few minutes on 2 cores
    .venv/bin/python bench/drift.py --full       # more magnitudes, seeds and healthy days
    .venv/bin/python bench/drift.py --randomized [--seeds 50] [--family churn] [--per-fault] [--pdu-delay-s N]
                                                 # randomised racks with and without labels
    .venv/bin/python bench/drift.py --randomized --seeds 50 --jobs 1 --save runs.pkl
    .venv/bin/python bench/drift.py --randomized --table-from runs.pkl
                                                 # a long run kept run by run; its table so far
    .venv/bin/python bench/drift.py --full --only steady --only plateau --only tide --healthy-seeds 5
                                                 # false alarms only: 5 × 8 days per healthy scenario

For every fault kind of the twin (step and gradual, magnitudes 3–10 %) the trace is simulated,
replayed through the same ``Engine`` as ``rackwatt replay`` (which runs the ``DriftMonitor``),
and the first non-workload onset after the fault starts is scored:
- detected: within 3 h of the reference time;
- delay: onset − reference; the reference is the fault start for a step, and for a gradual fault
  the moment its ramp crossed 3 % (its full magnitude if that is 3 % or less);
- cause: the onset's cause against the twin's truth.
``gpu_driver@job`` places the driver update 5–30 min after the first job change after 20 h in the
trace (updates happen in maintenance windows, i.e. at job restarts), while the GPU baseline is
re-learning the new job.
Healthy scenarios (steady, plateau, tide) give false alarms per day (onsets other than
``workload``); lag_steps must give none at all; workload_change must give a ``workload`` event
and no fault.

``early`` counts non-workload onsets before the fault, ``other`` onsets after the first that
name another cause. ``--no-outdoor-sensor``: the cooling unit reports no outdoor air
temperature, so the weather's part of its efficiency is not measured.

Prints one table; nothing is written. Targets (issue 4): detection within 3 h for every fault,
median delay ≤ 30 min, cause right ≥ 90 %; false alarms ≤ 0.1/day (steady, plateau),
≤ 0.3/day (tide); zero from lag-only transients.
"""

from __future__ import annotations

import argparse
import math
import pickle
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/drift_random.py

DETECT_WITHIN_S = 3 * 3600.0
SEED_BASE = 7100  # tests use seeds < 1000
FAULT_KINDS = ("cooling", "setpoint", "power_chain", "hotspot", "gpu_ageing", "gpu_driver")


@dataclass(frozen=True)
class Job:
    """One simulated run: a scenario, optionally with one fault of the given kind/shape/magnitude."""

    scenario: str
    days: float
    seed: int
    kind: str = ""
    shape: str = ""
    magnitude_pct: float = 0.0
    start_h: float = 40.0
    ramp_h: float = 6.0
    after_job_min: float = -1.0  # ≥ 0: the fault starts this long after the first job change ≥ 20 h
    outdoor_sensor: bool = True  # the cooling unit reports its outdoor air temperature

    @property
    def label(self) -> str:
        return f"{self.kind}@job" if self.after_job_min >= 0 else self.kind


def replay_events(job: Job) -> tuple[list[dict[str, Any]], dict[str, Any], float]:
    """Simulate ``job`` and replay it through the engine; returns (events, truth, seconds)."""
    from agent.config.model import EngineSection
    from agent.engine.engine import Engine
    from agent.engine.frames import RackInfo
    from agent.sim import FaultSpec, make_scenario, scenario_truth, simulate, trace_meta

    fault = None
    start_h = job.start_h
    if job.after_job_min >= 0:  # a driver update in a maintenance window: right after a job restart
        plain = make_scenario(job.scenario, days=job.days, seed=job.seed, outdoor_sensor=job.outdoor_sensor)
        starts = [(float(j["start_ts"]) - plain.start_ts) / 3600.0 for j in scenario_truth(plain)["jobs"]]
        start_h = next(h for h in starts if 20.0 <= h <= job.days * 24.0 - 4.0) + job.after_job_min / 60.0
    if job.kind:
        fault = FaultSpec(
            job.kind, start_h=start_h, magnitude_pct=job.magnitude_pct, shape=job.shape, ramp_h=job.ramp_h
        )
    sc = make_scenario(
        job.scenario, days=job.days, seed=job.seed, fault=fault, outdoor_sensor=job.outdoor_sensor
    )
    meta = trace_meta(sc)
    engine = Engine(
        EngineSection(), RackInfo(crac_shares=dict(meta.crac_shares)), site=meta.site, rack_name=meta.rack
    )
    started = time.perf_counter()
    events: list[dict[str, Any]] = []
    for chunk in simulate(sc):
        events += [r for r in engine.process(chunk) if r.get("type") == "event"]
    events += [r for r in engine.finish() if r.get("type") == "event"]
    return events, scenario_truth(sc), time.perf_counter() - started


def _reference_ts(fault: dict[str, Any]) -> float:
    start, full = float(fault["start_ts"]), float(fault["full_ts"])
    magnitude = float(fault["magnitude_pct"])
    if fault["shape"] != "gradual" or magnitude <= 3.0:
        return full
    return start + (full - start) * 3.0 / magnitude


def score_fault(job: Job) -> dict[str, Any]:
    events, truth, seconds = replay_events(job)
    fault = truth["faults"][0]
    start = float(fault["start_ts"])
    ref = _reference_ts(fault)
    faults = [e for e in events if e["state"] == "onset" and e["cause"] != "workload"]
    early = [e for e in faults if float(e["ts"]) < start]
    after = [e for e in faults if float(e["ts"]) >= start]
    first = after[0] if after else None
    # onsets after the first that name another cause: false alarms the fault set off elsewhere
    other = [e for e in after[1:] if e["cause"] != fault["cause"]]
    delay = float(first["ts"]) - ref if first else math.nan
    return {
        "job": job,
        "seconds": seconds,
        "truth_cause": fault["cause"],
        "detected": first is not None and delay <= DETECT_WITHIN_S,
        "delay_s": delay,
        "cause": first["cause"] if first else None,
        "false_before": len(early),
        "other_after": len(other),
        "explanation": first["detail"]["explanation"] if first else "",
    }


def score_healthy(job: Job) -> dict[str, Any]:
    events, truth, seconds = replay_events(job)
    onsets = [e for e in events if e["state"] == "onset"]
    faults = [e for e in onsets if e["cause"] != "workload"]
    result: dict[str, Any] = {
        "job": job,
        "seconds": seconds,
        "false_alarms": len(faults),
        "workload_events": len(onsets) - len(faults),
        "causes": sorted({e["cause"] for e in faults}),
    }
    changes = [c for c in truth["workload_changes"] if c.get("kind") != "plateau"]
    if changes:
        t = float(changes[0]["ts"])
        result["workload_flagged"] = any(
            e["cause"] == "workload" and 0 <= float(e["ts"]) - t <= DETECT_WITHIN_S for e in onsets
        )
    return result


def _jobs(full: bool, healthy_seeds: int = 1) -> tuple[list[Job], list[Job]]:
    magnitudes = (3.0, 5.0, 10.0) if full else (3.0, 8.0)
    seeds = 2 if full else 1
    faults: list[Job] = []
    n = 0
    for kind in FAULT_KINDS:
        for shape in ("step", "gradual"):
            if kind == "gpu_driver" and shape == "gradual":
                continue
            for magnitude in magnitudes:
                for _ in range(seeds):
                    n += 1
                    faults.append(Job(f"fault_{kind}", 2.75, SEED_BASE + n, kind, shape, magnitude))
    for i, magnitude in enumerate(magnitudes):  # a driver update 5–30 min after a job change
        for s in range(seeds):
            faults.append(Job("fault_gpu_driver", 2.75, SEED_BASE + 601 + 2 * i + s, "gpu_driver", "step",
                              magnitude, after_job_min=(12.0, 24.0, 6.0, 30.0)[(2 * i + s) % 4]))
    healthy_days = 8.0 if full else 4.0
    healthy = [
        Job(name, healthy_days, SEED_BASE + 501 + k + 10 * i)
        for i in range(healthy_seeds)
        for k, name in enumerate(("steady", "plateau", "tide"))
    ]
    healthy += [
        Job("lag_steps", 2.0, SEED_BASE + 504),
        Job("workload_change", 2.0, SEED_BASE + 505),
    ]
    return faults, healthy


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true", help="more magnitudes, seeds and healthy days")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--only", action="append",
                        help="run only scenarios whose name contains this (repeatable: any of them)")
    parser.add_argument("--healthy-seeds", type=int, default=1, metavar="N",
                        help="seeds per healthy scenario (steady, plateau, tide): a tighter false-alarm rate")
    parser.add_argument("--no-outdoor-sensor", action="store_true",
                        help="cooling unit without an outdoor air probe (the weather is not measured)")
    parser.add_argument("--randomized", action="store_true",
                        help="judge randomised racks (bench/drift_random.py), with and without labels")
    parser.add_argument("--family", action="append", choices=("single", "churn"),
                        help="--randomized: family to run (repeatable; default both)")
    parser.add_argument("--seeds", type=int, default=6, help="--randomized: seeds per family (default 6)")
    parser.add_argument("--first-seed", type=int, default=10_000,
                        help="--randomized: first seed (reports use ≥ 10 000; 0–999 are for development)")
    parser.add_argument("--days", type=float, default=3.0, help="--randomized: days per trace (default 3)")
    parser.add_argument("--per-fault", action="store_true", help="--randomized: one line per scored fault")
    parser.add_argument("--pdu-delay-s", type=int, default=0, metavar="N",
                        help="--randomized: PDU power readings show the power N s before their timestamp")
    parser.add_argument("--save", metavar="FILE",
                        help="--randomized: append each finished run to FILE (pickle), seed by seed")
    parser.add_argument("--table-from", metavar="FILE",
                        help="--randomized: print the table of the seeds a --save FILE holds every run of")
    args = parser.parse_args(argv)
    if args.randomized:
        return _main_randomized(args)
    fault_jobs, healthy_jobs = _jobs(args.full, max(1, args.healthy_seeds))
    if args.no_outdoor_sensor:
        fault_jobs = [replace(j, outdoor_sensor=False) for j in fault_jobs]
        healthy_jobs = [replace(j, outdoor_sensor=False) for j in healthy_jobs]
        print("cooling unit without an outdoor air probe")
    if args.only:
        fault_jobs = [j for j in fault_jobs if any(o in j.scenario for o in args.only)]
        healthy_jobs = [j for j in healthy_jobs if any(o in j.scenario for o in args.only)]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        healthy_futures = [pool.submit(score_healthy, j) for j in healthy_jobs]
        fault_results = list(pool.map(score_fault, fault_jobs))
        healthy_results = [f.result() for f in healthy_futures]
    _print_faults(fault_results)
    if fault_results:
        print("mag% is the twin's own fault magnitude (cooling: COP lowered by %; setpoint: lowered by %"
              " of its °C; power_chain: extra loss, % of node input on one feed; hotspot: % of exhaust"
              " recirculated; GPU: % more power), not the size of the shift in the component's residual.")
    _print_healthy(healthy_results)
    print(f"\nwall time {time.perf_counter() - started:.0f} s")
    return 0


def _main_randomized(args: argparse.Namespace) -> int:
    import drift_random as dr

    started = time.perf_counter()
    if args.table_from:  # only seeds with every run: each line of the table on the same seeds
        results = _load_results(args.table_from)
        complete = _complete_seeds(results)
        results = [r for r in results if r["job"].seed in complete]
    else:
        jobs = dr.randomized_jobs(args.family or ["single", "churn"], args.seeds, args.first_seed, args.days,
                                  args.pdu_delay_s)
        # Seed by seed (each family, with and without labels): a run cut short still has every
        # family and labelling on the same seeds.
        jobs.sort(key=lambda j: j.seed)
        results = []
        with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            for result in pool.map(dr.run_random, jobs):
                results.append(result)
                if args.save:
                    with open(args.save, "ab") as out:
                        pickle.dump(result, out)
    _print_seeds(results)
    dr.print_table(results)
    if args.per_fault:
        dr.print_faults(results)
    print(f"\nwall time {time.perf_counter() - started:.0f} s")
    return 0


def _load_results(path: str) -> list[dict[str, Any]]:
    """The runs a ``--save`` file holds (a run still going, or cut short, has the finished ones)."""
    results: list[dict[str, Any]] = []
    with open(path, "rb") as saved:
        while True:
            try:
                results.append(pickle.load(saved))
            except EOFError:
                return results


def _complete_seeds(results: list[dict[str, Any]]) -> set[int]:
    """Seeds whose every (family, labels) run is there."""
    def runs(seed: int | None) -> set[tuple[str, bool]]:  # (family, labels) run on ``seed`` (None: any)
        return {(r["job"].family, r["job"].hints) for r in results if seed in (None, r["job"].seed)}

    return {s for s in {r["job"].seed for r in results} if runs(s) == runs(None)}


def _print_seeds(results: list[dict[str, Any]]) -> None:
    """Which seeds the table covers (only finished runs count; a cut-short run says so)."""
    seeds = sorted({r["job"].seed for r in results})
    days = sorted({r["job"].days for r in results})
    complete = _complete_seeds(results)
    span = f"{seeds[0]}–{seeds[-1]}" if seeds else "none"
    print(f"randomised racks: seeds {span} ({len(seeds)} seeds, {len(complete)} with every run), "
          f"{', '.join(f'{d:g}' for d in days)} days each")


def _print_faults(results: list[dict[str, Any]]) -> None:
    if not results:
        return
    print("fault detection (first non-workload onset after the fault start)")
    print(
        f"{'fault':<14} {'shape':<8} {'mag%':>5} {'det':>4} {'delay min':>9} {'cause':<13} {'truth':<13} "
        f"{'early':>5} {'other':>5}"
    )
    for r in results:
        j = r["job"]
        delay = "-" if math.isnan(r["delay_s"]) else f"{r['delay_s'] / 60:.0f}"
        print(
            f"{j.label:<14} {j.shape:<8} {j.magnitude_pct:>5.1f} {'yes' if r['detected'] else 'NO':>4} "
            f"{delay:>9} {r['cause'] or '-':<13} {r['truth_cause']:<13} {r['false_before']:>5} "
            f"{r['other_after']:>5}"
        )
    print()
    print(f"{'fault':<14} {'runs':>4} {'detected':>8} {'median min':>10} {'max min':>8} {'cause ok':>8} "
          f"{'early+other':>11}")
    labels = sorted({r["job"].label for r in results}, key=lambda k: (FAULT_KINDS.index(k.split("@")[0]), k))
    for kind in [*labels, "ALL"]:
        rs = [r for r in results if kind in ("ALL", r["job"].label)]
        delays = [r["delay_s"] / 60 for r in rs if r["detected"]]
        ok = sum(1 for r in rs if r["cause"] == r["truth_cause"])
        med = f"{statistics.median(delays):.0f}" if delays else "-"
        mx = f"{max(delays):.0f}" if delays else "-"
        extra = sum(r["false_before"] + r["other_after"] for r in rs)
        print(
            f"{kind:<14} {len(rs):>4} {sum(r['detected'] for r in rs):>8} {med:>10} {mx:>8} "
            f"{100 * ok / len(rs):>7.0f}% {extra:>11}"
        )


def _print_healthy(results: list[dict[str, Any]]) -> None:
    """One line per scenario, its seeds pooled: false alarms per day over all their days."""
    if not results:
        return
    print("\nhealthy and lag-only scenarios")
    print(f"{'scenario':<16} {'runs':>4} {'days':>6} {'false alarms':>12} {'per day':>8} {'workload ev':>11} "
          "notes")
    for name in dict.fromkeys(r["job"].scenario for r in results):
        rs = [r for r in results if r["job"].scenario == name]
        days = sum(r["job"].days for r in rs)
        alarms = sum(r["false_alarms"] for r in rs)
        notes = ", ".join(sorted({c for r in rs for c in r["causes"]}))
        flagged = [r["workload_flagged"] for r in rs if "workload_flagged" in r]
        if flagged:
            notes = (notes + "; " if notes else "") + f"job change flagged workload: {all(flagged)}"
        print(
            f"{name:<16} {len(rs):>4} {days:>6.1f} {alarms:>12} {alarms / days:>8.2f} "
            f"{sum(r['workload_events'] for r in rs):>11} {notes}"
        )


if __name__ == "__main__":
    sys.exit(main())
