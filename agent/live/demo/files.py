"""What the demo writes and binds as an operator would: TOML strings, private secret files, ports."""

from __future__ import annotations

import os
import socket
from pathlib import Path


def quoted(value: object) -> str:
    """``value`` as a TOML basic string."""
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def write_secret_file(path: Path, secret: str) -> None:
    """A secret file as the loader wants one: mode 0600 whatever the umask, newline-terminated."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(secret + "\n")


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port free on 127.0.0.1 right now (TCP or UDP)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
