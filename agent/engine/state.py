"""The state file: a compact, versioned, checksummed bag of named numpy arrays, written atomically.

Format (little endian): ``RWST`` · u16 format version · u16 0 · u32 array count · per array
(u16 name length · name · u8 dtype length · dtype · u8 ndim · u64 × ndim shape · raw bytes) ·
u32 CRC-32 of everything before it. Fixed shapes in → fixed file size out, whatever the uptime.
A bad file is moved aside as ``<name>.bad-<unix ts>`` (``quarantine_name``) and is a fresh start.
"""

from __future__ import annotations

import contextlib
import os
import re
import struct
import time
import zlib
from pathlib import Path

import numpy as np

MAGIC = b"RWST"
FORMAT_VERSION = 1


class StateError(ValueError):
    """The bytes are not a state this build can read (corrupt, truncated, or another version)."""


def pack(arrays: dict[str, np.ndarray]) -> bytes:
    parts = [MAGIC, struct.pack("<HHI", FORMAT_VERSION, 0, len(arrays))]
    for name, arr in arrays.items():
        a = np.ascontiguousarray(arr)
        nb = name.encode()
        dt = a.dtype.str.encode()
        parts.append(struct.pack("<H", len(nb)) + nb + struct.pack("<B", len(dt)) + dt)
        parts.append(struct.pack("<B", a.ndim) + struct.pack(f"<{a.ndim}Q", *a.shape))
        parts.append(a.tobytes())
    body = b"".join(parts)
    return body + struct.pack("<I", zlib.crc32(body))


_PLAIN_DTYPE = re.compile(r"[<>|=][fiubU][0-9]{1,3}")


def unpack(blob: bytes) -> dict[str, np.ndarray]:
    if len(blob) < 16 or blob[:4] != MAGIC:
        raise StateError("not a rackwatt state file (bad magic)")
    body, (crc,) = blob[:-4], struct.unpack("<I", blob[-4:])
    if zlib.crc32(body) != crc:
        raise StateError("state file is corrupt (checksum mismatch)")
    version, _, count = struct.unpack_from("<HHI", body, 4)
    if version != FORMAT_VERSION:
        raise StateError(f"state file format version {version}, this build reads {FORMAT_VERSION}")
    pos = 12
    out: dict[str, np.ndarray] = {}
    try:
        for _ in range(count):
            (ln,) = struct.unpack_from("<H", body, pos)
            name = body[pos + 2 : pos + 2 + ln].decode()
            pos += 2 + ln
            (ld,) = struct.unpack_from("<B", body, pos)
            dtype_text = body[pos + 1 : pos + 1 + ld].decode()
            # only the plain array types pack() writes: numpy would parse anything else as a
            # dtype spec (a damaged one raised SyntaxError from numpy's own parser)
            if not _PLAIN_DTYPE.fullmatch(dtype_text):
                raise ValueError(f"array {name!r} has dtype {dtype_text[:20]!r}")
            dtype = np.dtype(dtype_text)
            pos += 1 + ld
            (ndim,) = struct.unpack_from("<B", body, pos)
            shape = struct.unpack_from(f"<{ndim}Q", body, pos + 1)
            pos += 1 + 8 * ndim
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            out[name] = np.frombuffer(body[pos : pos + nbytes], dtype=dtype).reshape(shape).copy()
            pos += nbytes
    except (struct.error, ValueError, TypeError, UnicodeDecodeError) as exc:
        raise StateError(f"state file is corrupt ({exc})") from exc
    return out


def write_atomic(path: Path, blob: bytes) -> None:
    """Replace ``path`` with ``blob`` so that a crash or power cut leaves the old or the new file
    (temp file, fsync, rename, fsync of the directory). The temp file has one fixed name per target,
    so one left by a crash is overwritten by the next write instead of piling up."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        f.write(blob)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    try:
        dfd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    with contextlib.suppress(OSError):
        os.fsync(dfd)
    os.close(dfd)


def quarantine_name(name: str, ts: float | None = None) -> str:
    """The one spelling of "kept aside, unreadable": ``<name>.bad-<unix s>`` (files and stored rows)."""
    return f"{name}.bad-{int(time.time() if ts is None else ts)}"


def quarantine(path: Path) -> Path:
    """Move a bad state file aside (``quarantine_name``); returns where it went."""
    target = path.with_name(quarantine_name(path.name))
    os.replace(path, target)
    return target


def read_or_quarantine(path: Path) -> tuple[bytes | None, str | None]:
    """(state bytes, None) · (None, None) when there is no file · (None, message) when it was bad."""
    path = Path(path)
    try:
        blob = path.read_bytes()
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"state file {path}: cannot read ({exc.strerror}); starting fresh"
    try:
        unpack(blob)
    except StateError as exc:
        moved = quarantine(path)
        return None, f"state file {path}: {exc}; kept aside as {moved.name}, starting fresh"
    return blob, None
