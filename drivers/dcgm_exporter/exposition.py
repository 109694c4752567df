"""dcgm-exporter's Prometheus text exposition → one reading per physical GPU.

Parsed with ``prometheus_client``'s own text parser. Real exporters' quirks (README.md, Signals):
MIG repeats device fields once per instance (taken once per ``UUID``, preferring the series without
an instance label); DCGM's "no value" sentinels (``DCGM_*_BLANK``, dcgm_structs.h) and above are
absent, never a number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

# DCGM field → (rackwatt signal suffix, factor to SI, DCGM value type of the field)
FIELDS: dict[str, tuple[str, float, str]] = {
    "DCGM_FI_DEV_POWER_USAGE": ("power_w", 1.0, "fp64"),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("energy_j", 1e-3, "int64"),  # mJ since driver load
    "DCGM_FI_DEV_GPU_UTIL": ("util_pct", 1.0, "int32"),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("mem_util_pct", 1.0, "int32"),
    "DCGM_FI_DEV_GPU_TEMP": ("temp_c", 1.0, "int32"),
    "DCGM_FI_DEV_SM_CLOCK": ("sm_clock_mhz", 1.0, "int32"),
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": ("power_limit_w", 1.0, "fp64"),
}
BLANK_AT = {"int32": float(0x7FFFFFF0), "int64": float(0x7FFFFFFFFFFFFFF0), "fp64": float(2**47)}
INSTANCE_LABELS = ("GPU_I_ID", "GPU_I_PROFILE")


class ExpositionError(ValueError):
    """The body is not Prometheus text, or holds no GPU of a dcgm-exporter."""


@dataclass
class GpuReading:
    """One physical GPU as the exporter showed it."""

    uuid: str
    index: int  # the exporter's ``gpu`` label: the node-local NVML index
    model: str = ""
    hostname: str = ""
    values: dict[str, float] = field(default_factory=dict)  # signal suffix → SI value
    from_instance: set[str] = field(default_factory=set)  # values so far taken from a MIG series


def parse_exposition(text: str) -> list[GpuReading]:
    """The GPUs in one scrape, ordered by their node-local index; raises ``ExpositionError``."""
    gpus: dict[str, GpuReading] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                # The parser names a counter's samples "<name>_total" even where the exporter
                # wrote the bare name (dcgm-exporter does): the family name is the DCGM field.
                if sample.name in (family.name, family.name + "_total"):
                    _take(gpus, family.name, sample.labels, sample.value)
    except ExpositionError:
        raise
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        raise ExpositionError(f"not Prometheus text exposition: {exc}") from exc
    if not gpus:
        raise ExpositionError("no DCGM_FI_DEV_* series with gpu and UUID labels (is this a dcgm-exporter?)")
    return sorted(gpus.values(), key=lambda gpu: gpu.index)


def _take(gpus: dict[str, GpuReading], name: str, labels: dict[str, str], value: float) -> None:
    spec = FIELDS.get(name)
    uuid, index_text = labels.get("UUID"), labels.get("gpu")
    if spec is None or uuid is None or index_text is None:
        return
    try:
        index = int(index_text)
    except ValueError as exc:
        raise ExpositionError(f"{name}: gpu label {index_text!r} is not an index") from exc
    gpu = gpus.get(uuid)
    if gpu is None:
        gpu = gpus[uuid] = GpuReading(uuid, index, labels.get("modelName", ""), labels.get("Hostname", ""))
    signal, factor, kind = spec
    if not math.isfinite(value) or value >= BLANK_AT[kind] or value < 0:
        return
    per_instance = any(label in labels for label in INSTANCE_LABELS)
    if signal in gpu.values and (per_instance or signal not in gpu.from_instance):
        return  # the device-level value is already known
    gpu.values[signal] = value * factor
    if per_instance:
        gpu.from_instance.add(signal)
    else:
        gpu.from_instance.discard(signal)
