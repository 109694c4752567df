"""Asyncio datagram endpoints for stage hints: a Unix socket path and UDP on 127.0.0.1.

Each datagram goes to ``HintIntake.receive`` (rate limit, parse, count, apply). asyncio reads one
datagram per readiness callback, and the intake does bounded work per datagram (a bucket lookup,
at most 1 KiB of JSON), so a flood interleaves with the agent's other tasks instead of stalling
them. The Unix socket is created with mode 0660 (group-writable: put training users in the
agent's group); a stale socket file left by a crash is replaced. UDP binds loopback only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.config.model import StagesSection
from agent.stages.hints import MAX_DATAGRAM_BYTES, Command
from agent.stages.intake import HintIntake
from agent.stages.timeline import StageTimeline

log = logging.getLogger(__name__)

SOCKET_MODE = 0o660


class _HintProtocol(asyncio.DatagramProtocol):
    def __init__(self, intake: HintIntake, source: str):
        self.intake = intake
        self.source = source

    def datagram_received(self, data: bytes, addr: Any) -> None:
        sender = _sender_key(addr)
        try:
            self.intake.receive(data, self.source, sender)
        except Exception:  # the intake never raises; belt and braces for the event loop
            log.exception("stage hint listener: unexpected error")

    def error_received(self, exc: Exception) -> None:
        log.debug("stage hint listener (%s): %s", self.source, exc)


def _sender_key(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    if isinstance(addr, bytes):
        return addr.hex()[:64]
    if isinstance(addr, str):
        return addr.replace("\0", "@")[:108]
    return ""


class HintListener:
    """Owns the datagram endpoints; ``start()`` binds them, ``stop()`` closes them."""

    def __init__(self, intake: HintIntake, socket_path: Path | None, udp_port: int | None):
        self.intake = intake
        self.socket_path = socket_path
        self.udp_port = udp_port
        self._transports: list[asyncio.BaseTransport] = []
        self.udp_address: tuple[str, int] | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.socket_path is not None:
            sock = bind_unix_datagram(self.socket_path)
            transport, _ = await loop.create_datagram_endpoint(
                lambda: _HintProtocol(self.intake, "unix"), sock=sock
            )
            self._transports.append(transport)
        if self.udp_port is not None:
            transport, _ = await loop.create_datagram_endpoint(
                lambda: _HintProtocol(self.intake, "udp"), local_addr=("127.0.0.1", self.udp_port)
            )
            self.udp_address = transport.get_extra_info("sockname")
            self._transports.append(transport)

    async def stop(self) -> None:
        for transport in self._transports:
            transport.close()
        self._transports.clear()
        await asyncio.sleep(0)
        if self.socket_path is not None:
            with contextlib.suppress(FileNotFoundError):
                if stat.S_ISSOCK(os.lstat(self.socket_path).st_mode):
                    os.unlink(self.socket_path)

    async def __aenter__(self) -> HintListener:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def bind_unix_datagram(path: Path) -> socket.socket:
    """A bound AF_UNIX datagram socket at path (mode 0660); a stale socket file is replaced.

    Refuses to replace anything that is not a socket, or a socket some process still serves.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(mode):
            raise OSError(f"stages.socket_path {path}: exists and is not a socket; not replacing it")
        if _socket_alive(path):
            raise OSError(f"stages.socket_path {path}: another process is listening there")
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * MAX_DATAGRAM_BYTES)
        old_umask = os.umask(0o117)
        try:
            sock.bind(str(path))
        finally:
            os.umask(old_umask)
        os.chmod(path, SOCKET_MODE)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


def _socket_alive(path: Path) -> bool:
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        probe.connect(str(path))
    except OSError:
        return False
    else:
        return True
    finally:
        probe.close()


def build_stage_input(
    stages: StagesSection, on_command: Callable[[Command], None] | None = None
) -> tuple[StageTimeline, HintIntake, HintListener]:
    """The timeline, intake and listener the live agent needs, from the ``[stages]`` config.

    The live loop starts the listener, feeds MQTT hint payloads to ``intake.receive(payload,
    "mqtt", client_id)``, asks ``timeline.current(ts)`` each tick and shows ``intake.counters``.
    """
    timeline = StageTimeline(ttl_s=stages.hint_ttl_s)
    intake = HintIntake(timeline, rate_limit_per_s=stages.rate_limit_per_s, on_command=on_command)
    listener = HintListener(intake, stages.socket_path, stages.udp_port)
    return timeline, intake, listener
