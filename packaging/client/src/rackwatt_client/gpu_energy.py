"""The job's own GPU energy: NVML's total-energy counter of the GPUs this process may use.

Why the counter and not sampled power: the driver integrates power itself at its own rate, so a
difference of two readings is exact whatever the window's length (zeus does the same). Units are
converted in one place (NVML's mJ → J). Which GPUs: those ``CUDA_VISIBLE_DEVICES`` names by index
(the job's share of the node), else every GPU NVML sees. ``pynvml`` comes from the nvidia-ml-py
package, which this client does not require: without it, or without a GPU, or on a GPU older than
Volta (no energy counter), the energy is None with the reason, probed once and cached. A counter
that goes backwards (driver reload, GPU reset) makes the window's GPU energy None, never negative.
"""

from __future__ import annotations

import importlib
import logging
import os
from typing import Any

_log = logging.getLogger("rackwatt.client")

MJ_PER_J = 1000.0  # nvmlDeviceGetTotalEnergyConsumption counts millijoules


class GpuEnergyMeter:
    """Reads the summed energy counters (mJ) of the job's GPUs; ``reason`` says why not, if not."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: list[tuple[int, Any]] = []
        self.reason: str | None = None
        self._probed = False

    def _probe(self) -> None:
        self._probed = True
        self._find()
        if self.reason is not None:  # said once: the probe's result is cached for the process
            _log.info("rackwatt client: no GPU energy in windows: %s", self.reason)

    def _find(self) -> None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            self.reason = "pynvml is not importable here (pip install nvidia-ml-py for GPU energy)"
            return
        try:
            nvml.nvmlInit()
            indices = _visible_indices(int(nvml.nvmlDeviceGetCount()))
            handles = [(i, nvml.nvmlDeviceGetHandleByIndex(i)) for i in indices]
            for _i, handle in handles:  # a GPU without the counter raises NVMLError_NotSupported
                nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
        except Exception as exc:  # pynvml.NVMLError and kin: the module is imported lazily, so caught broadly
            self.reason = f"NVML: {type(exc).__name__}: {exc}"
            return
        if not handles:
            self.reason = "no GPU visible to this process (CUDA_VISIBLE_DEVICES, or none in NVML)"
            return
        self._nvml, self._handles = nvml, handles

    def read_mj(self) -> dict[int, int] | None:
        """GPU index → counter (mJ) now, or None (``reason`` says why)."""
        if not self._probed:
            self._probe()
        if self._nvml is None:
            return None
        try:
            return {i: int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(h)) for i, h in self._handles}
        except Exception as exc:
            self.reason = f"NVML: {type(exc).__name__}: {exc}"
            return None


def window_energy_j(
    begin: dict[int, int] | None, end: dict[int, int] | None
) -> tuple[float | None, str | None]:
    """(J, None) between two readings, or (None, why)."""
    if begin is None or end is None:
        return None, "no GPU energy reading at the window's " + ("start" if begin is None else "end")
    total_mj = 0
    for i, e0 in begin.items():
        e1 = end.get(i)
        if e1 is None:
            return None, f"GPU {i} had no reading at the window's end"
        if e1 < e0:
            return None, f"GPU {i}'s energy counter went backwards (driver reload or GPU reset)"
        total_mj += e1 - e0
    return total_mj / MJ_PER_J, None


def _visible_indices(count: int) -> list[int]:
    """NVML indices of the GPUs this process may use (CUDA_VISIBLE_DEVICES given as indices)."""
    text = os.environ.get("CUDA_VISIBLE_DEVICES")
    if text is None:
        return list(range(count))
    picked: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if not item.isdigit():  # UUIDs or MIG names: fall back to every GPU rather than guess
            return list(range(count)) if item else picked
        if int(item) < count and int(item) not in picked:
            picked.append(int(item))
    return picked
