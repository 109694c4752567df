"""Secrets (SNMP community, USM keys, MQTT password) live in files, never in the TOML itself.

Drivers and the MQTT publisher call ``read_secret(path)``; the loader calls ``secret_file_problem``
to warn about a secret other users can read and to reject one that does not exist.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path


class SecretError(ValueError):
    """A secret file that cannot be used; the message names the file and why."""


def read_secret(path: Path | str) -> str:
    """The secret in ``path`` without its trailing newline (files written by ``echo`` end in one)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SecretError(f"secret file {path}: does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SecretError(f"secret file {path}: cannot read it: {exc}") from None
    secret = text.rstrip("\r\n")
    if not secret:
        raise SecretError(f"secret file {path}: is empty")
    return secret


def secret_file_problem(path: Path) -> tuple[str, str] | None:
    """``("error"|"warning", message)`` for a secret file that is missing or readable by others."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return "error", f"secret file {path} does not exist"
    except OSError as exc:
        return "warning", f"cannot check secret file {path}: {exc.strerror or exc}"
    if not stat.S_ISREG(info.st_mode):
        return "error", f"secret file {path} is not a regular file"
    if info.st_mode & (stat.S_IRGRP | stat.S_IROTH):
        readers = "other users" if info.st_mode & stat.S_IROTH else "its group"
        return "warning", (
            f"secret file {path} is readable by {readers} (mode {stat.S_IMODE(info.st_mode):04o}); "
            f"run: chmod 600 {path}"
        )
    if not os.access(path, os.R_OK):
        return "warning", f"secret file {path} is not readable by this user (uid {os.getuid()})"
    return None
