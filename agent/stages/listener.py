"""The stage-hint sockets: a Unix datagram socket path and UDP on 127.0.0.1.

Each datagram goes to ``HintIntake.receive`` with who sent it: on the Unix socket the kernel's
pid/uid/gid (``peers``), on UDP only the address (hints only). The UDP socket reports the kernel's
receive-queue drops (``SO_RXQ_OVFL``, ``kernel_drops_udp`` in ``status.hints``). Reads are bounded
per readiness callback, so a flood interleaves with the agent's other tasks instead of stalling
them. The Unix socket is mode 0660 (put training users in the agent's group); a stale socket file
left by a crash is replaced.
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
from agent.stages.hints import MAX_DATAGRAM_BYTES
from agent.stages.intake import HintIntake
from agent.stages.peers import SO_RXQ_OVFL, CommandPolicy, ancillary_space, parse_ancillary

log = logging.getLogger(__name__)

SOCKET_MODE = 0o660


class _DatagramReader:
    """Reads one bound datagram socket with ``recvmsg`` (asyncio's datagram endpoints drop the
    ancillary data that carries the sender's credentials and the kernel's drop counter)."""

    # bounded work per readiness callback, so a flood interleaves with the agent's other tasks
    MAX_READS_PER_WAKE = 32

    def __init__(self, sock: socket.socket, intake: HintIntake, source: str):
        self.sock = sock
        self.intake = intake
        self.source = source
        self._anc_size = ancillary_space()

    def on_readable(self) -> None:
        for _ in range(self.MAX_READS_PER_WAKE):
            try:
                data, ancdata, _flags, addr = self.sock.recvmsg(MAX_DATAGRAM_BYTES + 1, self._anc_size)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. ECONNREFUSED surfaced by an ICMP error: nothing to read
                log.debug("stage hint listener (%s): %s", self.source, exc)
                return
            try:
                peer, drops = parse_ancillary(ancdata)
                if drops is not None:
                    self.intake.note_kernel_drops(self.source, drops)
                sender = peer.key if peer is not None else _sender_key(addr)
                self.intake.receive(data, self.source, sender, peer=peer, reply=self._reply_to(addr))
            except Exception:  # the intake never raises; belt and braces for the event loop
                log.exception("stage hint listener: unexpected error")

    def _reply_to(self, addr: Any) -> Callable[[bytes], None] | None:
        """Sends a reply to a bound Unix sender (energy queries); None where there is no address."""
        if self.source != "unix" or not addr:
            return None

        def send(data: bytes) -> None:
            try:
                self.sock.sendto(data, addr)
            except OSError as exc:  # the asker is gone, or its queue is full: it times out on its side
                log.debug("stage hint listener: reply to %r not sent: %s", addr, exc)

        return send


def _sender_key(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    if isinstance(addr, bytes):
        return addr.hex()[:64]
    if isinstance(addr, str):
        return addr.replace("\0", "@")[:108] or "unbound"
    return "unbound"


class HintListener:
    """Owns the datagram sockets; ``start()`` binds them, ``stop()`` closes them."""

    def __init__(self, intake: HintIntake, socket_path: Path | None, udp_port: int | None):
        self.intake = intake
        self.socket_path = socket_path
        self.udp_port = udp_port
        self._socks: list[socket.socket] = []
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        if self.socket_path is not None:
            self._serve(bind_unix_datagram(self.socket_path), "unix")
        if self.udp_port is not None:
            self._serve(bind_udp_loopback(self.udp_port), "udp")

    def _serve(self, sock: socket.socket, source: str) -> None:
        assert self._loop is not None
        reader = _DatagramReader(sock, self.intake, source)
        self._loop.add_reader(sock.fileno(), reader.on_readable)
        self._socks.append(sock)

    async def stop(self) -> None:
        for sock in self._socks:
            if self._loop is not None and not self._loop.is_closed():
                with contextlib.suppress(ValueError, OSError):
                    self._loop.remove_reader(sock.fileno())
            sock.close()
        self._socks.clear()
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


def bind_udp_loopback(port: int) -> socket.socket:
    """A UDP socket on 127.0.0.1:port that reports the kernel's receive-queue drops."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        with contextlib.suppress(OSError):  # not Linux: drops stay uncounted, hints still work
            sock.setsockopt(socket.SOL_SOCKET, SO_RXQ_OVFL, 1)
        sock.bind(("127.0.0.1", port))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


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
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)  # sender's pid/uid/gid per datagram
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
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
        return True


def command_policy(stages: StagesSection) -> CommandPolicy:
    """The configured command policy; an unknown group name leaves only the uids (fails closed)."""
    try:
        return CommandPolicy.from_config(stages.command_uids, stages.command_groups)
    except ValueError as exc:
        policy = CommandPolicy.from_config(stages.command_uids, [])
        log.error("%s; commands are taken only from %s", exc, policy.describe())
        return policy
