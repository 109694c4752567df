"""The value rules of the agent's own sections (ranges, choices, patterns, cross-key rules), and the
list of every section (``SECTIONS``): a device section's rules are its driver room's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agent.config.checks import PORT, between, check_file, fraction, matches, not_empty, one_of, positive
from agent.config.convert import Context, Spec, show
from agent.config.hosts import host_problem
from agent.config.model import AgentSection, EngineSection, MetricsSection, MqttSection, StagesSection
from agent.config.paths import directory_problem, unix_socket_problem
from agent.config.toml_lines import KeyPath
from agent.node.config import NODE, NODE_LINK, ROLES, UPLINK, NodeLinkSection, NodeSection, UplinkSection
from drivers.dcgm_exporter.config import DCGM, DcgmSection, check_dcgm
from drivers.modbus_crac.config import CRAC, CracConfig, check_crac
from drivers.nvml_gpu.config import NVML, NvmlSection
from drivers.snmp_pdu.config import PDU, PduConfig, check_pdu


def topic_safe(value: str) -> str | None:
    """MQTT topic levels: no wildcards, no empty levels."""
    levels = value.split("/")
    if any(not level or any(c in level for c in "+#\0") for level in levels):
        return f"must be a topic without +, # or empty levels, got {show(value)}"
    return None


# The identities packaging/agent.toml ships with. Two agents left on them share one MQTT client id
# and knock each other off the broker (13 reconnects each in 25 s), so they are refused.
PLACEHOLDER_IDENTITIES = ("my-site", "my-rack")


def not_placeholder(value: str) -> str | None:
    if value in PLACEHOLDER_IDENTITIES:
        return (f"{show(value)} is the example's placeholder: set this rack's real name (two agents left on "
                "the placeholders share one MQTT client id and knock each other off the broker)")
    return None


SITE_NAME = matches(r"[A-Za-z0-9_.-]+", "it is used in MQTT topics")
LABEL = matches(r"[A-Za-z0-9_.-]*", "letters, digits, _ . -")  # MQTT client ids, metric labels

AGENT = Spec(
    checks={
        "site": [SITE_NAME, not_placeholder],
        "rack": [SITE_NAME, not_placeholder],
        "state_dir": [directory_problem],
        "tick_s": [positive],
        "role": [one_of(*ROLES)],
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
        "client_id": [LABEL],
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
        "node": [LABEL],
        "row": [LABEL],
        "hall": [LABEL],
        "max_jobs": [between(1, 100)],
    },
    on_value=check_file,
)


# -- rules between keys ------------------------------------------------------------------------


def _cert_and_key(ctx: Context, path: KeyPath, section: MqttSection | MetricsSection, what: str) -> None:
    if (section.cert_file is None) != (section.key_file is None):
        missing = "key_file" if section.key_file is None else "cert_file"
        ctx.error((*path, missing), f"{what} needs both cert_file and key_file")


def check_mqtt(ctx: Context, path: KeyPath, mqtt: MqttSection) -> None:
    _cert_and_key(ctx, path, mqtt, "a TLS client certificate")
    if mqtt.cert_file is not None and mqtt.ca_file is None:
        ctx.error((*path, "ca_file"), "required when cert_file is set (TLS is on only with ca_file)")
    if mqtt.password_file is not None and mqtt.username is None:
        ctx.error((*path, "username"), "required when password_file is set")


def check_metrics(ctx: Context, path: KeyPath, metrics: MetricsSection) -> None:
    _cert_and_key(ctx, path, metrics, "HTTPS")
    if metrics.client_ca_file is not None and metrics.cert_file is None:
        ctx.error((*path, "cert_file"),
                  "required when client_ca_file is set (client certificates need HTTPS)")


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
    # the node link (agent/node/config.py): [uplink] on a node agent, [node_link] and [[node]] on the rack
    "uplink": (UplinkSection, False, "uplink", UPLINK, None),
    "node_link": (NodeLinkSection, False, "node_link", NODE_LINK, None),
    "node": (NodeSection, True, "nodes", NODE, None),
}
