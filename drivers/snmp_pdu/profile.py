"""Vendor profiles as data: which OIDs a PDU family exposes and how to scale them.

A profile is a TOML file in ``profiles/``. It declares *tables* (walked once with GETBULK to find
their rows: daisy-chained units, inlets, cords, phases) and *measures* (one column of a table, or
one scalar OID, scaled into a canonical signal). Every vendor quirk is a field here with its
source, never an ``if vendor ==`` branch in code. This module parses and validates; it does no I/O
beyond reading the profile files.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

PROFILE_DIR = Path(__file__).with_name("profiles")

# How per-row values add up to the feed's total: power, energy and current add over units/cords/lines;
# voltage and power factor are averaged.
DEFAULT_AGGREGATE = {"power_w": "sum", "energy_kwh": "sum", "current_a": "sum", "apparent_va": "sum"}
AGGREGATES = ("sum", "mean", "max", "first")
CANONICAL_SIGNALS = ("power_w", "energy_kwh", "voltage_v", "current_a", "pf")


class ProfileError(ValueError):
    """A profile file that cannot be used; the message names the file and key."""


def parse_oid(text: str, where: str) -> tuple[int, ...]:
    """``"1.3.6.1.2.1.1.2.0"`` (a leading dot is fine) → a tuple of arcs."""
    try:
        arcs = tuple(int(part) for part in str(text).strip().lstrip(".").split("."))
    except ValueError:
        raise ProfileError(f"{where}: {text!r} is not a numeric OID") from None
    if len(arcs) < 2 or any(a < 0 for a in arcs):
        raise ProfileError(f"{where}: {text!r} is not a numeric OID")
    return arcs


def oid_text(arcs: tuple[int, ...]) -> str:
    return ".".join(map(str, arcs))


@dataclass(frozen=True)
class Pow10:
    """A scale exponent read from the device: ``10 ** (factor × meta + offset)`` (Raritan digits)."""

    meta: str
    factor: int = 1
    offset: int = 0


@dataclass(frozen=True)
class Table:
    """Rows found by walking one column once; ``meta`` columns are read once per row at discovery."""

    name: str
    walk: tuple[int, ...]
    label: str = ""  # per-row signal prefix, e.g. "unit{0}.phase{number}" ({n}: index arc, {name}: meta)
    meta: dict[str, tuple[int, ...]] = field(default_factory=dict)
    when: dict[str, tuple[int, ...]] = field(default_factory=dict)  # keep rows whose value is listed
    unless: dict[str, tuple[int, ...]] = field(default_factory=dict)  # drop rows whose value is listed


@dataclass(frozen=True)
class Measure:
    """One column (or scalar OID) that contributes to a signal.

    value = raw × ``scale`` × Π 10^(factor × meta + offset); raw values in ``invalid`` or outside
    [``min``, ``max``] are missing. Measures of a higher ``priority`` number are fallbacks, used only
    where every lower-numbered measure of the same signal gave nothing at the first poll.
    """

    signal: str
    oid: tuple[int, ...]
    table: str | None = None
    scale: Fraction = Fraction(1)
    pow10: tuple[Pow10, ...] = ()
    invalid: frozenset[int] = frozenset()
    min: float | None = None
    max: float | None = None
    absolute: bool = False
    aggregate: str = "mean"
    priority: int = 0
    estimated: bool = False
    wrap_at: int | None = None  # raw modulus of an energy counter (Unsigned32: 4294967296)
    when: dict[str, tuple[int, ...]] = field(default_factory=dict)
    source: str = ""


@dataclass(frozen=True)
class Profile:
    name: str
    title: str
    sys_object_ids: tuple[tuple[int, ...], ...]
    tables: dict[str, Table]
    measures: tuple[Measure, ...]
    integrate_energy: bool = False  # no energy counter in this MIB: integrate power, flag as estimated
    source: str = ""
    path: Path | None = None


def _int_list(value: Any, where: str) -> tuple[int, ...]:
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise ProfileError(f"{where}: must be an integer or a list of integers, got {value!r}")
    return tuple(items)


def _conditions(raw: Any, where: str) -> dict[str, tuple[int, ...]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: must be a table like {{ type = [1, 3] }}")
    return {str(k): _int_list(v, f"{where}.{k}") for k, v in raw.items()}


def _scale(value: Any, where: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ProfileError(f"{where}: must be a number, got {value!r}")
    try:
        scale = Fraction(str(value))  # "0.1" stays exactly 1/10, so 35128 × 0.1 prints as 3512.8
    except (ValueError, ZeroDivisionError):
        raise ProfileError(f"{where}: must be a number, got {value!r}") from None
    if scale == 0:
        raise ProfileError(f"{where}: must not be 0")
    return scale


_TABLE_KEYS = {"walk", "label", "meta", "when", "unless", "source"}
_MEASURE_KEYS = {"signal", "oid", "table", "scale", "pow10", "invalid", "min", "max", "absolute", "aggregate",
                 "priority", "estimated", "wrap_at", "when", "source"}


def _table(name: str, raw: Any, where: str) -> Table:
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: must be a table")
    unknown = set(raw) - _TABLE_KEYS
    if unknown:
        raise ProfileError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(_TABLE_KEYS)}")
    if "walk" not in raw:
        raise ProfileError(f"{where}.walk: required (the column walked to find the rows)")
    meta = raw.get("meta", {})
    if not isinstance(meta, dict):
        raise ProfileError(f"{where}.meta: must be a table of name = OID column")
    return Table(
        name=name,
        walk=parse_oid(raw["walk"], f"{where}.walk"),
        label=str(raw.get("label", "")),
        meta={str(k): parse_oid(v, f"{where}.meta.{k}") for k, v in meta.items()},
        when=_conditions(raw.get("when"), f"{where}.when"),
        unless=_conditions(raw.get("unless"), f"{where}.unless"),
    )


def _measure(raw: Any, where: str, tables: dict[str, Table]) -> Measure:
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: must be a table")
    unknown = set(raw) - _MEASURE_KEYS
    if unknown:
        raise ProfileError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(_MEASURE_KEYS)}")
    for key in ("signal", "oid"):
        if key not in raw:
            raise ProfileError(f"{where}.{key}: required")
    signal = str(raw["signal"])
    table = raw.get("table")
    if table is not None and table not in tables:
        raise ProfileError(f"{where}.table: {table!r} is not declared under [tables]")
    aggregate = str(raw.get("aggregate", DEFAULT_AGGREGATE.get(signal, "mean")))
    if aggregate not in AGGREGATES:
        raise ProfileError(f"{where}.aggregate: must be one of {AGGREGATES}, got {aggregate!r}")
    pow10 = []
    for i, p in enumerate(raw.get("pow10", [])):
        if not isinstance(p, dict) or "meta" not in p:
            raise ProfileError(f"{where}.pow10[{i}]: must be {{ meta = \"digits\", factor = -1 }}")
        if table is None or p["meta"] not in tables[table].meta:
            raise ProfileError(f"{where}.pow10[{i}].meta: {p['meta']!r} is not a meta column "
                               f"of table {table!r}")
        pow10.append(Pow10(str(p["meta"]), int(p.get("factor", 1)), int(p.get("offset", 0))))
    when = _conditions(raw.get("when"), f"{where}.when")
    for key in when:
        special = key.startswith("arc") or key in ("last", "walk")
        known = table is not None and (special or key in tables[table].meta)
        if not known:
            raise ProfileError(f"{where}.when.{key}: not a meta column of table {table!r}, "
                               "'walk', 'last' or 'arcN'")
    return Measure(
        signal=signal,
        oid=parse_oid(raw["oid"], f"{where}.oid"),
        table=table,
        scale=_scale(raw.get("scale", 1), f"{where}.scale"),
        pow10=tuple(pow10),
        invalid=frozenset(_int_list(raw.get("invalid", []), f"{where}.invalid")),
        min=None if raw.get("min") is None else float(raw["min"]),
        max=None if raw.get("max") is None else float(raw["max"]),
        absolute=bool(raw.get("absolute", False)),
        aggregate=aggregate,
        priority=int(raw.get("priority", 0)),
        estimated=bool(raw.get("estimated", False)),
        wrap_at=None if raw.get("wrap_at") is None else int(raw["wrap_at"]),
        when=when,
        source=str(raw.get("source", "")),
    )


def parse_profile(data: dict[str, Any], name: str, path: Path | None = None) -> Profile:
    """Validate one profile's TOML data; errors name the file and the key."""
    where = path.name if path else name
    tables_raw = data.get("tables", {})
    if not isinstance(tables_raw, dict):
        raise ProfileError(f"{where}: [tables] must be a table of tables")
    tables = {str(k): _table(str(k), v, f"{where}: tables.{k}") for k, v in tables_raw.items()}
    measures_raw = data.get("measures", [])
    if not isinstance(measures_raw, list) or not measures_raw:
        raise ProfileError(f"{where}: needs at least one [[measures]] entry")
    measures = tuple(_measure(m, f"{where}: measures[{i}]", tables) for i, m in enumerate(measures_raw))
    ids = data.get("sys_object_ids", [])
    if not isinstance(ids, list):
        raise ProfileError(f"{where}: sys_object_ids must be a list of OID prefixes")
    return Profile(
        name=str(data.get("name", name)),
        title=str(data.get("title", name)),
        sys_object_ids=tuple(parse_oid(i, f"{where}: sys_object_ids") for i in ids),
        tables=tables,
        measures=measures,
        integrate_energy=bool(data.get("integrate_energy", False)),
        source=str(data.get("source", "")),
        path=path,
    )


def load_profile_file(path: Path) -> Profile:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path.name}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_profile(data, path.stem, path)


_CACHE: dict[str, Profile] = {}


def builtin_profiles() -> dict[str, Profile]:
    """Every profile shipped in ``profiles/``, by name (parsed once per process)."""
    if not _CACHE:
        for path in sorted(PROFILE_DIR.glob("*.toml")):
            profile = load_profile_file(path)
            _CACHE[profile.name] = profile
    return dict(_CACHE)


def get_profile(name: str) -> Profile:
    profiles = builtin_profiles()
    if name not in profiles:
        known = ", ".join(sorted([*profiles, "auto", "generic"]))
        raise ProfileError(f"unknown SNMP PDU profile {name!r}; known: {known}")
    return profiles[name]


def match_sys_object_id(sys_object_id: tuple[int, ...]) -> Profile | None:
    """The profile whose declared sysObjectID prefix is the longest match, if any."""
    best: tuple[int, Profile] | None = None
    for profile in builtin_profiles().values():
        for prefix in profile.sys_object_ids:
            if sys_object_id[: len(prefix)] == prefix and (best is None or len(prefix) > best[0]):
                best = (len(prefix), profile)
    return best[1] if best else None


def generic_profile(oids: tuple[Any, ...]) -> Profile:
    """The ``generic`` profile from ``[[pdu]] oids = [{oid, signal, scale}]`` (scalar OIDs, no tables)."""
    measures = tuple(
        Measure(
            signal=o.signal,
            oid=parse_oid(o.oid, f"oids[{i}].oid"),
            scale=_scale(o.scale, f"oids[{i}].scale"),
            aggregate=DEFAULT_AGGREGATE.get(o.signal, "mean"),
            source="configuration",
        )
        for i, o in enumerate(oids)
    )
    if not measures:
        raise ProfileError('profile "generic" needs oids = [{oid = "...", signal = "power_w", scale = 1}]')
    return Profile(name="generic", title="OIDs listed in the configuration", sys_object_ids=(),
                   tables={}, measures=measures, source="configuration")
