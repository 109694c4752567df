"""One datagram to the local agent's stage-hint endpoint, for ``rackwatt stage`` and ``accept``.

Each function returns "" on success, or why the datagram was not delivered; neither raises. (The
training-job client keeps its own stdlib-only copy: it must stay one file a script can vendor.)
"""

from __future__ import annotations

import contextlib
import socket


def send_unix(data: bytes, path: str) -> str:
    """Send to a Unix datagram socket: "" or why not (nobody listening, no such file)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
            sock.setblocking(False)
            sock.sendto(data, path)
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""


def send_udp(data: bytes, port: int) -> str:
    """Send to UDP 127.0.0.1:port. A closed port answers with ICMP; a short wait surfaces it as
    ECONNREFUSED, so "nobody listening" is reported rather than silently lost."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect(("127.0.0.1", port))
            sock.send(data)
            sock.settimeout(0.05)
            with contextlib.suppress(TimeoutError):
                sock.recv(1)
    except OSError as exc:
        return exc.strerror or str(exc)
    return ""
