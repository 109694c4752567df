"""Reading, once, what an agent before the sqlite store left in ``<state_dir>``: an upgrade loses nothing.

The old layout: ``spool/seg-<first seq>.log`` (records ``RWS1 | u32 length | u32 crc32 | JSON``)
with ``seg-<first seq>.ack`` sidecars (``u64 seq | u32 crc32`` of the delivered seqs), and the
engine state in ``engine.state``. ``read_legacy`` returns what was still pending, the next ``seq``
and the state bytes; ``remove_legacy`` deletes the old files once the store has committed them.
A torn or corrupt record is skipped and counted (as the old spool did), never raised.
"""

from __future__ import annotations

import contextlib
import json
import logging
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from agent.live.envelope import Envelope, message_kind

log = logging.getLogger("rackwatt.store")

LEGACY_SPOOL_DIR = "spool"
LEGACY_STATE_FILE = "engine.state"
_MAGIC = b"RWS1"
_HEADER = struct.Struct("<4sII")
_ACK = struct.Struct("<QI")
_MAX_RECORD_BYTES = 1 << 20  # the old spool's own limit: a longer body is corruption


@dataclass
class Legacy:
    pending: list[Envelope] = field(default_factory=list)
    next_seq: int = 1
    state: bytes | None = None
    skipped: int = 0  # torn or corrupt records
    found: bool = False


def _acked(path: Path) -> set[int]:
    try:
        data = path.read_bytes()
    except OSError:
        return set()
    done = set()
    for pos in range(0, len(data) - _ACK.size + 1, _ACK.size):
        seq, crc = _ACK.unpack_from(data, pos)
        if zlib.crc32(struct.pack("<Q", seq)) == crc:
            done.add(seq)
    return done


def _records(data: bytes) -> tuple[list[Envelope], int]:
    """Valid records of one segment and the number of bad byte runs skipped."""
    out: list[Envelope] = []
    pos, skipped, in_bad_run = 0, 0, False
    while pos + _HEADER.size <= len(data):
        magic, length, crc = _HEADER.unpack_from(data, pos)
        body = data[pos + _HEADER.size : pos + _HEADER.size + length]
        envelope = None
        if (
            magic == _MAGIC
            and length <= _MAX_RECORD_BYTES
            and len(body) == length
            and zlib.crc32(body) == crc
        ):
            with contextlib.suppress(ValueError, KeyError, TypeError):
                obj = json.loads(body)
                envelope = Envelope(int(obj["seq"]), message_kind(str(obj["kind"])), str(obj["topic"]),
                                    bool(obj["retain"]), int(obj["qos"]), float(obj["created"]),
                                    dict(obj["payload"]))
        if envelope is None:
            skipped += 0 if in_bad_run else 1
            in_bad_run = True
            nxt = data.find(_MAGIC, pos + 1)
            if nxt < 0:
                return out, skipped
            pos = nxt
            continue
        in_bad_run = False
        out.append(envelope)
        pos += _HEADER.size + length
    if pos < len(data) and not in_bad_run:
        skipped += 1  # a partial header at the very end (torn by a kill -9)
    return out, skipped


def read_legacy(state_dir: Path) -> Legacy:
    found = Legacy()
    state_path = state_dir / LEGACY_STATE_FILE
    with contextlib.suppress(FileNotFoundError):
        found.state = state_path.read_bytes()
        found.found = True
    seen: set[int] = set()
    for path in sorted((state_dir / LEGACY_SPOOL_DIR).glob("seg-*.log")):
        found.found = True
        with contextlib.suppress(ValueError):
            found.next_seq = max(found.next_seq, int(path.stem[4:]))
        try:
            records, skipped = _records(path.read_bytes())
        except OSError as exc:
            log.error("store: cannot read the old spool file %s (%s); its messages are lost", path, exc)
            found.skipped += 1
            continue
        found.skipped += skipped
        done = _acked(path.with_suffix(".ack"))
        for env in records:
            found.next_seq = max(found.next_seq, env.seq + 1)
            if env.seq not in done and env.seq not in seen:
                seen.add(env.seq)
                found.pending.append(env)
    found.pending.sort(key=lambda e: e.seq)
    return found


def remove_legacy(state_dir: Path) -> None:
    """Delete the old files (after the store committed their content); leftovers are only logged."""
    spool = state_dir / LEGACY_SPOOL_DIR
    paths = [state_dir / LEGACY_STATE_FILE, *state_dir.glob(".engine.state.tmp-*")]
    if spool.is_dir():
        paths += [p for p in spool.iterdir() if p.name.startswith("seg-")]
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("store: cannot remove the imported old file %s (%s)", path, exc)
    with contextlib.suppress(OSError):
        spool.rmdir()
