"""The one table of what the engine reads: trace columns (``COLUMNS``) and the bin quantities made of
them (``QUANTITIES``). The engine signals, the per-bin sums (``FIELDS``: ``<q>_s`` seconds known,
``<q>_ws`` integral), how held columns combine (``combine``) and the drift-bin means
(``SAMPLE_MEANS``) all derive from them. Adding a signal is one row in each, plus its use.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Column:
    """A family of trace columns ``<device>.<id>.<suffix>`` (``device`` "": the plain column ``suffix``).

    ``register``: read from raw device registers (SNMP PDUs and probes, Modbus/SNMP cooling units),
    whose "no reading" codes can land inside the physical range. NVML/DCGM report failures as errors,
    jobs report float rates, and −1.0 °C outdoors is a reading: none of those gets codes rejected."""

    device: str
    suffix: str
    kind: str  # physical range: a key of ``hygiene.RANGES``
    register: bool

    def matches(self, name: str) -> bool:
        if not self.device:
            return name == self.suffix
        parts = name.split(".")
        return len(parts) == 3 and parts[0] == self.device and parts[2] == self.suffix


COLUMNS: tuple[Column, ...] = (
    Column("gpu", "power_w", "power", register=False),
    Column("gpu", "energy_j", "counter", register=False),
    Column("gpu", "mem_util_pct", "pct", register=False),
    Column("pdu", "power_w", "power", register=True),
    Column("pdu", "energy_kwh", "counter", register=True),
    Column("crac", "power_w", "power", register=True),
    Column("crac", "cooling_w", "heat", register=True),
    Column("crac", "fan_pct", "pct", register=True),
    Column("crac", "setpoint_c", "temp", register=True),
    Column("crac", "outdoor_temp_c", "temp", register=False),
    Column("inlet", "temp_c", "inlet", register=True),
    Column("", "work_rate", "rate", register=False),
)


def column_of(name: str) -> Column | None:
    return next((c for c in COLUMNS if c.matches(name)), None)


def is_engine_signal(name: str) -> bool:
    """Columns the engine reads (the rest are kept by the trace but ignored here)."""
    return column_of(name) is not None


# Columns of the trace format that no part of the engine reads (the stage inferrer's GPU
# utilisation and power limit, and the GPUs' reset counts, are read outside ``COLUMNS``, so this
# names what is unread rather than what is read: a column read later is parsed by default).
_UNREAD: tuple[Column, ...] = tuple(
    Column(device, suffix, "", register=False)
    for device, suffixes in (("gpu", ("temp_c", "sm_clock_mhz")), ("pdu", ("voltage_v", "current_a", "pf")),
                             ("crac", ("supply_temp_c", "return_temp_c")), ("inlet", ("rh_pct",)))
    for suffix in suffixes
)


def engine_never_reads(name: str) -> bool:
    """True for a column the replay need not convert: a third of a GPU rack's cells (temperatures,
    clocks). Its cells are not checked as numbers; unknown columns still are."""
    return any(column.matches(name) for column in _UNREAD)


@dataclass(frozen=True)
class Quantity:
    """One per-bin quantity: its column, how one interval's held members combine, its sample field.

    ``combine``: ``total`` (sum, missing members scaled from the known ones), ``sum`` (NaN if any is
    unknown: a missing PDU feed makes IT power unknown, never smaller), ``share_sum`` (Σ rack share ×
    value), ``mean``/``spread`` (over the known members; a spread needs two). ``absent``: the value
    without such a column (no cooling telemetry: cooling 0, facility = PDU)."""

    name: str
    column: str  # "<device>.<suffix>" of a ``COLUMNS`` row, or "work_rate"
    combine: str
    sample: str | None
    absent: float = math.nan


QUANTITIES: tuple[Quantity, ...] = (
    Quantity("gpu", "gpu.power_w", "total", "gpu_w"),
    Quantity("pdu", "pdu.power_w", "sum", "it_measured_w"),
    Quantity("cool", "crac.power_w", "share_sum", "cooling_measured_w", absent=0.0),
    Quantity("wr", "work_rate", "sum", "work_rate"),
    Quantity("inlet", "inlet.temp_c", "mean", "inlet_mean_c"),
    Quantity("spread", "inlet.temp_c", "spread", "inlet_spread_c"),
    Quantity("fan", "crac.fan_pct", "mean", "fan_pct"),
    Quantity("setp", "crac.setpoint_c", "mean", "setpoint_c"),
    Quantity("cload", "crac.cooling_w", "share_sum", "cooling_load_w"),
    Quantity("outdoor", "crac.outdoor_temp_c", "mean", "outdoor_c"),
    Quantity("gmem", "gpu.mem_util_pct", "mean", "gpu_mem_util_pct"),
    Quantity("gmean", "gpu.power_w", "mean", "gpu_mean_w"),
)
GPU_POWER = next(q for q in QUANTITIES if q.name == "gpu")
FACILITY = "fac"  # Σ PDU + Σ share × cooling-unit power (trace-format.md), integrated like the others

# The GPU load as the PDU feeds' samples see it (feed_load.py): its 1st and 2nd moments at the feeds'
# sampling instants, over the intervals whose PDU power is known.
FEED_GPU = "gps"
# Per-bin sums. "*_s" are seconds during which the quantity was known, "*_ws" its integral; the GPU
# power also carries its 2nd and 3rd moments (the IT model's cubic, Jensen-exact per bin); the GPU
# load the feeds' samples saw its 2nd (the IT model's d₂).
_STEMS = (*(q.name for q in QUANTITIES), FACILITY, FEED_GPU)
FIELDS: tuple[str, ...] = ("dur_s", "hint_s", "gpu2_ws", "gpu3_ws", f"{FEED_GPU}2_ws",
                           *(f"{q}_{k}" for q in _STEMS for k in ("s", "ws")))
F = {name: i for i, name in enumerate(FIELDS)}
N_FIELDS = len(FIELDS)
SAMPLE_MEANS: dict[str, str] = {q.sample: q.name for q in QUANTITIES if q.sample}


def member_names(names: list[str], column: str) -> list[str]:
    """The registered signal names of one column family (``column`` as in ``Quantity.column``)."""
    col = next(c for c in COLUMNS if (f"{c.device}.{c.suffix}" if c.device else c.suffix) == column)
    return [n for n in names if col.matches(n)]


def combine(q: Quantity, held: np.ndarray, shares: np.ndarray,
            groups: np.ndarray | None = None) -> np.ndarray:
    """One interval value per row from the held members ``held`` (m × members); ``groups``: each
    member's node, for ``total`` (see ``node_totals``)."""
    m, n = held.shape
    if n == 0:
        return np.full(m, q.absent)
    if q.combine == "total" and groups is not None and np.unique(groups).size > 1:
        return node_sum(node_totals(held, groups))
    if q.combine == "sum":
        return np.asarray(held.sum(axis=1))
    if q.combine == "share_sum":
        return np.asarray((held * shares).sum(axis=1))
    known = ~np.isnan(held)
    cnt = known.sum(axis=1)
    if q.combine == "spread":
        if n < 2:
            return np.full(m, np.nan)
        hi = np.where(known, held, -np.inf).max(axis=1)
        lo = np.where(known, held, np.inf).min(axis=1)
        return np.where(cnt >= 2, hi - lo, np.nan)
    tot = np.where(known, held, 0.0).sum(axis=1)
    scale = n if q.combine == "total" else 1  # total: missing members are like the known ones
    return np.where(cnt > 0, tot * scale / np.maximum(cnt, 1), np.nan)


def gpu_load(held: np.ndarray, groups: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The rack's GPU power and the IT model's 2nd and 3rd moments per row of held members (m ×
    GPUs; ``groups``: each GPU's node, or None where nodes are not listed): node by node where the
    rack has several nodes (``node_moments``), else the total's own powers."""
    if groups is not None and held.shape[1] and np.unique(groups).size > 1:
        per_node = node_totals(held, groups)
        g2, g3 = node_moments(per_node)
        return node_sum(per_node), g2, g3
    g = combine(GPU_POWER, held, np.zeros(0), groups)
    return g, g * g, g * g * g


def node_totals(held: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Per row and node (``groups``: each member's node), the node's total: its missing members scaled
    from its own known ones (same job, same stage), never from other nodes (a drained node, a lost
    node agent); NaN where none of the node's members is known."""
    nodes = np.unique(groups)
    out = np.full((held.shape[0], nodes.size), np.nan)
    for j, g in enumerate(nodes):
        part = held[:, groups == g]
        known_g = ~np.isnan(part)
        cnt_g = known_g.sum(axis=1)
        tot_g = np.where(known_g, part, 0.0).sum(axis=1)
        out[:, j] = np.where(cnt_g > 0, tot_g * part.shape[1] / np.maximum(cnt_g, 1), np.nan)
    return out


def node_sum(per_node: np.ndarray) -> np.ndarray:
    """The rack's total from ``node_totals``: NaN only where no node has a known member."""
    out: np.ndarray = np.where(np.isnan(per_node).all(axis=1), np.nan, np.nansum(per_node, axis=1))
    return out


def node_moments(per_node: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The IT model's 2nd and 3rd GPU-power moments from node totals: K·Σ gₙ² and K²·Σ gₙ³.

    PSU losses and server-fan power are convex in each node's own load, not in the rack's: a node at
    full load beside an idle one loses more than two at half load. For K nodes at equal load these
    are exactly g² and g³ of the rack total g, so a one-job rack keeps the same regressors. Nodes
    with no known member add nothing (as in ``combine``)."""
    k = per_node.shape[1]
    z = np.nan_to_num(per_node)
    return k * (z * z).sum(axis=1), k * k * (z * z * z).sum(axis=1)


def remap_fields(saved: np.ndarray, saved_names: list[str], trailing: int = 0) -> np.ndarray:
    """Bin sums saved under another field list, laid out as ``FIELDS``: fields by name, new ones at
    zero, ones this build no longer has dropped; the last axis holds the fields followed by
    ``trailing`` other values (the open bin's per-slot sums)."""
    old = saved.shape[-1] - trailing
    if len(saved_names) != old:
        raise ValueError(f"saved bins have {old} fields, their name list {len(saved_names)}")
    out = np.zeros((*saved.shape[:-1], N_FIELDS + trailing))
    for i, name in enumerate(saved_names):
        if name in F:
            out[..., F[name]] = saved[..., i]
    out[..., N_FIELDS:] = saved[..., old:]
    return out


# The field list of every state written before field names were saved with it (fields were only
# ever appended, so an older state's fields are a prefix of it).
LEGACY_FIELDS: tuple[str, ...] = (
    *("dur_s", "gpu_s", "gpu_ws", "gpu2_ws", "gpu3_ws", "pdu_s", "pdu_ws", "cool_s", "cool_ws"),
    *("fac_s", "fac_ws", "wr_s", "wr_ws", "inlet_s", "inlet_ws", "spread_s", "spread_ws", "fan_s"),
    *("fan_ws", "setp_s", "setp_ws", "hint_s", "cload_s", "cload_ws", "gtemp_s", "gtemp_ws"),
    *("outdoor_s", "outdoor_ws"),
)
