"""``[[pdu]]``: one PDU the agent polls over SNMP — its configuration shape and value rules.

The driver room owns its configuration; ``agent.config`` only assembles it (``agent.config.rules``
lists the sections).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agent.config.checks import (
    ID_PATTERN,
    NAME_PATTERN,
    PORT,
    between,
    check_file,
    known_profile,
    matches,
    nonzero,
    one_of,
    positive,
    snmp_version,
    unique_signals,
)
from agent.config.convert import Check, Context, Spec, show
from agent.config.hosts import host_problem
from agent.config.toml_lines import KeyPath

# A PDU feed's power above this is not a reading (input hygiene), where the configuration names no
# rating: above the largest rack feed in service (3-phase 480 V × 100 A ≈ 83 kW), so a real reading is
# never dropped — a 64-GPU rack draws 40 kW per feed of an A/B pair, all of it on one when its pair
# fails — while a unit mix-up (mW, or VA × 10) still lands above it.
PDU_MAX_POWER_W = 100_000.0


@dataclass(frozen=True)
class SnmpOid:
    """One OID of the generic PDU profile: value × scale is the canonical signal."""

    oid: str
    signal: str  # canonical suffix, e.g. "power_w", "energy_kwh", "voltage_v"
    scale: float = 1.0


@dataclass(frozen=True, kw_only=True)
class SnmpAccess:
    """The SNMP access keys a section carries ([[pdu]], [[crac]] protocol = "snmp"): one owner of
    their shape, defaults and rules (``SNMP_CHECKS``, ``check_snmp_access``)."""

    version: str = "2c"  # "2c" | "3"
    community_file: Path | None = None  # v2c: community read from this file
    user: str | None = None  # v3 USM user
    auth_protocol: str = "SHA"  # MD5 | SHA | SHA224 | SHA256 | SHA384 | SHA512
    auth_key_file: Path | None = None
    priv_protocol: str = "AES"  # DES | AES | AES192 | AES256 | none
    priv_key_file: Path | None = None
    context: str = ""  # v3 context name
    deadline_s: float | None = None  # whole-poll deadline; None → 0.8 × interval_s


@dataclass(frozen=True)
class PduConfig(SnmpAccess):
    id: str
    host: str
    port: int = 161
    profile: str = "auto"
    interval_s: float = 5.0
    timeout_s: float = 1.0
    retries: int = 1
    max_power_w: float = PDU_MAX_POWER_W  # physical maximum for input hygiene (the PDU's rating)
    oids: tuple[SnmpOid, ...] = ()  # generic profile only
    detail_signals: bool = False  # also per unit/cord/phase: pdu.<id>.unit1.phase2.current_a


SNMP_OID = Spec(
    checks={
        "oid": [matches(r"\.?[0-9]+(\.[0-9]+)+", "a numeric OID")],
        "signal": [matches(NAME_PATTERN, "a canonical signal suffix such as power_w")],
        "scale": [nonzero],
    }
)
# The SNMP access keys' rules, one owner for [[pdu]] and [[crac]] protocol = "snmp".
SNMP_CHECKS: dict[str, list[Check]] = {
    "version": [one_of("2c", "3")],
    "auth_protocol": [one_of("MD5", "SHA", "SHA224", "SHA256", "SHA384", "SHA512")],
    "priv_protocol": [one_of("DES", "AES", "AES192", "AES256", "none")],
    "deadline_s": [positive],
}
SNMP_SECRETS = {"community": "community_file", "auth_key": "auth_key_file", "priv_key": "priv_key_file",
                "auth_password": "auth_key_file", "priv_password": "priv_key_file",
                "password": "auth_key_file"}
PDU = Spec(
    checks={
        "id": [matches(ID_PATTERN)],
        "host": [host_problem],
        "port": [PORT],
        "profile": [known_profile("snmp_pdu", ".toml", ("auto", "generic"))],
        "interval_s": [positive],
        "timeout_s": [positive],
        "retries": [between(0, 10)],
        "max_power_w": [positive],
        **SNMP_CHECKS,
    },
    literal_secrets=SNMP_SECRETS,
    converters={"version": snmp_version},
    on_value=check_file,
    nested={SnmpOid: SNMP_OID},
)


def check_snmp_access(ctx: Context, path: KeyPath, s: SnmpAccess, interval_s: float) -> None:
    """v2c needs a community file and no USM keys; v3 a user and, for privacy, authentication."""
    if s.version == "2c":
        if s.community_file is None:
            ctx.error((*path, "community_file"),
                      'required with version = "2c" (a file holding the community)')
        for name in ("user", "auth_key_file", "priv_key_file"):
            if getattr(s, name) is not None:
                ctx.error((*path, name), 'only used with version = "3"')
    else:
        if s.user is None:
            ctx.error((*path, "user"), 'required with version = "3" (the USM user name)')
        if s.community_file is not None:
            ctx.error((*path, "community_file"), 'only used with version = "2c"')
        if s.priv_key_file is not None and s.auth_key_file is None:
            ctx.error((*path, "priv_key_file"), "privacy needs authentication: set auth_key_file too")
    if s.deadline_s is not None and s.deadline_s > interval_s:
        ctx.error((*path, "deadline_s"), f"must be <= interval_s ({interval_s}), got {show(s.deadline_s)}")


def check_pdu(ctx: Context, path: KeyPath, pdu: PduConfig) -> None:
    check_snmp_access(ctx, path, pdu, pdu.interval_s)
    if pdu.profile == "generic" and not pdu.oids:
        ctx.error((*path, "oids"),
                  'required with profile = "generic": oids = [{oid = "...", signal = "power_w"}]')
    if pdu.oids and pdu.profile != "generic":
        ctx.error((*path, "oids"), f'only used with profile = "generic", not {show(pdu.profile)}')
    unique_signals(ctx, (*path, "oids"), [o.signal for o in pdu.oids])
