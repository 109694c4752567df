"""What the demo writes and binds as an operator would: TOML tables, private secret files, ports."""

from __future__ import annotations

import os
import socket
from collections.abc import Sequence
from pathlib import Path


def quoted(value: object) -> str:
    """``value`` as a TOML basic string."""
    text = str(value).replace("\\", "\\\\").replace('"', '\\"')
    return f'"{text}"'


def toml_value(value: object) -> str:
    """A bool, number, text, path or sequence of them as TOML (the demo writes no other kinds)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, Sequence) and not isinstance(value, str):
        return "[" + ", ".join(toml_value(item) for item in value) + "]"
    return quoted(value)


def toml_table(header: str, **keys: object) -> list[str]:
    """A blank line, ``header`` (``[name]`` or ``[[name]]``) and a ``key = value`` line per key;
    a key given None is left out, so the loader's default applies."""
    return ["", header, *(f"{key} = {toml_value(value)}" for key, value in keys.items() if value is not None)]


def write_secret_file(path: Path, secret: str) -> None:
    """A secret file as the loader wants one: mode 0600 whatever the umask, newline-terminated."""
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(secret + "\n")


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port free on 127.0.0.1 right now (TCP or UDP)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
