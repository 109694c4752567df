"""Which driver polls which configured device: an explicit table, no import side effects.

Driver packages are imported only when a device needs them (a host without SNMP devices never loads
pysnmp). A device whose driver cannot be built becomes an ``UnavailableDriver`` whose every poll
reports why: one bad device never stops the others.
"""

from __future__ import annotations

import dataclasses
import importlib
import time
from collections.abc import Callable
from typing import Any, Protocol

from agent.node.config import NodeLinkSection, NodeSection
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
    @property
    def nodes(self) -> tuple[NodeSection, ...]: ...
    @property
    def node_link(self) -> NodeLinkSection: ...

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


def build_driver(kind: str, section: Any, device: str, interval_s: float) -> Driver:
    """The driver for one device, or an ``UnavailableDriver`` explaining why there is none."""
    module_name, class_name = DRIVERS[kind]
    try:
        factory: Callable[[Any], Driver] = getattr(importlib.import_module(module_name), class_name)
    except ImportError as exc:
        return UnavailableDriver(device, interval_s, f"{device}: {kind} driver not available: {exc}")
    try:
        return factory(section)
    except (ValueError, OSError) as exc:  # bad profile, unreadable secret file, …
        return UnavailableDriver(device, interval_s, f"{device}: cannot set up: {exc}")


def build_drivers(config: DeviceSections, clock: Callable[[], float] = time.time) -> list[Driver]:
    """Every configured device's driver, in configuration order: PDUs, cooling units, NVML, GPU nodes.

    ``clock``: the agent's clock, for the node link's skew measurement (the demo's runs faster)."""
    drivers: list[Driver] = []
    for pdu in config.pdus:
        drivers.append(build_driver("pdu", pdu, f"pdu.{pdu.id}", pdu.interval_s))
    for crac in config.cracs:
        kind = "crac_snmp" if crac.protocol == "snmp" else "crac"
        drivers.append(build_driver(kind, crac, f"crac.{crac.id}", crac.interval_s))
    if config.nvml.enabled:
        drivers.append(build_driver("nvml", config.nvml, "nvml", config.nvml.interval_s))
    placed: list[tuple[NodeSection, int]] = []
    for node, first, refused in _placed_gpu_nodes(config):
        device = f"{'dcgm' if isinstance(node, DcgmSection) else 'node'}.{node.id}"
        if refused:
            drivers.append(UnavailableDriver(device, node.interval_s, f"{device}: {refused}"))
        elif isinstance(node, DcgmSection):
            drivers.append(build_driver("dcgm", dataclasses.replace(node, first_gpu=first), device,
                                        node.interval_s))
        else:
            placed.append((node, first))
    if placed:  # the node role's sources share one UDP receiver
        from agent.node.source import build_node_drivers

        drivers.extend(build_node_drivers(config.node_link, placed, clock=clock))
    return drivers


def _placed_gpu_nodes(
    config: DeviceSections,
) -> list[tuple[DcgmSection | NodeSection, int, str | None]]:
    """(node, first rack-wide GPU index, why it is refused or None) for every GPU node, [[dcgm]] then
    [[node]]: a node without ``first_gpu`` starts right after the previous one, and a node whose
    range overlaps another's is refused (two GPUs on one ``gpu.<i>`` would be added together)."""
    taken: dict[int, str] = {}
    next_gpu = 0
    placed: list[tuple[DcgmSection | NodeSection, int, str | None]] = []
    nodes: list[DcgmSection | NodeSection] = [*config.dcgms, *config.nodes]
    for node in nodes:
        first = node.first_gpu if node.first_gpu is not None else next_gpu
        span = range(first, first + node.gpu_count)
        clash = ", ".join(sorted({taken[i] for i in span if i in taken}))
        refused = None
        if clash:
            refused = (f"GPUs gpu.{span.start}..gpu.{span.stop - 1} overlap node(s) {clash}; "
                       "set first_gpu so that the nodes' ranges do not overlap")
        else:
            taken.update(dict.fromkeys(span, node.id))
            next_gpu = span.stop
        placed.append((node, first, refused))
    return placed


def gpu_nodes(config: DeviceSections) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(node id, rack-wide GPU indices) per GPU node, placed as the drivers are; refused nodes are
    left out. The ids are what stage hints name a node by (``agent.stages``); the engine counts
    coverage and reads each node's stage from its GPUs."""
    return tuple(
        (node.id, tuple(range(first, first + node.gpu_count)))
        for node, first, refused in _placed_gpu_nodes(config)
        if not refused
    )
