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
from agent.config.hosts import host_problem
from agent.config.model import (
    AgentSection,
    CracConfig,
    EngineSection,
    MetricsSection,
    ModbusRegister,
    MqttSection,
    NvmlSection,
    PduConfig,
    SnmpOid,
    StagesSection,
)
from agent.config.paths import directory_problem, unix_socket_problem
from agent.config.secrets import secret_file_problem
from agent.config.toml_lines import KeyPath
from drivers.dcgm_exporter.config import DcgmSection
from drivers.dcgm_exporter.http_get import parse_url

ID_PATTERN = r"[a-z0-9_]+"
# Keys holding files: secrets (warn when others can read them) and other files that must exist.
SECRET_FILE_KEYS = ("community_file", "auth_key_file", "priv_key_file", "password_file", "key_file")
OTHER_FILE_KEYS = ("ca_file", "cert_file", "client_ca_file")
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
    """Secret files must exist, be usable, and should be private; CA and certificate files must exist."""
    key = path[-1]
    if not isinstance(value, Path):
        return
    if key in SECRET_FILE_KEYS:
        problem = secret_file_problem(value)
        if problem:
            severity, message = problem
            (ctx.error if severity == "error" else ctx.warn)(path, message)
    elif key in OTHER_FILE_KEYS:
        try:
            exists = value.is_file()
        except OSError as exc:
            ctx.error(path, f"cannot check {value}: {exc.strerror or exc}")
            return
        if not exists:
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


# The identities packaging/agent.toml ships with. Two agents left on them share one MQTT client id
# and knock each other off the broker (13 reconnects each in 25 s), so they are refused.
PLACEHOLDER_IDENTITIES = ("my-site", "my-rack")


def not_placeholder(value: str) -> str | None:
    if value in PLACEHOLDER_IDENTITIES:
        return (f"{show(value)} is the example's placeholder: set this rack's real name (two agents left on "
                "the placeholders share one MQTT client id and knock each other off the broker)")
    return None


SITE_NAME = matches(r"[A-Za-z0-9_.-]+", "it is used in MQTT topics")
PORT = between(1, 65535)

AGENT = Spec(
    checks={
        "site": [SITE_NAME, not_placeholder],
        "rack": [SITE_NAME, not_placeholder],
        "state_dir": [directory_problem],
        "tick_s": [positive],
    }
)
MQTT = Spec(
    checks={
        "host": [host_problem],
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
        "host": [host_problem],
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
        "cooling_kind": [one_of("dx", "chilled_water", "unknown")],
        "protocol": [one_of("modbus", "snmp")],
        "version": [one_of("2c", "3")],
        "auth_protocol": [one_of("MD5", "SHA", "SHA224", "SHA256", "SHA384", "SHA512")],
        "priv_protocol": [one_of("DES", "AES", "AES192", "AES256", "none")],
        "deadline_s": [positive],
    },
    converters={"version": _snmp_version},
    on_value=check_file,
    nested={ModbusRegister: MODBUS_REGISTER},
)
NVML = Spec(checks={"interval_s": [positive]}, converters={"gpus": _gpus})


def metrics_url(value: str) -> str | None:
    """An exporter's ``http(s)://host[:port]/path``, its host held to the same rule as every host."""
    try:
        target = parse_url(value)
    except ValueError as exc:
        return str(exc)
    problem = host_problem(target.host)
    return f"host in {value!r}: {problem}" if problem else None


DCGM = Spec(
    checks={
        "id": [matches(ID_PATTERN)],
        "url": [metrics_url],
        "gpu_count": [between(1, 64)],  # 64: more GPUs than any node board carries
        "first_gpu": [between(0, 4095)],
        "interval_s": [positive],
        "timeout_s": [positive],
        "max_body_bytes": [between(1024, 256 * 1024 * 1024)],
    },
    literal_secrets={"password": "password_file"},
    on_value=check_file,
)
STAGES = Spec(
    checks={
        "socket_path": [unix_socket_problem],
        "udp_port": [PORT],
        "hint_ttl_s": [positive],
        "rate_limit_per_s": [positive],
    },
    retired={"inference": "the stage is always inferred from GPU telemetry when no hint is current"},
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

METRICS = Spec(
    checks={
        "address": [not_empty],
        "port": [PORT],
        "node": [matches(r"[A-Za-z0-9_.-]*", "letters, digits, _ . -")],
        "row": [matches(r"[A-Za-z0-9_.-]*", "letters, digits, _ . -")],
        "hall": [matches(r"[A-Za-z0-9_.-]*", "letters, digits, _ . -")],
        "max_jobs": [between(1, 100)],
    },
    on_value=check_file,
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
    _unique_signals(ctx, (*path, "registers"), [r.signal for r in crac.registers])


def check_dcgm(ctx: Context, path: KeyPath, dcgm: DcgmSection) -> None:
    if dcgm.password_file is not None and dcgm.username is None:
        ctx.error((*path, "username"), "required when password_file is set")
    if dcgm.ca_file is not None and not dcgm.url.startswith("https://"):
        ctx.error((*path, "ca_file"), "only used with an https:// url")


def _check_snmp_crac(ctx: Context, path: KeyPath, crac: CracConfig) -> None:
    snmp_names = _profile_names("snmp_crac", ".toml")
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
    if crac.version == "2c" and crac.community_file is None:
        ctx.error((*path, "community_file"), 'required with version = "2c" (a file holding the community)')
    if crac.version == "3" and crac.user is None:
        ctx.error((*path, "user"), 'required with version = "3" (the USM user name)')
    if crac.deadline_s is not None and crac.deadline_s > crac.interval_s:
        ctx.error((*path, "deadline_s"),
                  f"must be <= interval_s ({crac.interval_s}), got {show(crac.deadline_s)}")


def check_mqtt(ctx: Context, path: KeyPath, mqtt: MqttSection) -> None:
    if (mqtt.cert_file is None) != (mqtt.key_file is None):
        missing = "key_file" if mqtt.key_file is None else "cert_file"
        ctx.error((*path, missing), "a TLS client certificate needs both cert_file and key_file")
    if mqtt.cert_file is not None and mqtt.ca_file is None:
        ctx.error((*path, "ca_file"), "required when cert_file is set (TLS is on only with ca_file)")
    if mqtt.password_file is not None and mqtt.username is None:
        ctx.error((*path, "username"), "required when password_file is set")


def check_metrics(ctx: Context, path: KeyPath, metrics: MetricsSection) -> None:
    if (metrics.cert_file is None) != (metrics.key_file is None):
        missing = "key_file" if metrics.key_file is None else "cert_file"
        ctx.error((*path, missing), "HTTPS needs both cert_file and key_file")
    if metrics.client_ca_file is not None and metrics.cert_file is None:
        ctx.error((*path, "cert_file"),
                  "required when client_ca_file is set (client certificates need HTTPS)")


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
    "dcgm": (DcgmSection, True, "dcgms", DCGM, check_dcgm),
    "stages": (StagesSection, False, "stages", STAGES, None),
    "engine": (EngineSection, False, "engine", ENGINE, None),
    "metrics": (MetricsSection, False, "metrics", METRICS, check_metrics),
}
