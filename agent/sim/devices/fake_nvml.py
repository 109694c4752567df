"""Fake GPUs at the ``pynvml`` function boundary, for the demo and for tests on machines without GPUs.

``FakeNvml(values_fn).installed()`` serves ``values_fn()`` → ``{gpu_index: {"power_w": …, …}}`` (the
twin's GPU values); the energy counter (mJ) integrates ``power_w`` unless the values carry
``energy_j``. Errors as real NVML reports them: ``init_error`` (12 library not found, 9 driver not
loaded), ``lost`` (GPUs raising 15), ``unsupported`` (function names, or "POWER_INSTANT": 3),
``failures`` (``(gpu or None, function name) → code``), ``reset_counter(gpu)`` (driver reload).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any
from unittest import mock

import pynvml

GpuValues = Mapping[int, Mapping[str, float]]
DEFAULT_GPU = {  # an H100 SXM in a training step
    "power_w": 650.0, "util_pct": 97.0, "mem_util_pct": 41.0, "temp_c": 63.0, "sm_clock_mhz": 1755.0,
    "power_limit_w": 700.0,
}
CALL_LOG_LEN = 1000  # a few poll cycles of every call a test looks at, for up to 64 GPUs


@dataclass(frozen=True)
class FakeHandle:
    index: int


class FakeNvml:
    """A set of fake NVML functions over live values, with injectable faults."""

    def __init__(
        self, values_fn: Callable[[], GpuValues] | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.values_fn = values_fn or (lambda: {0: DEFAULT_GPU, 1: DEFAULT_GPU})
        self.clock = clock
        self.init_error: int | None = None
        self.lost: set[int] = set()
        self.unsupported: set[str] = set()
        self.failures: dict[tuple[int | None, str], int] = {}
        # the last calls, for tests to inspect; bounded so a long demo or bench run never grows it
        self.calls: deque[str] = deque(maxlen=CALL_LOG_LEN)
        self.initialised = False
        self._inits = 0  # NVML counts nvmlInit calls: only the last nvmlShutdown shuts it down
        self._energy_mj: dict[int, float] = {}
        self._energy_offset_mj: dict[int, float] = {}
        self._last_t: dict[int, float] = {}

    # -- control -------------------------------------------------------------------------------
    def reset_counter(self, gpu: int) -> None:
        """The driver reloaded: this GPU's energy counter starts again from 0."""
        self._advance(gpu)
        self._energy_offset_mj[gpu] = self._energy_offset_mj.get(gpu, 0.0) + self._counter_mj(gpu)

    @contextmanager
    def installed(self) -> Iterator[FakeNvml]:
        """Patch every ``pynvml`` function faked below (the ``nvml…`` methods) while the block runs."""
        with ExitStack() as stack:
            for name in dir(type(self)):
                if name.startswith("nvml"):
                    stack.enter_context(mock.patch.object(pynvml, name, getattr(self, name)))
            yield self

    # -- helpers -------------------------------------------------------------------------------
    def _values(self, gpu: int) -> Mapping[str, float]:
        return self.values_fn().get(gpu, {})

    def _counter_mj(self, gpu: int) -> float:
        values = self._values(gpu)
        total = values["energy_j"] * 1000.0 if "energy_j" in values else self._energy_mj.get(gpu, 0.0)
        return total - self._energy_offset_mj.get(gpu, 0.0)

    def _advance(self, gpu: int) -> None:
        now = self.clock()
        then = self._last_t.get(gpu, now)
        self._energy_mj[gpu] = (
            self._energy_mj.get(gpu, 0.0) + self._values(gpu).get("power_w", 0.0) * (now - then) * 1000.0
        )
        self._last_t[gpu] = now

    def _enter(self, name: str, gpu: int | None = None) -> None:
        self.calls.append(name)
        if not self.initialised:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
        if gpu is not None and gpu in self.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        code = self.failures.get((gpu, name), self.failures.get((None, name)))
        if code is not None:
            raise pynvml.NVMLError(code)
        if name in self.unsupported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if gpu is not None:
            self._advance(gpu)

    def _value(self, gpu: int, name: str) -> float:
        value = self._values(gpu).get(name, DEFAULT_GPU.get(name))
        if value is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return float(value)

    # -- the fakes (names and signatures as in pynvml) -------------------------------------------
    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self._inits += 1
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self._inits -= 1
        self.initialised = self._inits > 0

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.values_fn())

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetHandleByIndex", index)
        if index not in self.values_fn():
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return FakeHandle(index)

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetPowerUsage", handle.index)
        return round(self._value(handle.index, "power_w") * 1000)

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, field_ids: list[Any]) -> Any:
        self._enter("nvmlDeviceGetFieldValues", handle.index)
        out = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        for slot, field_id in zip(out, field_ids, strict=True):
            slot.fieldId = field_id[0] if isinstance(field_id, tuple) else field_id
            if slot.fieldId == pynvml.NVML_FI_DEV_POWER_INSTANT and "POWER_INSTANT" not in self.unsupported:
                slot.nvmlReturn = pynvml.NVML_SUCCESS
                slot.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                slot.value.uiVal = round(self._value(handle.index, "power_w") * 1000)
            else:
                slot.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return out

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetTotalEnergyConsumption", handle.index)
        return round(self._counter_mj(handle.index))

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> SimpleNamespace:
        self._enter("nvmlDeviceGetUtilizationRates", handle.index)
        gpu, memory = self._value(handle.index, "util_pct"), self._value(handle.index, "mem_util_pct")
        return SimpleNamespace(gpu=round(gpu), memory=round(memory))

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperature", handle.index)
        return round(self._value(handle.index, "temp_c"))

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, clock_type: int) -> int:
        self._enter("nvmlDeviceGetClockInfo", handle.index)
        return round(self._value(handle.index, "sm_clock_mhz"))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        self._enter("nvmlDeviceGetEnforcedPowerLimit", handle.index)
        return round(self._value(handle.index, "power_limit_w") * 1000)
