"""Small builders for the node-link tests: key files and the agent.toml of a node or a rack."""

from __future__ import annotations

import os
import secrets
from pathlib import Path


def key_file(folder: Path, name: str, key: str | None = None) -> Path:
    """A private key file (0600) holding ``key`` (a fresh 64-hex-digit key by default)."""
    path = folder / f"{name}.key"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write((key or secrets.token_hex(32)) + "\n")
    return path


def node_toml(folder: Path, node_id: str, key: Path, port: int, *, interval_s: float = 1.0,
              extra: str = "") -> Path:
    """The agent.toml of a node agent sending to 127.0.0.1:``port``."""
    state = folder / f"state-{node_id}"
    state.mkdir(exist_ok=True)
    path = folder / f"{node_id}.toml"
    path.write_text(
        f'[agent]\nsite = "lab"\nrack = "r1"\nrole = "node"\nstate_dir = "{state}"\n\n'
        f'[uplink]\nnode_id = "{node_id}"\ngateway = "127.0.0.1"\nport = {port}\n'
        f'key_file = "{key}"\ninterval_s = {interval_s}\n' + extra)
    return path
