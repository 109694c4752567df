"""Trace reader speed against the floor: Python's csv module merely tokenizing the same file.

    .venv/bin/python bench/read_speed.py [--rows 259200] [--gpus 16] [--repeat 3] [--chunk-rows 65536]
    .venv/bin/python bench/read_speed.py --trace DIR/trace.csv     # an existing trace, e.g. from rackwatt sim

Generates (with numpy, no twin needed) a trace shaped like a 3-day, 16-GPU, 1 s recording:
ts, stage, job, work_rate, 5 NVML columns per GPU every row, two PDU feeds every 5 s, a cooling
unit and inlet sensors every 10 s (empty cells in between), then prints the best-of-N times
and the ratio reader / csv-tokenize. Target: ratio <= 2 (replay as a whole must stay <= 5).
"""

from __future__ import annotations

import argparse
import csv
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from agent.trace.reader import open_trace

STAGES = np.array(["idle", "data_load", "forward_backward", "grad_sync", "checkpoint", "eval"])


def generate(path: Path, rows: int, gpus: int, seed: int = 7) -> int:
    """Write a wide trace CSV; returns its size in bytes."""
    rng = np.random.default_rng(seed)
    ts = 1_717_265_412 + np.arange(rows, dtype=np.float64)
    stage = STAGES[(np.arange(rows) // 37) % len(STAGES)]
    columns: dict[str, np.ndarray] = {
        "work_rate": np.where(stage == "forward_backward", np.round(rng.uniform(1000, 2000, rows), 1), np.nan)
    }
    every = np.arange(rows)
    for g in range(gpus):
        columns[f"gpu.{g}.power_w"] = np.round(rng.normal(600, 50, rows), 1)
        columns[f"gpu.{g}.energy_j"] = np.round(1e9 + np.cumsum(rng.uniform(500, 700, rows)), 3)
        columns[f"gpu.{g}.util_pct"] = np.round(rng.uniform(0, 100, rows))
        columns[f"gpu.{g}.mem_util_pct"] = np.round(rng.uniform(0, 100, rows))
        columns[f"gpu.{g}.temp_c"] = np.round(rng.normal(60, 5, rows), 1)
    for feed in ("a", "b"):
        for signal, low, high, places in (
            ("power_w", 3000, 9000, 1),
            ("energy_kwh", 30000, 40000, 3),
            ("voltage_v", 228, 235, 1),
            ("current_a", 10, 40, 2),
            ("pf", 0.9, 1, 3),
        ):
            values = np.round(rng.uniform(low, high, rows), places)
            values[every % 5 != 0] = np.nan
            columns[f"pdu.{feed}.{signal}"] = values
    for signal in ("power_w", "supply_temp_c", "return_temp_c", "setpoint_c", "fan_pct", "cooling_w"):
        values = np.round(rng.uniform(15, 40000, rows), 1)
        values[every % 10 != 3] = np.nan
        columns[f"crac.1.{signal}"] = values
    for pos in ("top", "mid", "bottom"):
        values = np.round(rng.normal(24, 1, rows), 1)
        values[every % 10 != 7] = np.nan
        columns[f"inlet.{pos}.temp_c"] = values
    header = ["ts", "stage", "job", *columns]
    row_format = ",".join(["%.15g", "%s", "%s"] + ["%.15g"] * len(columns))
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        out.write(
            "# rack=r07\n# site=hall-b\n# crac.1.share=0.25\n# interval_s=1\n" + ",".join(header) + "\n"
        )
        for lo in range(0, rows, 20000):
            hi = min(rows, lo + 20000)
            cols = [ts[lo:hi].tolist(), stage[lo:hi].tolist(), ["job-7"] * (hi - lo)]
            cols += [values[lo:hi].tolist() for values in columns.values()]
            out.write(
                "\n".join(row_format % row for row in zip(*cols, strict=True)).replace("nan", "") + "\n"
            )
    return path.stat().st_size


def csv_tokenize(path: Path) -> int:
    rows = 0
    with open(path, newline="", encoding="utf-8") as stream:
        for _ in csv.reader(stream):
            rows += 1
    return rows


def read_trace(path: Path, chunk_rows: int) -> int:
    return sum(len(chunk) for chunk in open_trace(path, chunk_rows=chunk_rows))


def best_of(repeat: int, fn, *args) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=259_200, help="rows (default: 3 days at 1 s)")
    parser.add_argument("--gpus", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs of each")
    parser.add_argument("--chunk-rows", type=int, default=65536)
    parser.add_argument("--trace", type=Path, help="measure this trace instead of a generated one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if args.trace:
            path = args.trace
            args.rows = read_trace(path, args.chunk_rows)
            print(f"{path}: {args.rows} rows, {path.stat().st_size / 1e6:.0f} MB")
        else:
            path = Path(folder) / "trace.csv"
            start = time.perf_counter()
            size = generate(path, args.rows, args.gpus)
            print(
                f"generated {args.rows} rows x {3 + 1 + 5 * args.gpus + 19} columns, {size / 1e6:.0f} MB "
                f"in {time.perf_counter() - start:.1f} s"
            )
            assert read_trace(path, args.chunk_rows) == args.rows
        # Interleave the two so that load from other processes hits both alike.
        csv_s, reader_s = [], []
        for _ in range(args.repeat):
            csv_s.append(best_of(1, csv_tokenize, path))
            reader_s.append(best_of(1, read_trace, path, args.chunk_rows))
        print(f"csv tokenize  : {min(csv_s):.2f} s  ({args.rows / min(csv_s) / 1e3:.0f} k rows/s)")
        print(f"trace reader  : {min(reader_s):.2f} s  ({args.rows / min(reader_s) / 1e3:.0f} k rows/s)")
        print(f"ratio reader / csv-tokenize: {min(reader_s) / min(csv_s):.2f}  (target <= 2)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
