"""Bench: how fast the rack twin writes a trace, and where the time goes.

Runs ``rackwatt sim``'s work in-process for one scenario: physics + sampling alone, then the
full run writing trace.csv. As a reference measured in the same run, it writes the first hour
with Python's ``csv.writer`` (the obvious implementation) and extrapolates. Prints seconds per
simulated day, the total against the 60 s target for 3 days of 16 GPUs (issue 2), and the peak
memory (the writer streams, so it must not grow with the number of days).

    .venv/bin/python bench/sim.py [--days 3] [--scenario steady] [--gpus 16]
"""

from __future__ import annotations

import argparse
import csv
import math
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.sim import columns, decimals, make_scenario, simulate, trace_meta
from agent.trace.writer import TraceWriter

TARGET_S = 60.0  # issue 2: steady, 3 days, 16 GPUs, 1-s rows, on the 2-core machine


def _csv_writer_hour(sc, path: Path) -> float:  # type: ignore[no-untyped-def]
    """Reference: one hour written with csv.writer, cell by cell (NaN → empty)."""
    chunk = next(iter(simulate(sc)))
    cols = columns(sc)
    started = time.perf_counter()
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(cols)
        numeric = [chunk.numeric.get(c) for c in cols[3:]]
        for i in range(len(chunk)):
            row: list[object] = [int(chunk.ts[i]), chunk.stage[i], chunk.job[i]]
            row += ["" if v is None or math.isnan(v[i]) else float(v[i]) for v in numeric]
            out.writerow(row)
    return (time.perf_counter() - started) * sc.total_s / len(chunk)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=float, default=3.0)
    parser.add_argument("--scenario", default="steady")
    parser.add_argument("--gpus", type=int, default=16)
    args = parser.parse_args()
    sc = make_scenario(args.scenario, days=args.days, seed=1, gpus=args.gpus)

    started = time.perf_counter()
    rows = sum(len(chunk) for chunk in simulate(sc))
    physics_s = time.perf_counter() - started

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.csv"
        started = time.perf_counter()
        with TraceWriter(path, trace_meta(sc), columns(sc), decimals(sc)) as writer:
            for chunk in simulate(sc):
                writer.write(chunk)
        total_s = time.perf_counter() - started
        size_mb = path.stat().st_size / 1e6
        reference_s = _csv_writer_hour(sc, Path(tmp) / "ref.csv") + physics_s
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    shape = f"{rows} rows x {len(columns(sc))} columns, {size_mb:.0f} MB"
    print(f"scenario {sc.name}, {args.days:g} days, {sc.gpus} GPUs: {shape}")
    print(f"physics + sampling   {physics_s:7.1f} s   ({physics_s / args.days:.1f} s/day)")
    print(f"with writing CSV     {total_s:7.1f} s   ({total_s / args.days:.1f} s/day)")
    ratio = reference_s / total_s
    print(f"csv.writer reference {reference_s:7.1f} s   (extrapolated from one hour) -> {ratio:.1f}x slower")
    scaled = total_s * 3.0 / args.days * 16 / sc.gpus
    print(f"target: 3 days x 16 GPUs <= {TARGET_S:.0f} s; this run scales to {scaled:.1f} s")
    print(f"peak RSS {peak_mb:.0f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
