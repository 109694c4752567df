"""The value rules of every configuration key: ranges, choices, patterns, and cross-key rules.

Types and defaults come from ``agent.config.model``; this module only says which values are
acceptable and why. Messages read as the end of ``<key path>: ...``.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.config.convert import MISSING, Check, Context, Spec, convert_value, show, suggest
from agent.config.model import (
    AgentSection,
    CracConfig,
    EngineSection,
    ModbusRegister,
    MqttSection,
    NvmlSection,
    PduConfig,
    SnmpOid,
    StagesSection,
)
from agent.config.secrets import secret_file_problem
from agent.config.toml_lines import KeyPath

ID_PATTERN = r"[a-z0-9_]+"
# Keys holding files: secrets (warn when others can read them) and other files that must exist.
SECRET_FILE_KEYS = ("community_file", "auth_key_file", "priv_key_file", "password_file", "key_file")
OTHER_FILE_KEYS = ("ca_file", "cert_file")
NAME_PATTERN = r"[a-z][a-z0-9_]*"


def positive(value: float) -> str | None:
    return None if value > 0 else f"must be > 0, got {show(value)}"


def at_least(low: float) -> Check:
    return lambda value: None if value >= low else f"must be >= {low}, got {show(value)}"


def between(low: int, high: int) -> Check:
    def check(value: float) -> str | None:
        return None if low <= value <= high else f"must be between {low} and {high}, got {show(value)}"

    return check


def fraction(value: float) -> str | None:
    return None if 0 < value <= 1 else f"must be in (0, 1], got {show(value)}"


def nonzero(value: float) -> str | None:
    return None if value != 0 else "must not be 0"


def one_of(*choices: str) -> Check:
    listed = ", ".join(f'"{c}"' for c in choices)
    return lambda value: None if value in choices else f"must be one of {listed}, got {show(value)}"


def matches(pattern: str, why: str = "") -> Check:
    compiled = re.compile(pattern)
    note = f" ({why})" if why else ""
    return lambda value: (
        None if compiled.fullmatch(value) else f"must match {pattern}{note}, got {show(value)}"
    )


def not_empty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


def topic_safe(value: str) -> str | None:
    """MQTT topic levels: no wildcards, no empty levels."""
    levels = value.split("/")
    if any(not level or any(c in level for c in "+#\0") for level in levels):
        return f"must be a topic without +, # or empty levels, got {show(value)}"
    return None


def _gpus(ctx: Context, path: KeyPath, value: Any) -> Any:
    """``nvml.gpus``: ``"all"`` or an array of distinct GPU indexes."""
    if value == "all":
        return None
    converted = convert_value(ctx, path, value, tuple[int, ...], Spec())
    if converted is MISSING:
        return MISSING
    if any(i < 0 for i in converted) or len(set(converted)) != len(converted):
        ctx.error(path, f'must be "all" or an array of distinct GPU indexes >= 0, got {show(value)}')
        return MISSING
    return converted


def _snmp_version(ctx: Context, path: KeyPath, value: Any) -> Any:
    """``pdu.version`` is text: ``version = 3`` is a common slip worth a precise message."""
    if not isinstance(value, str):
        ctx.error(path, f'must be the string "2c" or "3", got {show(value)} (not a string)')
        return MISSING
    return value


def check_file(ctx: Context, path: KeyPath, value: Any) -> None:
    """Secret files must exist and should be private; CA and certificate files must exist."""
    key = path[-1]
    if not isinstance(value, Path):
        return
    if key in SECRET_FILE_KEYS:
        problem = secret_file_problem(value)
        if problem:
            severity, message = problem
            (ctx.error if severity == "error" else ctx.warn)(path, message)
    elif key in OTHER_FILE_KEYS and not value.is_file():
        ctx.error(path, f"file {value} does not exist")


def _profile_names(family: str, suffix: str) -> list[str] | None:
    """Names of the profiles a driver ships (file stems in ``drivers/<family>/profiles``).

    Read from the files, not by importing the driver (which pulls in pysnmp/pymodbus); None when
    the driver is not installed, in which case only the name's form is checked.
    """
    spec = importlib.util.find_spec("drivers")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        folder = Path(location) / family / "profiles"
        if folder.is_dir():
            return sorted(p.stem for p in folder.glob(f"*{suffix}"))
    return None


def known_profile(family: str, suffix: str, extra: tuple[str, ...]) -> Check:
    def check(value: str) -> str | None:
        names = _profile_names(family, suffix)
        if names is None or value in names or value in extra:
            return None
        known = sorted({*names, *extra})
        listed = ", ".join(f'"{n}"' for n in known)
        return f"unknown profile {show(value)}{suggest(value, known)} (known: {listed})"

    return check


SITE_NAME = matches(r"[A-Za-z0-9_.-]+", "it is used in MQTT topics")
PORT = between(1, 65535)

AGENT = Spec(checks={"site": [SITE_NAME], "rack": [SITE_NAME], "tick_s": [positive]})
MQTT = Spec(
    checks={
        "host": [not_empty],
        "port": [PORT],
        "topic_root": [topic_safe],
        "qos": [between(0, 2)],
        "keepalive_s": [between(5, 65535)],
        "summary_interval_s": [positive],
        "spool_max_mb": [positive],
        "client_id": [matches(r"[A-Za-z0-9_.-]*", "letters, digits, _ . -")],
    },
    literal_secrets={"password": "password_file"},
    on_value=check_file,
)
SNMP_OID = Spec(
    checks={
        "oid": [matches(r"\.?[0-9]+(\.[0-9]+)+", "a numeric OID")],
        "signal": [matches(NAME_PATTERN, "a canonical signal suffix such as power_w")],
        "scale": [nonzero],
    }
)
PDU = Spec(
    checks={
        "id": [matches(ID_PATTERN)],
        "host": [not_empty],
        "port": [PORT],
        "version": [one_of("2c", "3")],
        "auth_protocol": [one_of("MD5", "SHA", "SHA224", "SHA256", "SHA384", "SHA512")],
        "priv_protocol": [one_of("DES", "AES", "AES192", "AES256", "none")],
        "profile": [known_profile("snmp_pdu", ".toml", ("auto", "generic"))],
        "interval_s": [positive],
        "timeout_s": [positive],
        "retries": [between(0, 10)],
        "deadline_s": [positive],
        "max_power_w": [positive],
    },
    literal_secrets={
        "community": "community_file",
        "auth_key": "auth_key_file",
        "priv_key": "priv_key_file",
        "auth_password": "auth_key_file",
        "priv_password": "priv_key_file",
        "password": "auth_key_file",
    },
    converters={"version": _snmp_version},
    on_value=check_file,
    nested={SnmpOid: SNMP_OID},
)
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
        "host": [not_empty],
        "port": [PORT],
        "unit_id": [between(0, 255)],
        "profile": [known_profile("modbus_crac", ".json", ("generic",))],
        "share": [fraction],
        "interval_s": [positive],
        "timeout_s": [positive],
        "retries": [between(0, 10)],
        "framer": [one_of("socket", "rtu")],
        "rated_fan_power_w": [positive],
        "rated_compressor_power_w": [positive],
        "cooling_kind": [one_of("dx", "chilled_water", "unknown")],
    },
    nested={ModbusRegister: MODBUS_REGISTER},
)
NVML = Spec(checks={"interval_s": [positive]}, converters={"gpus": _gpus})
STAGES = Spec(
    checks={"udp_port": [PORT], "hint_ttl_s": [positive], "rate_limit_per_s": [positive]}
)
ENGINE = Spec(
    checks={
        "window_s": [positive],
        "learning_rate": [fraction],
        "forgetting_halflife_h": [positive],
        "false_alarms_per_30d": [positive],
        "accept_after_h": [positive],
        "max_gpu_power_w": [positive],
        "max_crac_power_w": [positive],
        "max_state_age_h": [positive],
    }
)


# -- rules between keys ------------------------------------------------------------------------
def check_pdu(ctx: Context, path: KeyPath, pdu: PduConfig) -> None:
    if pdu.version == "2c":
        if pdu.community_file is None:
            ctx.error((*path, "community_file"),
                      'required with version = "2c" (a file holding the community)')
        for name in ("user", "auth_key_file", "priv_key_file"):
            if getattr(pdu, name) is not None:
                ctx.error((*path, name), 'only used with version = "3"')
    else:
        if pdu.user is None:
            ctx.error((*path, "user"), 'required with version = "3" (the USM user name)')
        if pdu.community_file is not None:
            ctx.error((*path, "community_file"), 'only used with version = "2c"')
        if pdu.priv_key_file is not None and pdu.auth_key_file is None:
            ctx.error((*path, "priv_key_file"), "privacy needs authentication: set auth_key_file too")
    if pdu.profile == "generic" and not pdu.oids:
        ctx.error((*path, "oids"),
                  'required with profile = "generic": oids = [{oid = "...", signal = "power_w"}]')
    if pdu.oids and pdu.profile != "generic":
        ctx.error((*path, "oids"), f'only used with profile = "generic", not {show(pdu.profile)}')
    if pdu.deadline_s is not None and pdu.deadline_s > pdu.interval_s:
        ctx.error((*path, "deadline_s"),
                  f"must be <= interval_s ({pdu.interval_s}), got {show(pdu.deadline_s)}")
    _unique_signals(ctx, (*path, "oids"), [o.signal for o in pdu.oids])


def check_crac(ctx: Context, path: KeyPath, crac: CracConfig) -> None:
    if crac.profile == "generic" and not crac.registers:
        ctx.error((*path, "registers"),
                  'required with profile = "generic": registers = [{address = 0, signal = "power_w"}]')
    _unique_signals(ctx, (*path, "registers"), [r.signal for r in crac.registers])


def check_mqtt(ctx: Context, path: KeyPath, mqtt: MqttSection) -> None:
    if (mqtt.cert_file is None) != (mqtt.key_file is None):
        missing = "key_file" if mqtt.key_file is None else "cert_file"
        ctx.error((*path, missing), "a TLS client certificate needs both cert_file and key_file")
    if mqtt.cert_file is not None and mqtt.ca_file is None:
        ctx.error((*path, "ca_file"), "required when cert_file is set (TLS is on only with ca_file)")
    if mqtt.password_file is not None and mqtt.username is None:
        ctx.error((*path, "username"), "required when password_file is set")


def _unique_signals(ctx: Context, path: KeyPath, signals: list[str]) -> None:
    for index, signal in enumerate(signals):
        if signal in signals[:index]:
            ctx.error((*path, index, "signal"), f"{show(signal)} appears twice")


def check_unique_ids(ctx: Context, section: str, tables: list[dict[str, Any]]) -> None:
    """Ids of ``[[pdu]]``/``[[crac]]`` tables must differ (checked on the raw tables, so always)."""
    first: dict[str, int] = {}
    for index, table in enumerate(tables):
        item_id = table.get("id")
        if not isinstance(item_id, str):
            continue
        if item_id in first:
            also = f"{section}[{first[item_id]}]"
            ctx.error((section, index, "id"), f"duplicate id {show(item_id)} (also {also})")
        else:
            first[item_id] = index


# TOML section name → (dataclass, is an array of tables, Config field, value rules, rules between keys)
SECTIONS: dict[str, tuple[type, bool, str, Spec, Callable[[Context, KeyPath, Any], None] | None]] = {
    "agent": (AgentSection, False, "agent", AGENT, None),
    "mqtt": (MqttSection, False, "mqtt", MQTT, check_mqtt),
    "pdu": (PduConfig, True, "pdus", PDU, check_pdu),
    "crac": (CracConfig, True, "cracs", CRAC, check_crac),
    "nvml": (NvmlSection, False, "nvml", NVML, None),
    "stages": (StagesSection, False, "stages", STAGES, None),
    "engine": (EngineSection, False, "engine", ENGINE, None),
}
