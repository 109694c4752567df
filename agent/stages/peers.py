"""Who sent a hint datagram, and whether that sender may give the agent commands.

With ``SO_PASSCRED`` a Unix datagram socket gets the sender's kernel-verified pid/uid/gid with every
datagram (``SCM_CREDENTIALS``; ``SO_PEERCRED`` only works on connected sockets). UDP on loopback
carries no identity, which is why commands are refused there. ``CommandPolicy``: a permitted uid,
or membership in a permitted group; by default root, the agent's own user and its own group.
"""

from __future__ import annotations

import grp
import os
import pwd
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass

_UCRED = struct.Struct("iII")  # struct ucred {pid_t pid; uid_t uid; gid_t gid;} (Linux)
_U32 = struct.Struct("I")
# Linux's SO_RXQ_OVFL (asm-generic/socket.h); Python's socket module does not export it.
SO_RXQ_OVFL = getattr(socket, "SO_RXQ_OVFL", 40)


@dataclass(frozen=True)
class PeerCred:
    """The kernel's word on who sent a datagram."""

    pid: int
    uid: int
    gid: int

    @property
    def key(self) -> str:
        """Rate-bucket key: one bucket per process, so a flooder cannot starve the job's hints."""
        return f"uid={self.uid},pid={self.pid}"


def ancillary_space() -> int:
    """Buffer size for ``recvmsg`` that fits credentials and the drop counter."""
    return socket.CMSG_SPACE(_UCRED.size) + socket.CMSG_SPACE(_U32.size)


def parse_ancillary(ancdata: Iterable[tuple[int, int, bytes]]) -> tuple[PeerCred | None, int | None]:
    """``(credentials, kernel drop count)`` from recvmsg's ancillary data; None for what is absent."""
    cred: PeerCred | None = None
    drops: int | None = None
    for level, kind, data in ancdata:
        if level != socket.SOL_SOCKET:
            continue
        if kind == socket.SCM_CREDENTIALS and len(data) >= _UCRED.size:
            pid, uid, gid = _UCRED.unpack_from(data)
            cred = PeerCred(pid=pid, uid=uid, gid=gid)
        elif kind == SO_RXQ_OVFL and len(data) >= _U32.size:
            (drops,) = _U32.unpack_from(data)
    return cred, drops


class CommandPolicy:
    """Which local senders may send commands: permitted uids, or members of permitted groups."""

    def __init__(self, uids: Iterable[int], gids: Iterable[int]):
        self.uids = frozenset(uids)
        self.gids = frozenset(gids)

    @classmethod
    def from_config(cls, uids: Iterable[int] | None, groups: Iterable[str] | None) -> CommandPolicy:
        """``None`` → the defaults; a group is a name or a number (unknown name: ValueError)."""
        uid_set = {0, os.geteuid()} if uids is None else set(uids)
        gid_set: set[int] = set()
        for group in (str(os.getegid()),) if groups is None else groups:
            gid_set.add(_group_id(group))
        return cls(uid_set, gid_set)

    def permits(self, peer: PeerCred | None) -> bool:
        if peer is None:
            return False
        if peer.uid in self.uids or peer.gid in self.gids:
            return True
        if not self.gids:
            return False
        try:
            name = pwd.getpwuid(peer.uid).pw_name
            groups = os.getgrouplist(name, peer.gid)
        except (KeyError, OSError):  # a uid with no passwd entry has no supplementary groups
            return False
        return not self.gids.isdisjoint(groups)

    def describe(self) -> str:
        return f"uids {sorted(self.uids)}, gids {sorted(self.gids)}"


def _group_id(group: str) -> int:
    text = str(group).strip()
    if text.isdigit():
        return int(text)
    try:
        return grp.getgrnam(text).gr_gid
    except KeyError:
        raise ValueError(f"stages.command_groups: no such group {text!r}") from None
