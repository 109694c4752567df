"""The only module that touches ``pynvml``: thin blocking wrappers in SI units.

Calls go through ``pynvml.<function>`` (never ``from pynvml import …``) so a fake can patch them.
NVML errors become ``NvmlFailure(code, call)``; the driver decides what each code means.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pynvml

SUCCESS = 0
NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED
NO_PERMISSION = 4
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
GPU_IS_LOST = 15
FUNCTION_NOT_FOUND = 13  # an older libnvidia-ml without this entry point

T = TypeVar("T")


class NvmlFailure(Exception):
    """An NVML call failed; ``code`` is the NVML return code (``pynvml.NVML_ERROR_*``)."""

    def __init__(self, code: int, call: str, text: str) -> None:
        super().__init__(f"{call}: {text} (NVML error {code})")
        self.code = code
        self.call = call


def _call(name: str, fn: Callable[..., T], *args: Any) -> T:
    try:
        return fn(*args)
    except pynvml.NVMLError as exc:
        code = int(getattr(exc, "value", -1))
        raise NvmlFailure(code, name, str(exc)) from exc


def init() -> None:
    _call("nvmlInit", pynvml.nvmlInit)


def shutdown() -> None:
    _call("nvmlShutdown", pynvml.nvmlShutdown)


def device_count() -> int:
    return int(_call("nvmlDeviceGetCount", pynvml.nvmlDeviceGetCount))


def handle(index: int) -> Any:
    return _call("nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index)


def power_instant_w(gpu: Any) -> float:
    """POWER_INSTANT field (not the 1 s average that GetPowerUsage gives on Ampere+)."""
    values = _call(
        "nvmlDeviceGetFieldValues", pynvml.nvmlDeviceGetFieldValues, gpu, [pynvml.NVML_FI_DEV_POWER_INSTANT]
    )
    field = values[0]
    if field.nvmlReturn != SUCCESS:  # FieldValues reports per field instead of raising
        raise NvmlFailure(int(field.nvmlReturn), "nvmlDeviceGetFieldValues(POWER_INSTANT)", "field failed")
    return _field_number(field) / 1000.0  # mW


def _field_number(field: Any) -> float:
    value_type = int(field.valueType)
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}.get(
        value_type, "uiVal"
    )
    return float(getattr(field.value, member))


def power_usage_w(gpu: Any) -> float:
    return float(_call("nvmlDeviceGetPowerUsage", pynvml.nvmlDeviceGetPowerUsage, gpu)) / 1000.0  # mW


def total_energy_j(gpu: Any) -> float:
    """Energy since the driver loaded (Volta+); restarts at 0 on driver reload."""
    mj = _call("nvmlDeviceGetTotalEnergyConsumption", pynvml.nvmlDeviceGetTotalEnergyConsumption, gpu)
    return float(mj) / 1000.0  # mJ


def utilization_pct(gpu: Any) -> tuple[float, float]:
    rates = _call("nvmlDeviceGetUtilizationRates", pynvml.nvmlDeviceGetUtilizationRates, gpu)
    return float(rates.gpu), float(rates.memory)


def temperature_c(gpu: Any) -> float:
    return float(
        _call("nvmlDeviceGetTemperature", pynvml.nvmlDeviceGetTemperature, gpu, pynvml.NVML_TEMPERATURE_GPU)
    )


def sm_clock_mhz(gpu: Any) -> float:
    return float(_call("nvmlDeviceGetClockInfo", pynvml.nvmlDeviceGetClockInfo, gpu, pynvml.NVML_CLOCK_SM))


def power_limit_w(gpu: Any) -> float:
    milliwatts = _call("nvmlDeviceGetEnforcedPowerLimit", pynvml.nvmlDeviceGetEnforcedPowerLimit, gpu)
    return float(milliwatts) / 1000.0
