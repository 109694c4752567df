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

# How per-row values add up to the feed's total: power, energy and current add over units/cords/lines
# (and a cooling unit's cooling output over its modules); voltage, power factor, temperatures and
# fan speeds are averaged.
DEFAULT_AGGREGATE = {"power_w": "sum", "energy_kwh": "sum", "current_a": "sum", "apparent_va": "sum",
                     "cooling_w": "sum"}
AGGREGATES = ("sum", "mean", "max", "first")
CANONICAL_SIGNALS = ("power_w", "energy_kwh", "voltage_v", "current_a", "pf")
# How a meta column scales a value: "divide" (APC coolingUnit Scale: value ÷ scale) or "signed"
# (RITTAL-CMC-III Scale: a negative number divides, a positive one multiplies).
SCALE_MODES = ("divide", "signed")

Condition = dict[str, tuple[int | str, ...]]  # meta name → the values that match


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
    # meta read from another table at the index held in a meta column: {name: (column, via meta)}
    lookup: dict[str, tuple[tuple[int, ...], str]] = field(default_factory=dict)
    when: Condition = field(default_factory=dict)  # keep rows whose value is listed
    unless: Condition = field(default_factory=dict)  # drop rows whose value is listed


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
    when: Condition = field(default_factory=dict)
    scale_meta: tuple[str, str] | None = None  # (meta column, one of SCALE_MODES)
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
    exclude_sys_object_ids: tuple[tuple[int, ...], ...] = ()  # prefixes of other families under ours
    probe: tuple[int, ...] | None = None  # a column only this family has (sysObjectID missing/bogus)
    metered: bool = True  # False: a switched-only family with no power readings at all

    @property
    def probe_oids(self) -> tuple[tuple[int, ...], ...]:
        """Columns that prove a device speaks this MIB: ``probe``, else every table's walked column
        (a delta Vertiv unit has phase rows but no total rows), else the scalar OIDs."""
        if self.probe is not None:
            return (self.probe,)
        walks = tuple(dict.fromkeys(self.tables[m.table].walk for m in self.measures if m.table is not None))
        return walks or tuple(dict.fromkeys(m.oid[:-1] for m in self.measures))  # scalar x.0 lies under x


def _int_list(value: Any, where: str) -> tuple[int, ...]:
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in items):
        raise ProfileError(f"{where}: must be an integer or a list of integers, got {value!r}")
    return tuple(items)


def _value_list(value: Any, where: str) -> tuple[int | str, ...]:
    """Integers (enumerations) or strings (a variable's name in a by-name table, e.g. RITTAL-CMC-III)."""
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(v, int | str) and not isinstance(v, bool) for v in items):
        raise ProfileError(f"{where}: must be an integer, a string or a list of them, got {value!r}")
    return tuple(items)


def _conditions(raw: Any, where: str) -> Condition:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: must be a table like {{ type = [1, 3] }}")
    return {str(k): _value_list(v, f"{where}.{k}") for k, v in raw.items()}


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


_TABLE_KEYS = {"walk", "label", "meta", "lookup", "when", "unless", "source"}
_MEASURE_KEYS = {"signal", "oid", "table", "scale", "pow10", "invalid", "min", "max", "absolute", "aggregate",
                 "priority", "estimated", "wrap_at", "when", "scale_meta", "source"}
_PROFILE_KEYS = {"name", "title", "source", "sys_object_ids", "exclude_sys_object_ids", "probe", "metered",
                 "integrate_energy", "tables", "measures"}


def _known_keys(raw: dict[str, Any], known: set[str], where: str) -> None:
    unknown = set(raw) - known
    if unknown:
        raise ProfileError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(known)}")


def _lookup(raw: Any, where: str, meta: dict[str, tuple[int, ...]]) -> dict[str, tuple[tuple[int, ...], str]]:
    """``lookup = { parent_class = { oid = "…47.1.1.1.1.5", via = "parent" } }``."""
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: must be a table of name = {{ oid = \"…\", via = \"<meta>\" }}")
    out = {}
    for name, spec in raw.items():
        if not isinstance(spec, dict) or "oid" not in spec or spec.get("via") not in meta:
            raise ProfileError(f"{where}.{name}: needs oid and via = one of the meta columns {sorted(meta)}")
        out[str(name)] = (parse_oid(spec["oid"], f"{where}.{name}.oid"), str(spec["via"]))
    return out


def _table(name: str, raw: Any, where: str) -> Table:
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: must be a table")
    _known_keys(raw, _TABLE_KEYS, where)
    if "walk" not in raw:
        raise ProfileError(f"{where}.walk: required (the column walked to find the rows)")
    meta = raw.get("meta", {})
    if not isinstance(meta, dict):
        raise ProfileError(f"{where}.meta: must be a table of name = OID column")
    columns = {str(k): parse_oid(v, f"{where}.meta.{k}") for k, v in meta.items()}
    return Table(
        name=name,
        walk=parse_oid(raw["walk"], f"{where}.walk"),
        label=str(raw.get("label", "")),
        meta=columns,
        lookup=_lookup(raw.get("lookup", {}), f"{where}.lookup", columns),
        when=_conditions(raw.get("when"), f"{where}.when"),
        unless=_conditions(raw.get("unless"), f"{where}.unless"),
    )


def _measure(raw: Any, where: str, tables: dict[str, Table]) -> Measure:
    if not isinstance(raw, dict):
        raise ProfileError(f"{where}: must be a table")
    _known_keys(raw, _MEASURE_KEYS, where)
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
        known = table is not None and (special or key in tables[table].meta or key in tables[table].lookup)
        if not known:
            raise ProfileError(f"{where}.when.{key}: not a meta column of table {table!r}, "
                               "'walk', 'last' or 'arcN'")
    scale_meta = None
    if raw.get("scale_meta") is not None:
        spec = raw["scale_meta"]
        ok = isinstance(spec, dict) and spec.get("mode") in SCALE_MODES
        if not ok or table is None or spec.get("meta") not in tables[table].meta:
            raise ProfileError(f"{where}.scale_meta: must be {{ meta = \"<meta column of table {table!r}>\", "
                               f"mode = one of {SCALE_MODES} }}")
        scale_meta = (str(spec["meta"]), str(spec["mode"]))
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
        scale_meta=scale_meta,
        source=str(raw.get("source", "")),
    )


def _oid_list(raw: Any, where: str) -> tuple[tuple[int, ...], ...]:
    if not isinstance(raw, list):
        raise ProfileError(f"{where}: must be a list of OID prefixes")
    return tuple(parse_oid(i, where) for i in raw)


def parse_profile(data: dict[str, Any], name: str, path: Path | None = None) -> Profile:
    """Validate one profile's TOML data; errors name the file and the key."""
    where = path.name if path else name
    _known_keys(data, _PROFILE_KEYS, where)
    metered = bool(data.get("metered", True))
    tables_raw = data.get("tables", {})
    if not isinstance(tables_raw, dict):
        raise ProfileError(f"{where}: [tables] must be a table of tables")
    tables = {str(k): _table(str(k), v, f"{where}: tables.{k}") for k, v in tables_raw.items()}
    measures_raw = data.get("measures", [])
    if not isinstance(measures_raw, list) or (metered and not measures_raw):
        raise ProfileError(f"{where}: needs at least one [[measures]] entry")
    measures = tuple(_measure(m, f"{where}: measures[{i}]", tables) for i, m in enumerate(measures_raw))
    probe = data.get("probe")
    if not metered and probe is None:
        raise ProfileError(f"{where}: metered = false needs probe = \"<a column only this family has>\"")
    return Profile(
        name=str(data.get("name", name)),
        title=str(data.get("title", name)),
        sys_object_ids=_oid_list(data.get("sys_object_ids", []), f"{where}: sys_object_ids"),
        tables=tables,
        measures=measures,
        integrate_energy=bool(data.get("integrate_energy", False)),
        source=str(data.get("source", "")),
        path=path,
        exclude_sys_object_ids=_oid_list(data.get("exclude_sys_object_ids", []),
                                         f"{where}: exclude_sys_object_ids"),
        probe=None if probe is None else parse_oid(probe, f"{where}: probe"),
        metered=metered,
    )


def load_profile_file(path: Path) -> Profile:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path.name}: not valid TOML: {exc}") from None
    except OSError as exc:
        raise ProfileError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse_profile(data, path.stem, path)


_CACHE: dict[Path, dict[str, Profile]] = {}


def builtin_profiles(directory: Path = PROFILE_DIR) -> dict[str, Profile]:
    """Every profile shipped in ``directory`` (PDUs by default), by name, parsed once per process."""
    if directory not in _CACHE:
        found = {}
        for path in sorted(directory.glob("*.toml")):
            profile = load_profile_file(path)
            found[profile.name] = profile
        _CACHE[directory] = found
    return dict(_CACHE[directory])


def get_profile(name: str, directory: Path = PROFILE_DIR, what: str = "SNMP PDU") -> Profile:
    profiles = builtin_profiles(directory)
    if name not in profiles:
        known = ", ".join(sorted([*profiles, "auto", "generic"]))
        raise ProfileError(f"unknown {what} profile {name!r}; known: {known}")
    return profiles[name]


def _starts(oid: tuple[int, ...], prefix: tuple[int, ...]) -> bool:
    return oid[: len(prefix)] == prefix


def match_sys_object_id(sys_object_id: tuple[int, ...],
                        directory: Path = PROFILE_DIR) -> tuple[Profile, tuple[int, ...]] | None:
    """The profile whose sysObjectID prefix is the longest match, and that prefix; None if none.

    Most specific wins: an APC Easy PDU (.318.1.3.4.9) is ``apc_epdu``, not ``apc_rpdu2``
    (.318.1.3.4), whichever file is read first. A profile may also exclude prefixes under its own.
    """
    best: tuple[Profile, tuple[int, ...]] | None = None
    for profile in builtin_profiles(directory).values():
        if any(_starts(sys_object_id, ex) for ex in profile.exclude_sys_object_ids):
            continue
        for prefix in profile.sys_object_ids:
            if _starts(sys_object_id, prefix) and (best is None or len(prefix) > len(best[1])):
                best = (profile, prefix)
    return best


def generic_profile(oids: tuple[Any, ...]) -> Profile:
    """The ``generic`` profile from ``[[pdu]] oids = [{oid, signal, scale}]`` (scalar OIDs, no tables)."""
    measures = tuple(  # read and checked as a profile's scalar measures are
        _measure({"signal": o.signal, "oid": o.oid, "scale": o.scale, "source": "configuration"},
                 f"oids[{i}]", tables={})
        for i, o in enumerate(oids)
    )
    if not measures:
        raise ProfileError('profile "generic" needs oids = [{oid = "...", signal = "power_w", scale = 1}]')
    return Profile(name="generic", title="OIDs listed in the configuration", sys_object_ids=(),
                   tables={}, measures=measures, source="configuration")
