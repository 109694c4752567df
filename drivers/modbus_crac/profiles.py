"""Cooling-unit register maps as data: vendor profiles (``profiles/*.json``) plus the site's own
``[[crac.registers]]``, validated into ``Point`` objects before any I/O. Configured registers
override a profile point of the same signal (with ``profile = "generic"`` they are the whole map).
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

from drivers.modbus_crac.config import COOLING_KINDS, ModbusRegister
from drivers.modbus_crac.decode import DEFAULT_SENTINELS, TYPE_WIDTH, WORD_ORDERS, unit_problem

TABLE_FUNCTION_CODE = {"holding": 3, "input": 4}
DEFAULT_COP = 3.5  # PROTOCOLS.md §3.6: DX COP ≈ 3–4 at full load; the middle of that range
_SIGNAL = re.compile(r"[a-z][a-z0-9_]*")


class ProfileError(ValueError):
    """A profile file or configured register that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class Point:
    """One value read from the unit: ``address`` is the 0-based protocol address."""

    signal: str
    address: int
    table: str = "holding"
    type: str = "u16"
    word_order: str = "big"
    scale: float = 1.0
    unit: str = ""
    sentinels: frozenset[int] = frozenset()
    source: str = ""
    verified: bool = True  # False: the address comes from a manual only, no real unit has confirmed it

    @property
    def width(self) -> int:
        return TYPE_WIDTH[self.type]

    @property
    def function_code(self) -> int:
        return TABLE_FUNCTION_CODE[self.table]


@dataclass(frozen=True)
class Profile:
    name: str
    title: str
    points: tuple[Point, ...]
    cooling_kind: str = "unknown"  # dx | chilled_water | unknown: is there a compressor to estimate?
    cop: float = DEFAULT_COP
    max_registers: int = 125  # per request; the Modbus limit, lower for slow gateways
    bridge_gap: int = 0  # undefined registers a batch may read through (0: strictly contiguous)
    sources: tuple[str, ...] = ()


def available_profiles() -> list[str]:
    folder = resources.files("drivers.modbus_crac") / "profiles"
    return sorted(entry.name[:-5] for entry in folder.iterdir() if entry.name.endswith(".json"))


def load_profile(name: str) -> Profile:
    """The named profile from ``profiles/<name>.json``; ``ProfileError`` names the problem."""
    if not re.fullmatch(r"[a-z0-9_]+", name) or name not in available_profiles():
        raise ProfileError(f"unknown profile {name!r} (known: {', '.join(available_profiles())})")
    resource = resources.files("drivers.modbus_crac") / "profiles" / f"{name}.json"
    try:
        data = json.loads(resource.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ProfileError(f"profile {name!r}: cannot read {resource}: {exc}") from None
    return profile_from_dict(data, where=f"profile {name!r}")


def profile_from_dict(data: dict[str, Any], where: str) -> Profile:
    defaults = {
        "table": data.get("table", "holding"),
        "word_order": data.get("word_order", "big"),
        "sentinels": data.get("sentinels", {}),
    }
    points = tuple(
        _point(raw, defaults, f"{where} point {index} ({raw.get('signal', '?')})")
        for index, raw in enumerate(data.get("points", []))
    )
    kind = data.get("cooling_kind", "unknown")
    if kind not in COOLING_KINDS:
        raise ProfileError(f"{where}: cooling_kind must be one of {COOLING_KINDS}, got {kind!r}")
    profile = Profile(
        name=str(data["name"]),
        title=str(data.get("title", data["name"])),
        points=points,
        cooling_kind=kind,
        cop=float(data.get("cop", DEFAULT_COP)),
        max_registers=int(data.get("max_registers", 125)),
        bridge_gap=int(data.get("bridge_gap", 0)),
        sources=tuple(data.get("sources", ())),
    )
    if not 1 <= profile.max_registers <= 125:
        raise ProfileError(f"{where}: max_registers must be 1..125, got {profile.max_registers}")
    if profile.cop <= 0:
        raise ProfileError(f"{where}: cop must be > 0, got {profile.cop}")
    _check_unique(points, where)
    return profile


def _sentinels(spec: Any, type_: str, where: str) -> frozenset[int]:
    if spec is None:
        return DEFAULT_SENTINELS[type_]
    try:
        return frozenset(int(item, 0) if isinstance(item, str) else int(item) for item in spec)
    except (TypeError, ValueError):
        raise ProfileError(f"{where}: sentinels must be integers or hex strings, got {spec!r}") from None


def _point(raw: dict[str, Any], defaults: dict[str, Any], where: str) -> Point:
    type_ = raw.get("type", "u16")
    if type_ not in TYPE_WIDTH:
        raise ProfileError(f"{where}: type must be one of {sorted(TYPE_WIDTH)}, got {type_!r}")
    sentinel_spec = raw.get("sentinels", defaults["sentinels"].get(type_))
    point = Point(
        signal=str(raw.get("signal", "")),
        address=raw.get("address", -1),
        table=raw.get("table", defaults["table"]),
        type=type_,
        word_order=raw.get("word_order", defaults["word_order"]),
        scale=float(raw.get("scale", 1.0)),
        unit=str(raw.get("unit", "")),
        sentinels=_sentinels(sentinel_spec, type_, where),
        source=str(raw.get("source", "")),
        verified=raw.get("verified", True),
    )
    if not isinstance(point.verified, bool):
        raise ProfileError(f"{where}: verified must be true or false, got {point.verified!r}")
    check_point(point, where)
    return point


def check_point(point: Point, where: str) -> None:
    problems = []
    if not _SIGNAL.fullmatch(point.signal):
        problems.append(f"signal must match [a-z][a-z0-9_]*, got {point.signal!r}")
    if not isinstance(point.address, int) or not 0 <= point.address <= 65535 - point.width + 1:
        problems.append(f"address must be a 0-based register address 0..65535, got {point.address!r}")
    if point.table not in TABLE_FUNCTION_CODE:
        problems.append(f"table must be holding or input, got {point.table!r}")
    if point.word_order not in WORD_ORDERS:
        problems.append(f"word_order must be big or little, got {point.word_order!r}")
    if point.scale == 0:
        problems.append("scale must not be 0")
    unit = unit_problem(point.signal, point.unit)
    if unit:
        problems.append(unit)
    if problems:
        raise ProfileError(f"{where}: " + "; ".join(problems))


def _check_unique(points: tuple[Point, ...], where: str) -> None:
    seen: set[str] = set()
    for point in points:
        if point.signal in seen:
            raise ProfileError(f"{where}: signal {point.signal!r} is mapped twice")
        seen.add(point.signal)


def point_from_register(register: ModbusRegister, where: str) -> Point:
    """A ``[[crac.registers]]`` entry as a point (default sentinels for its type), read and checked
    as a profile's point is."""
    raw = {**dataclasses.asdict(register), "source": "site configuration"}
    return _point(raw, {"table": register.table, "word_order": register.word_order, "sentinels": {}}, where)


def merged_points(profile: Profile, registers: tuple[ModbusRegister, ...], where: str) -> tuple[Point, ...]:
    """The profile's points with configured registers replacing (or adding) points by signal."""
    configured = [
        point_from_register(register, f"{where} registers[{index}]")
        for index, register in enumerate(registers)
    ]
    _check_unique(tuple(configured), f"{where} registers")
    overridden = {point.signal for point in configured}
    return tuple(point for point in profile.points if point.signal not in overridden) + tuple(configured)
