"""Configuration of the node link: ``[uplink]`` on a node agent, ``[node_link]`` and ``[[node]]`` on the rack.

The sections (docs/node.md) are registered in ``agent.config.rules.SECTIONS``; this module owns their
shapes, their value rules and the rules between roles (``check_roles``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.config.checks import PORT, between, check_file, matches, positive
from agent.config.convert import Context, Spec, show
from agent.config.hosts import host_problem
from agent.config.secrets import SecretError, read_secret
from agent.config.toml_lines import KeyPath
from agent.node.wire import MAX_GPUS, MAX_ID_BYTES

DEFAULT_PORT = 9870  # the rack agent's node-link UDP port (unassigned by IANA; 9860 is /metrics)
ROLES = ("rack", "node")
# HMAC-SHA256 keys: 16 bytes (128 bits) is the least that resists an offline search from one
# captured datagram; `openssl rand -hex 32` writes 64 characters.
MIN_KEY_CHARS = 16
KEY_HINT = "write one with: openssl rand -hex 32 > FILE"


@dataclass(frozen=True)
class UplinkSection:
    """``[uplink]``: where a node agent sends its GPU readings."""

    node_id: str
    gateway: str  # the rack agent's host name or address
    key_file: Path  # the key this node shares with the rack agent (its [[node]] key_file)
    port: int = DEFAULT_PORT
    interval_s: float = 1.0  # one NVML poll and one datagram per interval


@dataclass(frozen=True)
class NodeLinkSection:
    """``[node_link]``: the rack agent's UDP listener for its nodes."""

    address: str = "0.0.0.0"  # every interface: the nodes are on the rack's network
    port: int = DEFAULT_PORT
    # A node synchronised by NTP/chrony is within milliseconds of the gateway. An offset of more
    # than two 1-s ticks means its time sync is broken (and its clock may be stepped by seconds at
    # any moment, moving its readings across frames); the same bound keeps a captured datagram
    # from being accepted more than 2 s after it was sent.
    max_skew_s: float = 2.0


@dataclass(frozen=True)
class NodeSection:
    """``[[node]]``: one GPU node running ``role = "node"``, in rack GPU order."""

    id: str
    key_file: Path
    gpu_count: int = 8  # GPUs this node sends (as [[dcgm]] gpu_count): fixes the rack-wide gpu.<i> numbering
    first_gpu: int | None = None  # rack-wide index of its first GPU; None → after the previous source
    interval_s: float = 1.0  # the node's [uplink] interval_s


def check_key_file(ctx: Context, path: KeyPath, value: Any) -> None:
    """The shared key: a usable, private secret file (``check_file``'s rule), long enough to be a key."""
    errors = len(ctx.issues)
    check_file(ctx, path, value)
    if not isinstance(value, Path) or len(ctx.issues) > errors:
        return
    try:
        key = read_secret(value)
    except SecretError:
        return  # unreadable by this user: check_file has warned
    if len(key) < MIN_KEY_CHARS:
        ctx.error(path, f"key in {value} is {len(key)} characters; at least {MIN_KEY_CHARS} ({KEY_HINT})")


NODE_ID = matches(rf"[a-z0-9_]{{1,{MAX_ID_BYTES}}}", "the node's id in the rack's [[node]] tables")
UPLINK = Spec(
    checks={"node_id": [NODE_ID], "gateway": [host_problem], "port": [PORT],
            "interval_s": [between(0.1, 60)]},  # 0.1 s: NVML's own refresh; 60 s: slower is not telemetry
    literal_secrets={"key": "key_file", "secret": "key_file"},
    on_value=check_key_file,
)
NODE_LINK = Spec(checks={"address": [host_problem], "port": [PORT], "max_skew_s": [positive]})
NODE = Spec(
    checks={"id": [NODE_ID], "gpu_count": [between(1, MAX_GPUS)], "first_gpu": [between(0, 4095)],
            "interval_s": [between(0.1, 60)]},
    literal_secrets={"key": "key_file", "secret": "key_file"},
    on_value=check_key_file,
)

# Sections only one role uses: what the other role is told instead.
RACK_ONLY = {"pdus": "pdu", "cracs": "crac", "dcgms": "dcgm", "nodes": "node"}


def check_roles(ctx: Context, kwargs: dict[str, Any]) -> None:
    """Rules between ``[agent] role`` and the other sections (on the sections as built)."""
    agent = kwargs.get("agent")
    role = getattr(agent, "role", "rack")
    if role == "node":
        if kwargs.get("uplink") is None:
            ctx.error(("agent", "role"),
                      'role = "node" needs an [uplink] section: node_id, gateway, key_file')
        for field_name, section in RACK_ONLY.items():
            if kwargs.get(field_name):
                ctx.error((section,), f'not used with role = "node": a node agent reads only its own GPUs; '
                          f"[[{section}]] belongs in the rack agent's configuration")
        nvml = kwargs.get("nvml")
        if nvml is not None and not nvml.enabled:
            ctx.error(("nvml", "enabled"),
                      'must be true with role = "node" (a node agent reads its local NVML)')
        return
    if kwargs.get("uplink") is not None:
        ctx.error(("uplink",), 'only used with role = "node" (this agent has role = "rack")')
    nodes = kwargs.get("nodes") or ()
    nvml_enabled = getattr(kwargs.get("nvml"), "enabled", True)  # no [nvml] section: the default, on
    if nodes and nvml_enabled and nodes[0].first_gpu in (None, 0):
        ctx.warn(("nvml", "enabled"),
                 "the rack agent also reads this host's own GPUs as gpu.0…, where [[node]] "
                 f"{show(nodes[0].id)} starts too: on a gateway without GPUs set [nvml] enabled = false, "
                 "else set first_gpu on the first [[node]] after the local GPUs")
