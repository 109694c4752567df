"""systemd notification (``sd_notify``) in a few lines of stdlib: READY, STATUS, WATCHDOG, STOPPING.

Without ``NOTIFY_SOCKET`` (not under systemd) every call is a no-op that returns False, so the
agent behaves the same everywhere. A socket that fails is logged once, never raised.
"""

from __future__ import annotations

import logging
import os
import socket

log = logging.getLogger("rackwatt.sdnotify")
_warned = False


def notify(state: str) -> bool:
    """Send ``state`` (e.g. ``"READY=1"``, ``"STATUS=polling 3 devices"``) to systemd."""
    global _warned
    addr = os.environ.get("NOTIFY_SOCKET")
    if not addr:
        return False
    if addr[0] == "@":  # abstract namespace socket
        addr = "\0" + addr[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(addr)
            sock.sendall(state.encode("utf-8", "replace"))
    except OSError as exc:
        if not _warned:
            log.warning("sd_notify: cannot write to NOTIFY_SOCKET %s: %s", addr.lstrip("\0"), exc)
            _warned = True
        return False
    return True


def ready(status: str | None = None) -> bool:
    return notify("READY=1" + (f"\nSTATUS={status}" if status else ""))


def status(text: str) -> bool:
    return notify(f"STATUS={text}")


def stopping() -> bool:
    return notify("STOPPING=1")


def reloading() -> bool:
    return notify("RELOADING=1")


def watchdog() -> bool:
    return notify("WATCHDOG=1")


def watchdog_interval_s() -> float | None:
    """Half the ``WatchdogSec=`` systemd asked for (ping twice per period), or None when off."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid != str(os.getpid())):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 2e6 if value > 0 else None
