"""From a profile and the rows found on the device to a poll plan, and from raw values to signals.

Discovery (walking each table once) is I/O and lives in the driver; this module is pure: it turns
rows into the exact list of OIDs to GET each poll (``PollPlan``), and turns the values that come
back into per-row and total signals. Sentinels, NoSuch* and EndOfMibView become missing, never 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from .client import Oid, Value
from .profile import Condition, Measure, Profile, Table


@dataclass(frozen=True)
class Row:
    """One table row: its index suffix, and the meta values (integers or strings) read at discovery."""

    index: Oid
    meta: dict[str, int | str] = field(default_factory=dict)


@dataclass(frozen=True)
class Item:
    """One OID polled each time, with everything needed to decode it."""

    measure: Measure
    oid: Oid
    factor: Fraction  # raw × factor = value in the signal's unit
    label: str = ""  # per-row prefix ("unit1.phase2"), "" for scalars


@dataclass
class PollPlan:
    items: list[Item]

    @property
    def oids(self) -> list[Oid]:
        return [item.oid for item in self.items]


def _matches(conditions: Condition, row: Row, keep_unknown: bool) -> bool:
    for key, allowed in conditions.items():
        value: int | str | None
        if key == "last":
            value = row.index[-1] if row.index else None
        elif key.startswith("arc") and key[3:].isdigit():
            n = int(key[3:])
            value = row.index[n] if n < len(row.index) else None
        else:
            value = row.meta.get(key)
        if value is None:
            if not keep_unknown:
                return False
            continue
        if (value in allowed) != (not keep_unknown):
            return False
    return True


def keep_row(table: Table, row: Row) -> bool:
    """Table filters: ``when`` must match (unknown fails), ``unless`` must not (unknown passes)."""
    return _matches(table.when, row, keep_unknown=False) and _matches(table.unless, row, keep_unknown=True)


def keep_by_index(table: Table, row: Row) -> bool:
    """The ``when`` conditions that need no meta column (walked value, index arcs): checked before
    the per-row meta reads, so a by-name table (hundreds of variables) reads meta only for its rows."""
    local = {k: v for k, v in table.when.items() if k in ("walk", "last") or k.startswith("arc")}
    return _matches(local, row, keep_unknown=False)


def row_label(table: Table, row: Row) -> str:
    if not table.label:
        return ".".join(map(str, row.index))
    try:
        return table.label.format(*row.index, **row.meta)
    except (IndexError, KeyError):
        return ".".join(map(str, row.index))


def _int_meta(row: Row | None, name: str) -> int | None:
    value = None if row is None else row.meta.get(name)
    return value if isinstance(value, int) else None


def item_factor(measure: Measure, row: Row | None) -> Fraction | None:
    """scale × Π 10^(factor × meta + offset) × the scale column; None when a needed meta is missing."""
    factor = measure.scale
    for p in measure.pow10:
        meta = _int_meta(row, p.meta)
        if meta is None:
            return None
        factor *= Fraction(10) ** (p.factor * meta + p.offset)
    if measure.scale_meta is not None:
        name, mode = measure.scale_meta
        meta = _int_meta(row, name)
        if not meta:  # missing, or 0: no usable scale
            return None
        if mode == "divide" or meta < 0:
            factor /= abs(meta)
        else:
            factor *= meta
    return factor


def build_plan(profile: Profile, rows: dict[str, list[Row]]) -> PollPlan:
    """Every (measure, row) pair whose filters pass, as OIDs to GET."""
    items: list[Item] = []
    for measure in profile.measures:
        if measure.table is None:
            items.append(Item(measure, measure.oid, measure.scale))
            continue
        table = profile.tables[measure.table]
        for row in rows.get(measure.table, []):
            if not _matches(measure.when, row, keep_unknown=False):
                continue
            factor = item_factor(measure, row)
            if factor is not None:
                items.append(Item(measure, measure.oid + row.index, factor, row_label(table, row)))
    return PollPlan(items)


def raw_number(measure: Measure, value: Value) -> int | float | None:
    """The raw reading, or None when it is a sentinel or out of range."""
    if isinstance(value, bool) or value is None or isinstance(value, tuple):
        return None
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            return None
    if isinstance(value, int) and value in measure.invalid:
        return None
    if measure.min is not None and value < measure.min:
        return None
    if measure.max is not None and value > measure.max:
        return None
    return abs(value) if measure.absolute else value


def scaled(raw: int | float, factor: Fraction) -> Fraction | float:
    """Exact for integers (35128 × 1/10 → 3512.8 exactly as printed), float otherwise."""
    return raw * factor if isinstance(raw, int) else raw * float(factor)


def _aggregate(how: str, values: Sequence[Fraction | float]) -> float:
    if how == "sum":
        return float(sum(values))
    if how == "max":
        return float(max(values))
    if how == "first":
        return float(values[0])
    return float(sum(values) / len(values))


@dataclass
class Decoded:
    totals: dict[str, float]
    per_row: dict[str, float]  # "unit1.phase2.current_a" → value
    estimated: set[str]
    raw: dict[Oid, int | float]  # usable raw readings, for counters
    levels: dict[str, int]  # signal → priority level it was read from


Reading = tuple[Item, Fraction | float | None]


def _choose_level(levels: dict[int, list[Reading]]) -> tuple[int, bool] | None:
    """The best priority level: (level, complete). A summed total needs every row of its level."""
    partial: int | None = None
    for level in sorted(levels):
        readings = levels[level]
        present = sum(v is not None for _, v in readings)
        if not present:
            continue
        if present == len(readings) or readings[0][0].measure.aggregate != "sum":
            return level, True
        if partial is None:
            partial = level
    return None if partial is None else (partial, False)


def decode(plan: PollPlan, values: Sequence[Value]) -> Decoded:
    """Totals per signal from the best (lowest) priority level that answered.

    A sum over units/cords/phases with one row missing is itself missing (a feed total that
    silently drops a unit would look like a power step), unless a fallback level is complete.
    """
    by_signal: dict[str, dict[int, list[Reading]]] = {}
    raw_ok: dict[Oid, int | float] = {}
    for item, value in zip(plan.items, values, strict=True):
        raw = raw_number(item.measure, value)
        if raw is not None:
            raw_ok[item.oid] = raw
        reading = None if raw is None else scaled(raw, item.factor)
        levels = by_signal.setdefault(item.measure.signal, {})
        levels.setdefault(item.measure.priority, []).append((item, reading))
    out = Decoded({}, {}, set(), raw_ok, {})
    for signal, levels in by_signal.items():
        choice = _choose_level(levels)
        if choice is None:
            continue
        level, complete = choice
        out.levels[signal] = level
        readings = [(item, v) for item, v in levels[level] if v is not None]
        how = readings[0][0].measure.aggregate
        if complete:
            out.totals[signal] = _aggregate(how, [v for _, v in readings])
            if any(item.measure.estimated for item, _ in readings):
                out.estimated.add(signal)
        grouped: dict[str, list[Fraction | float]] = {}
        for item, v in readings:
            if item.label:
                grouped.setdefault(f"{item.label}.{signal}", []).append(v)
        for name, vs in grouped.items():
            out.per_row[name] = _aggregate(how, vs)
    return out


def prune(plan: PollPlan, levels: dict[str, int]) -> PollPlan:
    """Keep only the items of the priority level each signal was first read from.

    Signals that gave nothing at any level keep their primary items, so a sensor that comes back
    later is seen again without a rediscovery.
    """
    kept = []
    for item in plan.items:
        level = levels.get(item.measure.signal)
        if level is None:
            lowest = min(i.measure.priority for i in plan.items if i.measure.signal == item.measure.signal)
            if item.measure.priority == lowest:
                kept.append(item)
        elif item.measure.priority == level:
            kept.append(item)
    return PollPlan(kept)
