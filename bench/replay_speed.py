"""``rackwatt replay`` speed against the floor: Python's csv module merely tokenizing the same file.

    .venv/bin/python bench/replay_speed.py [--days 3] [--gpus 64] [--trace PATH] [--repeat 2]

Writes a twin trace (steady scenario, 1 s rows, ``--gpus`` GPUs; or uses ``--trace``), then in
the same run measures (best of ``--repeat``): csv-tokenize time, reader-only time (parse into
chunks), and the whole replay (reader + engine + report writing, in process, the same code as
the command). Prints the ratio replay / tokenize (target ≤ 3) and the peak RSS growth.
"""

from __future__ import annotations

import argparse
import csv
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.cli import build_parser
from agent.engine import replay_cmd
from agent.engine.batch_heap import keep_freed_memory
from agent.engine.signals import engine_never_reads
from agent.trace.reader import open_trace


def make_trace(path: Path, days: float, gpus: int) -> None:
    from agent.sim.scenarios import make_scenario
    from agent.sim.twin import columns, decimals, simulate, trace_meta
    from agent.trace.writer import TraceWriter

    scenario = make_scenario("steady", days=days, seed=9301, gpus=gpus)
    with TraceWriter(path, trace_meta(scenario), columns(scenario), decimals(scenario)) as writer:
        for chunk in simulate(scenario):
            writer.write(chunk)


def tokenize(path: Path) -> float:
    t = time.perf_counter()
    with open(path, newline="", encoding="utf-8") as f:
        for _ in csv.reader(f):
            pass
    return time.perf_counter() - t


def read_only(path: Path) -> float:
    """The reader as the replay runs it (columns the engine never reads left unconverted)."""
    t = time.perf_counter()
    for _ in open_trace(path, skip=engine_never_reads):
        pass
    return time.perf_counter() - t


def replay(path: Path, out: Path) -> float:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    replay_cmd.configure(sub.choices["replay"])
    args = parser.parse_args(["replay", str(path), "--report", str(out)])
    t = time.perf_counter()
    rc = replay_cmd.run(args)
    elapsed = time.perf_counter() - t
    if rc != 0:
        raise SystemExit(f"replay failed with exit status {rc}")
    return elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=float, default=3.0)
    ap.add_argument("--gpus", type=int, default=64)  # issue 14's rack: 8 nodes × 8 GPUs
    ap.add_argument("--trace", type=Path)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    # the replay command sets this first thing; set here so every measurement runs under it
    print(f"glibc keeps freed memory for reuse (agent/engine/batch_heap.py): {keep_freed_memory()}")
    with tempfile.TemporaryDirectory(prefix="rackwatt-bench-") as tmp:
        path = args.trace or Path(tmp) / "trace.csv"
        if args.trace is None:
            t = time.perf_counter()
            make_trace(path, args.days, args.gpus)
            print(f"wrote a {args.days:g}-day {args.gpus}-GPU twin trace in {time.perf_counter() - t:.1f} s")
        size_mb = path.stat().st_size / 1e6
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        tok = min(tokenize(path) for _ in range(args.repeat))
        rd = min(read_only(path) for _ in range(args.repeat))
        rep = min(replay(path, Path(tmp) / "report.jsonl") for _ in range(args.repeat))
        rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"trace {size_mb:.0f} MB")
    print(f"csv tokenize   {tok:7.2f} s   (1.00×)")
    print(f"reader only    {rd:7.2f} s   ({rd / tok:.2f}×)")
    print(f"replay         {rep:7.2f} s   ({rep / tok:.2f}×)   engine ≈ {rep - rd:.2f} s")
    print(f"peak RSS growth during the measurements: {(rss1 - rss0) / 1024:.0f} MB")
    print(f"target (issue 14) replay ≤ 3× tokenize: {'meets' if rep <= 3 * tok else 'MISSES'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
