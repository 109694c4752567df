"""Secrets (SNMP community, USM keys, MQTT password) live in files, never in the TOML itself.

``read_secret(path)`` also keeps the secret out of every log line; ``secret_file_problem`` rejects
an unusable secret file and warns about one the wrong people can read, or the agent cannot. The
mode rule follows the packaged service (``User=rackwatt``, ``Group=rackwatt``): ``root:rackwatt
0640`` (the agent reads its secrets but cannot change them) or ``rackwatt:rackwatt 0600``.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import stat
from pathlib import Path

from agent.live.logsetup import register_secret

# The user and group the package creates (packaging/debian/postinst) and the unit runs as.
SERVICE_USER = "rackwatt"
SERVICE_GROUP = "rackwatt"
# MQTT caps a password at 65535 bytes (a two-byte length); SNMP communities and USM keys are far
# shorter. A bigger "secret" is the wrong file (a key bundle, a log) and is not read whole.
MAX_SECRET_BYTES = 65535
FIX = "chown root:{group} {path} && chmod 0640 {path}"


class SecretError(ValueError):
    """A secret file that cannot be used; the message names the file and why."""


def read_secret(path: Path | str) -> str:
    """The secret in ``path`` without its trailing newline (files written by ``echo`` end in one)."""
    path = Path(path)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_SECRET_BYTES + 1)
    except FileNotFoundError:
        raise SecretError(f"secret file {path}: does not exist") from None
    except (OSError, ValueError) as exc:
        raise SecretError(f"secret file {path}: cannot read it: {exc}") from None
    if len(raw) > MAX_SECRET_BYTES:
        raise SecretError(f"secret file {path}: longer than {MAX_SECRET_BYTES} bytes; is it the right file?")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretError(f"secret file {path}: is not UTF-8 text") from None
    secret = text.rstrip("\r\n")
    if not secret:
        raise SecretError(f"secret file {path}: is empty")
    if "\0" in secret:
        raise SecretError(f"secret file {path}: contains a NUL byte")
    register_secret(secret)  # whoever reads a secret, no log line ever shows it
    return secret


def service_gids() -> set[int]:
    """Groups whose read access to a secret is intended: the service group, and the group of a
    non-root user running the check (under systemd, ``ExecStartPre`` runs as the service)."""
    gids: set[int] = set()
    with contextlib.suppress(KeyError):  # no such group: not installed from the package
        gids.add(grp.getgrnam(SERVICE_GROUP).gr_gid)
    if os.geteuid() != 0:
        gids.add(os.getegid())
    return gids


def service_reader() -> tuple[int, set[int]] | None:
    """The uid and groups of the service user when the check runs as root, to check on its behalf."""
    if os.geteuid() != 0:
        return None  # a non-root check reads as itself (os.access below)
    try:
        user = pwd.getpwnam(SERVICE_USER)
    except KeyError:
        return None
    return user.pw_uid, set(os.getgrouplist(SERVICE_USER, user.pw_gid))


def readable_by(info: os.stat_result, uid: int, gids: set[int]) -> bool:
    """Whether the mode bits let ``uid`` (in ``gids``) read the file (owner, then group, then other)."""
    if info.st_uid == uid:
        return bool(info.st_mode & stat.S_IRUSR)
    if info.st_gid in gids:
        return bool(info.st_mode & stat.S_IRGRP)
    return bool(info.st_mode & stat.S_IROTH)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def secret_file_problem(
    path: Path,
    allowed_gids: set[int] | None = None,
    reader: tuple[int, set[int]] | None = None,
) -> tuple[str, str] | None:
    """``("error"|"warning", message)`` for a secret file that is unusable or readable by the wrong people
    (``allowed_gids``: ``service_gids()``, ``reader``: ``service_reader()`` unless given)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return "error", f"secret file {path} does not exist"
    except (OSError, ValueError) as exc:
        return "warning", f"cannot check secret file {path}: {getattr(exc, 'strerror', None) or exc}"
    if not stat.S_ISREG(info.st_mode):
        return "error", f"secret file {path} is not a regular file"
    mode = stat.S_IMODE(info.st_mode)
    fix = FIX.format(group=SERVICE_GROUP, path=path)
    if mode & stat.S_IROTH:
        return "warning", f"secret file {path} is readable by every user (mode {mode:04o}); run: {fix}"
    gids = service_gids() if allowed_gids is None else allowed_gids
    if mode & stat.S_IRGRP and info.st_gid not in gids:
        return "warning", (
            f"secret file {path} is readable by group {_group_name(info.st_gid)} (mode {mode:04o}), "
            f"which is not the agent's group {SERVICE_GROUP}; run: {fix}"
        )
    who = service_reader() if reader is None else reader
    if who is not None and not readable_by(info, *who):
        return "warning", (
            f"secret file {path} is not readable by the agent's user {SERVICE_USER} "
            f"(owner {info.st_uid}:{info.st_gid}, mode {mode:04o}); run: {fix}"
        )
    if not os.access(path, os.R_OK):
        return "warning", f"secret file {path} is not readable by this user (uid {os.getuid()})"
    try:
        read_secret(path)
    except SecretError as exc:
        return "error", str(exc)
    return None
