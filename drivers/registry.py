"""Which driver polls which configured device: an explicit table, no import side effects.

``build_drivers(config)`` returns one driver per ``[[pdu]]`` and ``[[crac]]``, one for NVML
when ``[nvml] enabled`` (the default), and one per ``[[dcgm]]`` GPU node. Driver packages are
imported only here and only when a device needs them, so a host without SNMP devices never
loads pysnmp. A device whose driver cannot be built (package missing, bad profile, unreadable
secret) becomes an ``UnavailableDriver`` whose every poll reports why: one bad device never
stops the others.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from collections.abc import Callable
from typing import Any, Protocol

from drivers.base import Driver, PollResult
from drivers.dcgm_exporter.config import DcgmSection
from drivers.modbus_crac.config import CracConfig
from drivers.nvml_gpu.config import NvmlSection
from drivers.snmp_pdu.config import PduConfig


class DeviceSections(Protocol):
    """The device sections of a configuration (``agent.config.model.Config`` is one)."""

    @property
    def pdus(self) -> tuple[PduConfig, ...]: ...
    @property
    def cracs(self) -> tuple[CracConfig, ...]: ...
    @property
    def nvml(self) -> NvmlSection: ...
    @property
    def dcgms(self) -> tuple[DcgmSection, ...]: ...

# device kind → (module, class); the class takes that device's config section as its only argument
DRIVERS: dict[str, tuple[str, str]] = {
    "pdu": ("drivers.snmp_pdu.driver", "SnmpPduDriver"),
    "crac": ("drivers.modbus_crac.driver", "CracModbusDriver"),
    "crac_snmp": ("drivers.snmp_crac.driver", "SnmpCracDriver"),  # [[crac]] protocol = "snmp"
    "nvml": ("drivers.nvml_gpu.driver", "NvmlGpuDriver"),
    "dcgm": ("drivers.dcgm_exporter.driver", "DcgmExporterDriver"),
}


class UnavailableDriver:
    """Stands in for a device whose driver could not be built; every poll says why."""

    def __init__(self, device: str, interval_s: float, error: str) -> None:
        self.device = device
        self.interval_s = interval_s
        self.error = error

    async def poll(self) -> PollResult:
        return PollResult(device=self.device, ts=time.time(), signals={}, ok=False, elapsed_ms=0.0,
                          error=self.error)

    async def close(self) -> None:
        return None


def _driver_class(kind: str) -> Callable[[Any], Driver]:
    module_name, class_name = DRIVERS[kind]
    module = importlib.import_module(module_name)
    factory: Callable[[Any], Driver] = getattr(module, class_name)
    return factory


def build_driver(kind: str, section: Any, device: str, interval_s: float) -> Driver:
    """The driver for one device, or an ``UnavailableDriver`` explaining why there is none."""
    try:
        factory = _driver_class(kind)
    except ImportError as exc:
        return UnavailableDriver(device, interval_s, f"{device}: {kind} driver not available: {exc}")
    try:
        return factory(section)
    except (ValueError, OSError) as exc:  # bad profile, unreadable secret file, …
        return UnavailableDriver(device, interval_s, f"{device}: cannot set up: {exc}")


def build_drivers(config: DeviceSections) -> list[Driver]:
    """Every configured device's driver, in configuration order: PDUs, cooling units, NVML."""
    drivers: list[Driver] = []
    for pdu in config.pdus:
        drivers.append(build_driver("pdu", pdu, f"pdu.{pdu.id}", pdu.interval_s))
    for crac in config.cracs:
        kind = "crac_snmp" if getattr(crac, "protocol", "modbus") == "snmp" else "crac"
        drivers.append(build_driver(kind, crac, f"crac.{crac.id}", crac.interval_s))
    if config.nvml.enabled:
        drivers.append(build_driver("nvml", config.nvml, "nvml", config.nvml.interval_s))
    drivers.extend(_dcgm_drivers(config))
    return drivers


def _dcgm_drivers(config: DeviceSections) -> list[Driver]:
    """One driver per ``[[dcgm]]`` node; a node without ``first_gpu`` numbers its GPUs right after
    the previous node's, and a node whose range overlaps another's is refused with a clear error
    (two GPUs on one ``gpu.<i>`` would be added together)."""
    drivers: list[Driver] = []
    taken: dict[int, str] = {}
    next_gpu = 0
    for node in config.dcgms:
        device = f"dcgm.{node.id}"
        first = node.first_gpu if node.first_gpu is not None else next_gpu
        span = range(first, first + node.gpu_count)
        clash = sorted({taken[i] for i in span if i in taken})
        if clash:
            drivers.append(UnavailableDriver(
                device, node.interval_s,
                f"{device}: GPUs gpu.{span.start}..gpu.{span.stop - 1} overlap node(s) {', '.join(clash)}; "
                "set first_gpu so that the nodes' ranges do not overlap"))
            continue
        taken.update(dict.fromkeys(span, node.id))
        next_gpu = span.stop
        drivers.append(build_driver("dcgm", dataclasses.replace(node, first_gpu=first), device,
                                    node.interval_s))
    return drivers
