"""The NVML driver against a real GPU: what it reads, and whether its energy adds up.

    .venv/bin/python bench/nvml_real.py [--seconds 60] [--gpus 0] [--no-load]

Run it wherever a real NVIDIA GPU is at hand (the project's CI has none; its tests fake
``pynvml``). For ``--seconds`` it polls ``NvmlGpuDriver`` once a second while, unless
``--no-load``, a load generator keeps the GPU busy for the middle third of the run (PyTorch or
CuPy matrix multiplies if either is installed; otherwise the run is idle and says so). Printed:

- what each poll saw per GPU (power, utilisation, memory utilisation, temperature, SM clock);
- the energy counter's increase over the run beside the trapezoidal integral of the polled
  power (a ratio near 1 says the counter and the power reading agree; the counter is the one
  rackwatt trusts);
- whether ``energy_j`` ever stepped back (it must not: the driver makes it reset-safe);
- the driver's own poll time per GPU.

Exit status 0 when every poll answered, 1 otherwise, 2 when NVML cannot start.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import itertools

from agent.config.model import NvmlSection
from drivers.nvml_gpu.driver import NvmlGpuDriver


def start_load(stop: threading.Event, gpus: list[int]) -> str:
    """Start a matrix-multiply load on the GPUs in a thread; returns what it uses (or why not)."""
    try:
        import torch  # type: ignore[import-not-found]

        if not torch.cuda.is_available():
            return "none (PyTorch without CUDA)"

        def run_torch() -> None:
            devices = [torch.device(f"cuda:{i}") for i in gpus]
            mats = [torch.randn(8192, 8192, device=d) for d in devices]
            while not stop.is_set():
                for m in mats:
                    m @ m
                torch.cuda.synchronize()

        threading.Thread(target=run_torch, daemon=True).start()
        return "PyTorch matmul 8192²"
    except ImportError:
        pass
    try:
        import cupy  # type: ignore[import-not-found]

        def run_cupy() -> None:
            mats = []
            for i in gpus:
                with cupy.cuda.Device(i):
                    mats.append((i, cupy.random.rand(8192, 8192, dtype=cupy.float32)))
            while not stop.is_set():
                for i, m in mats:
                    with cupy.cuda.Device(i):
                        m @ m
                cupy.cuda.Stream.null.synchronize()

        threading.Thread(target=run_cupy, daemon=True).start()
        return "CuPy matmul 8192²"
    except ImportError:
        return "none (neither PyTorch nor CuPy installed)"


async def main_async(args: argparse.Namespace) -> int:
    gpus = [int(g) for g in args.gpus.split(",")] if args.gpus else None
    driver = NvmlGpuDriver(NvmlSection(gpus=tuple(gpus) if gpus else None, interval_s=1.0))
    first = await driver.poll()
    if not first.ok and not first.signals:
        print(f"NVML did not start: {first.error}")
        return 2
    indices = sorted({int(name.split(".")[1]) for name in first.signals})
    print(f"GPUs: {indices}; first poll {first.elapsed_ms:.1f} ms; error: {first.error}")
    stop = threading.Event()
    load = "off (--no-load)"
    polls, failed, stepped_back = [first], 0, 0
    t_start = time.monotonic()
    third = args.seconds / 3
    while (now := time.monotonic() - t_start) < args.seconds:
        if not args.no_load and third <= now and load.startswith("off"):
            load = start_load(stop, indices)
            print(f"load: {load} from {now:.0f} s")
        if now >= 2 * third and not stop.is_set() and not load.startswith("off"):
            stop.set()
            print(f"load stopped at {now:.0f} s")
        await asyncio.sleep(1.0 - (time.monotonic() - t_start) % 1.0)
        result = await driver.poll()
        failed += not result.ok
        for i in indices:
            before = polls[-1].signals.get(f"gpu.{i}.energy_j")
            after = result.signals.get(f"gpu.{i}.energy_j")
            if before is not None and after is not None and after < before:
                stepped_back += 1
        polls.append(result)
        if len(polls) % 10 == 0:
            row = "  ".join(
                f"gpu{i} {result.signals.get(f'gpu.{i}.power_w', float('nan')):6.1f} W "
                f"{result.signals.get(f'gpu.{i}.util_pct', float('nan')):3.0f} % "
                f"mem {result.signals.get(f'gpu.{i}.mem_util_pct', float('nan')):3.0f} % "
                f"{result.signals.get(f'gpu.{i}.temp_c', float('nan')):3.0f} °C "
                f"{result.signals.get(f'gpu.{i}.sm_clock_mhz', float('nan')):5.0f} MHz"
                for i in indices
            )
            print(f"t={now:5.0f} s  {row}")
    stop.set()
    await driver.close()
    print("\nper GPU: counter energy over the run vs ∫ polled power dt")
    for i in indices:
        series = [(p.ts, p.signals.get(f"gpu.{i}.power_w"), p.signals.get(f"gpu.{i}.energy_j"))
                  for p in polls]
        energy = [(t, e) for t, _, e in series if e is not None]
        power = [(t, w) for t, w, _ in series if w is not None]
        integral = sum((t1 - t0) * (w0 + w1) / 2
                       for (t0, w0), (t1, w1) in itertools.pairwise(power))
        counted = energy[-1][1] - energy[0][1] if len(energy) > 1 else float("nan")
        estimated = any(f"gpu.{i}.energy_j" in p.estimated for p in polls)
        ratio = counted / integral if integral > 0 else float("nan")
        print(f"  gpu{i}: counter {counted:9.1f} J{' (estimated: no counter)' if estimated else ''}, "
              f"∫power {integral:9.1f} J, ratio {ratio:.3f}")
    times = [p.elapsed_ms for p in polls]
    print(f"\npolls {len(polls)}, failed {failed}, energy stepped back {stepped_back} times; "
          f"poll time median {sorted(times)[len(times) // 2]:.1f} ms, max {max(times):.1f} ms; load: {load}")
    return 0 if failed == 0 and stepped_back == 0 else 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--gpus", default="", help="comma-separated NVML indices (default: all)")
    ap.add_argument("--no-load", action="store_true")
    return asyncio.run(main_async(ap.parse_args()))


if __name__ == "__main__":
    raise SystemExit(main())
