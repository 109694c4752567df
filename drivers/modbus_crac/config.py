"""``[[crac]]``: one cooling unit, read over Modbus TCP (this room) or SNMP (``drivers.snmp_crac``,
whose keys mirror ``[[pdu]]``) — its configuration shape and value rules.

The driver room owns its configuration; ``agent.config`` only assembles it.
"""

from __future__ import annotations

from dataclasses import dataclass

from agent.config.checks import (
    ID_PATTERN,
    NAME_PATTERN,
    PORT,
    between,
    check_file,
    fraction,
    known_profile,
    matches,
    nonzero,
    one_of,
    positive,
    profile_names,
    snmp_version,
    unique_signals,
)
from agent.config.convert import Context, Spec, show
from agent.config.hosts import host_problem
from agent.config.toml_lines import KeyPath
from drivers.snmp_pdu.config import SNMP_CHECKS, SNMP_SECRETS, SnmpAccess, check_snmp_access


@dataclass(frozen=True)
class ModbusRegister:
    """One register of the generic cooling-unit map."""

    address: int
    signal: str  # canonical suffix, e.g. "power_w", "supply_temp_c"
    table: str = "holding"  # holding | input
    type: str = "u16"  # u16 | s16 | u32 | s32 | f32
    word_order: str = "big"  # big | little
    scale: float = 1.0
    unit: str = ""


@dataclass(frozen=True)
class CracConfig(SnmpAccess):  # the SNMP keys are used with protocol = "snmp" only, as in [[pdu]]
    id: str
    host: str
    port: int = 502
    unit_id: int = 1
    profile: str = "generic"
    share: float = 1.0  # fraction of this unit's power attributed to this rack, in (0, 1]
    interval_s: float = 10.0
    timeout_s: float = 1.0
    retries: int = 1
    framer: str = "socket"  # socket (Modbus TCP) | rtu (RTU over a TCP gateway)
    rated_fan_power_w: float | None = None  # for the power estimate when the unit exposes none
    rated_compressor_power_w: float | None = None
    cooling_kind: str | None = None  # dx | chilled_water | unknown; None → the profile's (estimate only)
    registers: tuple[ModbusRegister, ...] = ()  # generic profile only
    protocol: str = "modbus"  # modbus | snmp (the unit's SNMP agent, read-only GET/GETBULK)


# What a unit's cooling is, for the power estimate (estimate.py): is there a compressor?
COOLING_KINDS = ("dx", "chilled_water", "unknown")
# [[crac]] keys that only one protocol uses (the SNMP ones mirror [[pdu]]).
SNMP_CRAC_KEYS = ("version", "community_file", "user", "auth_key_file", "priv_key_file", "context",
                  "deadline_s")
MODBUS_CRAC_KEYS = ("registers",)
_CRAC_DEFAULTS = CracConfig(id="", host="")


def known_crac_profile(value: str) -> str | None:
    """A Modbus map (modbus_crac/*.json), an SNMP profile (snmp_crac/*.toml), or generic/auto;
    ``check_crac`` then checks that the name belongs to the unit's protocol."""
    if known_profile("snmp_crac", ".toml", ("auto",))(value) is None:
        return None
    return known_profile("modbus_crac", ".json", ("generic", "auto"))(value)


MODBUS_REGISTER = Spec(
    checks={
        "address": [between(0, 65535)],
        "signal": [matches(NAME_PATTERN, "a canonical signal suffix such as power_w")],
        "table": [one_of("holding", "input")],
        "type": [one_of("u16", "s16", "u32", "s32", "f32")],
        "word_order": [one_of("big", "little")],
        "scale": [nonzero],
    }
)
CRAC = Spec(
    checks={
        "id": [matches(ID_PATTERN)],
        "host": [host_problem],
        "port": [PORT],
        "unit_id": [between(0, 255)],
        "profile": [known_crac_profile],
        "share": [fraction],
        "interval_s": [positive],
        "timeout_s": [positive],
        "retries": [between(0, 10)],
        "framer": [one_of("socket", "rtu")],
        "rated_fan_power_w": [positive],
        "rated_compressor_power_w": [positive],
        "cooling_kind": [one_of(*COOLING_KINDS)],
        "protocol": [one_of("modbus", "snmp")],
        **SNMP_CHECKS,
    },
    literal_secrets=SNMP_SECRETS,
    converters={"version": snmp_version},
    on_value=check_file,
    nested={ModbusRegister: MODBUS_REGISTER},
)


def check_crac(ctx: Context, path: KeyPath, crac: CracConfig) -> None:
    if crac.protocol == "snmp":
        _check_snmp_crac(ctx, path, crac)
        return
    for name in SNMP_CRAC_KEYS:
        if getattr(crac, name) != getattr(_CRAC_DEFAULTS, name):
            ctx.error((*path, name), 'only used with protocol = "snmp"')
    if crac.profile == "auto":
        ctx.error((*path, "profile"), 'profile = "auto" needs protocol = "snmp" (Modbus has no way to '
                                      "identify a unit): name the register map")
    if crac.profile == "generic" and not crac.registers:
        ctx.error((*path, "registers"),
                  'required with profile = "generic": registers = [{address = 0, signal = "power_w"}]')
    unique_signals(ctx, (*path, "registers"), [r.signal for r in crac.registers])


def _check_snmp_crac(ctx: Context, path: KeyPath, crac: CracConfig) -> None:
    snmp_names = profile_names("snmp_crac", ".toml")
    if snmp_names is not None and crac.profile not in {*snmp_names, "auto"}:
        listed = ", ".join(f'"{n}"' for n in sorted({*snmp_names, "auto"}))
        ctx.error((*path, "profile"),
                  f"{show(crac.profile)} is not an SNMP cooling-unit profile (known: {listed})")
    if crac.port == _CRAC_DEFAULTS.port:
        ctx.error((*path, "port"),
                  f"{crac.port} is the Modbus TCP port; SNMP agents answer on 161: set port = 161")
    for name in MODBUS_CRAC_KEYS:
        if getattr(crac, name):
            ctx.error((*path, name), 'only used with protocol = "modbus"')
    check_snmp_access(ctx, path, crac, crac.interval_s)
