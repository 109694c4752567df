"""Time and peak memory of the configuration loader on issue 18's crashers, against a normal file.

Issue 18 measured, before the input limits: a 42 KB file with a 20 000-part dotted table header
took 52 s and 3.9 GB; deep nesting raised RecursionError. Each case here is loaded once to time it
(wall clock, best of ``--repeat``) and once under tracemalloc for its peak Python allocation; the
reference is the shipped packaging/agent.toml with a site and rack set, measured in the same run.
Deterministic inputs (no seed).

    .venv/bin/python bench/config_limits.py
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from agent.config.errors import ConfigError
from agent.config.loader import load_config

ROOT = Path(__file__).resolve().parents[1]
HEAD = '[agent]\nsite = "lab"\nrack = "r1"\n'


def _cases() -> dict[str, str]:
    example = (ROOT / "packaging" / "agent.toml").read_text()
    def pdus(n: int) -> str:
        return "".join(f'[[pdu]]\nid = "p{i}"\nhost = "10.0.{i // 250}.{i % 250}"\n' for i in range(n))

    return {
        "reference: packaging/agent.toml": example.replace('"my-site"', '"lab"').replace('"my-rack"', '"r1"'),
        "20 000-part dotted header (42 KB)": HEAD + "[" + ".".join(["a"] * 20000) + "]\n",
        "5 000 nested arrays": HEAD + "x = " + "[" * 5000 + "]" * 5000 + "\n",
        "3 000 nested inline tables": HEAD + "x = " + "{a=" * 3000 + "1" + "}" * 3000 + "\n",
        "NUL in state_dir": HEAD + 'state_dir = "/var/lib/\\u0000x"\n',
        "5 000-char password_file": HEAD + '[mqtt]\nusername = "u"\npassword_file = "' + "p" * 5000 + '"\n',
        "3 000 [[pdu]] tables (within 128 KiB)": HEAD + pdus(3000),
        "6 000 [[pdu]] tables (over 128 KiB)": HEAD + pdus(6000),
    }


def _load(path: Path) -> str:
    try:
        load_config(path)
    except ConfigError as exc:
        return f"{len(exc.issues)} issue(s): {str(exc.issues[0])[:70]}"
    return "OK"


def _measure(fn: Callable[[], str], repeat: int) -> tuple[float, int, str]:
    best = float("inf")
    outcome = ""
    for _ in range(repeat):
        started = time.perf_counter()
        outcome = fn()
        best = min(best, time.perf_counter() - started)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return best, peak, outcome


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed loads per case (best is shown)")
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name, text in _cases().items():
            path = Path(folder) / "agent.toml"
            path.write_text(text)
            rows.append((name, len(text), *_measure(lambda p=path: _load(p), args.repeat)))
    ref_s, ref_peak = rows[0][2], rows[0][3]
    print(f"{'case':<44} {'bytes':>8} {'time ms':>9} {'x ref':>7} {'peak MB':>8} {'x ref':>6}  outcome")
    for name, size, seconds, peak, outcome in rows:
        print(f"{name:<44} {size:>8} {seconds * 1000:>9.1f} {seconds / ref_s:>7.1f} {peak / 2**20:>8.2f} "
              f"{peak / ref_peak:>6.1f}  {outcome}")


if __name__ == "__main__":
    main()
