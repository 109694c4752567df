"""``[[dcgm]]``: one GPU node whose NVIDIA dcgm-exporter the rack agent scrapes over HTTP.

The driver room owns its configuration shape; ``agent.config`` only assembles it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


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
