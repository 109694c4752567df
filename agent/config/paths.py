"""Rules for path values: what the kernel would refuse at first use, found when the file is checked.

Why: a NUL byte or an overlong name passes as a string and only fails later, in the middle of the
service (every state save failing). Existence and mode are the rules of the key that holds it.
"""

from __future__ import annotations

import os
from pathlib import Path

# Linux limits (<linux/limits.h>): PATH_MAX counts the terminating NUL, NAME_MAX is per component.
# A longer path or name fails with ENAMETOOLONG at its first use.
PATH_MAX_BYTES = 4096 - 1
NAME_MAX_BYTES = 255
# struct sockaddr_un.sun_path is 108 bytes on Linux, including the terminating NUL.
UNIX_SOCKET_PATH_MAX_BYTES = 108 - 1


def _encoded(value: str) -> bytes | None:
    try:
        return os.fsencode(value)
    except UnicodeError:
        return None


def path_text_problem(value: str) -> str | None:
    """Why the text of a path could never be opened (NUL byte, too long), or None."""
    if "\0" in value:
        return "must not contain a NUL byte (\\u0000)"
    raw = _encoded(value)
    if raw is None:
        return "cannot be encoded as a file name"
    if len(raw) > PATH_MAX_BYTES:
        return f"is {len(raw)} bytes long; a path is at most {PATH_MAX_BYTES} bytes (Linux PATH_MAX)"
    for part in raw.split(b"/"):
        if len(part) > NAME_MAX_BYTES:
            shown = part[:20].decode(errors="replace")
            return (f"has a {len(part)}-byte name ({shown}...); a file name is at most {NAME_MAX_BYTES} "
                    "bytes (Linux NAME_MAX)")
    return None


def unix_socket_problem(value: Path) -> str | None:
    """A Unix socket's path must fit ``sun_path``; binding a longer one fails with a confusing error."""
    raw = _encoded(str(value)) or b""
    if len(raw) > UNIX_SOCKET_PATH_MAX_BYTES:
        return (f"is {len(raw)} bytes long; a Unix socket path is at most {UNIX_SOCKET_PATH_MAX_BYTES} bytes "
                "(sockaddr_un): use a shorter folder such as /run/rackwatt")
    return None


def directory_problem(value: Path) -> str | None:
    """A directory the agent creates if missing: only an existing non-directory is a problem."""
    try:
        if value.exists() and not value.is_dir():
            return f"{value} exists and is not a directory"
    except OSError as exc:
        return f"cannot check {value}: {exc.strerror or exc}"
    return None
