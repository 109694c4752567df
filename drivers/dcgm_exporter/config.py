"""``[[dcgm]]``: one GPU node whose NVIDIA dcgm-exporter the rack agent scrapes over HTTP.

The driver room owns its configuration shape and value rules; ``agent.config`` only assembles it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from agent.config.checks import ID_PATTERN, between, check_file, matches, positive
from agent.config.convert import Context, Spec
from agent.config.hosts import host_problem
from agent.config.toml_lines import KeyPath
from drivers.dcgm_exporter.http_get import parse_url


@dataclass(frozen=True)
class DcgmSection:
    id: str  # the node's id in this rack ([a-z0-9_]+); the device is "dcgm.<id>"
    url: str  # the exporter's metrics URL, e.g. "http://10.0.4.11:9400/metrics"
    gpu_count: int = 8  # GPUs this node should have: fixes the rack-wide gpu.<i> numbering
    first_gpu: int | None = None  # rack-wide index of this node's first GPU; None → after the previous node
    # dcgm-exporter refreshes its values every `-c` ms (30 000 by default); polling faster than
    # that only re-reads the same numbers, so run the exporter with `-c 1000` for 1 s telemetry.
    interval_s: float = 5.0
    timeout_s: float = 2.0  # whole request (connect + read); bounded below interval_s
    username: str | None = None  # HTTP basic auth (exporter's --web-config-file)
    password_file: Path | None = None
    ca_file: Path | None = None  # https: the CA that signed the exporter's certificate
    max_body_bytes: int = 8 * 1024 * 1024  # an 8-GPU node with MIG is ~0.3 MB; more is not an exporter


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


def check_dcgm(ctx: Context, path: KeyPath, dcgm: DcgmSection) -> None:
    if dcgm.password_file is not None and dcgm.username is None:
        ctx.error((*path, "username"), "required when password_file is set")
    if dcgm.ca_file is not None and not dcgm.url.startswith("https://"):
        ctx.error((*path, "ca_file"), "only used with an https:// url")
