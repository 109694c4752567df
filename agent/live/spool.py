"""Store and forward: every outbound MQTT message lives on disk until the broker acknowledges it.

Why: paho-mqtt queues unsent messages in memory only, so a broker outage plus an agent restart
would lose them. Here each message is appended to a segment file before it is handed to the
client, and marked done (acknowledged, or dropped when the spool is full) in a small sidecar file.

Layout in ``directory``:
- ``seg-<first seq>.log``: append-only records ``MAGIC | u32 length | u32 crc32(body) | body``,
  body = compact JSON ``{"seq","kind","topic","retain","qos","created","payload"}``; fsync'd.
- ``seg-<first seq>.ack``: fixed 12-byte records ``u64 seq | u32 crc32`` of the seqs that are done.
A segment is deleted when all its records are done (the newest one is kept: its name carries
the next ``seq``, which therefore survives a restart even when everything was delivered).

A torn or corrupt record (``kill -9`` mid-write, a bad disk block) is skipped with one log line
per file; the loader resynchronises on the next valid record and never raises.

Bound: the live records never exceed ``max_bytes``. When full, the oldest ``summary`` and
``baseline`` records are dropped first; ``event`` records only when nothing else is left.
Drops are counted (``stats()``), for the status payload.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import struct
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger("rackwatt.spool")

MAGIC = b"RWS1"
HEADER = struct.Struct("<4sII")  # magic, body length, crc32(body)
ACK = struct.Struct("<QI")  # seq, crc32(seq bytes)
MAX_RECORD_BYTES = 1 << 20  # a body larger than this is corruption, not data
DROPPABLE_KINDS = ("summary", "baseline")  # superseded by the next one; events are kept


@dataclass(frozen=True)
class SpoolRecord:
    seq: int
    kind: str  # summary | event | baseline
    topic: str
    retain: bool
    qos: int
    created: float  # Unix seconds when it was spooled
    payload: dict[str, Any]


@dataclass
class _Entry:
    segment: int  # first seq of its segment
    offset: int
    length: int  # whole record, header included
    kind: str


@dataclass
class _Segment:
    first_seq: int
    path: Path
    size: int = 0
    live: set[int] = field(default_factory=set)

    @property
    def ack_path(self) -> Path:
        return self.path.with_suffix(".ack")


def _ack_bytes(seq: int) -> bytes:
    seq_bytes = struct.pack("<Q", seq)
    return ACK.pack(seq, zlib.crc32(seq_bytes))


def _private(path: str, flags: int) -> int:
    """``open(..., opener=_private)``: a new spool file is 0600 whatever the umask (it holds the
    rack's data, which the broker's ACL keeps from other users too)."""
    return os.open(path, flags, 0o600)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class Spool:
    """Bounded on-disk FIFO of outbound messages with per-record checksums."""

    def __init__(
        self,
        directory: Path,
        max_bytes: int,
        segment_bytes: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = Path(directory)
        self.max_bytes = int(max_bytes)
        self.segment_bytes = segment_bytes or max(64 * 1024, min(4 * 1024 * 1024, self.max_bytes // 16))
        self._clock = clock
        self._segments: dict[int, _Segment] = {}
        self._pending: dict[int, _Entry] = {}  # seq → where; insertion order is seq order
        self._live_bytes = 0
        self._next_seq = 1
        self.dropped: dict[str, int] = {"summary": 0, "baseline": 0, "event": 0}
        self.corrupt_skipped = 0  # records (or byte runs) set aside when loading
        self._load()

    # ---- loading ---------------------------------------------------------------------------
    def _load(self) -> None:
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        paths = []
        for path in self.directory.glob("seg-*.log"):
            try:
                paths.append((int(path.stem[4:]), path))
            except ValueError:
                log.warning("spool: ignoring unexpected file %s", path)
        paths.sort()
        for index, (first_seq, path) in enumerate(paths):
            is_last = index == len(paths) - 1
            self._load_segment(first_seq, path, is_last)
            self._next_seq = max(self._next_seq, first_seq)
        for seg in list(self._segments.values()):
            if not seg.live and seg.first_seq != self._active_first():
                self._delete_segment(seg)
        if self._pending:
            log.info("spool: %d message(s) waiting from a previous run", len(self._pending))

    def _load_segment(self, first_seq: int, path: Path, is_last: bool) -> None:
        try:
            data = path.read_bytes()
        except OSError as exc:
            log.error("spool: cannot read %s (%s); setting it aside", path, exc)
            self._set_aside(path)
            return
        seg = _Segment(first_seq, path, size=len(data))
        done = self._read_acks(seg.ack_path)
        records, good_end, skipped = self._scan(data)
        if skipped:
            self.corrupt_skipped += skipped
            log.warning(
                "spool: %s: skipped %d torn or corrupt byte run(s); %d good record(s) kept",
                path.name,
                skipped,
                len(records),
            )
        if is_last and good_end < len(data):
            # Torn tail (kill -9 during an append): cut it so new appends start on a clean boundary.
            with open(path, "r+b") as f:
                f.truncate(good_end)
                f.flush()
                os.fsync(f.fileno())
            seg.size = good_end
        self._segments[first_seq] = seg
        for seq, kind, offset, length in records:
            self._next_seq = max(self._next_seq, seq + 1)
            if seq in done or seq in self._pending:
                continue
            seg.live.add(seq)
            self._pending[seq] = _Entry(first_seq, offset, length, kind)
            self._live_bytes += length

    @staticmethod
    def _scan(data: bytes) -> tuple[list[tuple[int, str, int, int]], int, int]:
        """Valid records (seq, kind, offset, length), the end of the last valid one, bad runs skipped."""
        records: list[tuple[int, str, int, int]] = []
        pos, good_end, skipped, in_bad_run = 0, 0, 0, False
        while pos + HEADER.size <= len(data):
            magic, length, crc = HEADER.unpack_from(data, pos)
            body_start = pos + HEADER.size
            body = data[body_start : body_start + length]
            parsed = None
            if (
                magic == MAGIC
                and length <= MAX_RECORD_BYTES
                and len(body) == length
                and zlib.crc32(body) == crc
            ):
                try:
                    obj = json.loads(body)
                    parsed = (int(obj["seq"]), str(obj["kind"]))
                except (ValueError, KeyError, TypeError):
                    parsed = None
            if parsed is None:
                if not in_bad_run:
                    skipped += 1
                    in_bad_run = True
                next_magic = data.find(MAGIC, pos + 1)
                if next_magic < 0:
                    break
                pos = next_magic
                continue
            in_bad_run = False
            records.append((parsed[0], parsed[1], pos, HEADER.size + length))
            pos = body_start + length
            good_end = pos
        if good_end < len(data) and not in_bad_run and pos < len(data):
            skipped += 1  # a partial header at the very end
        return records, good_end, skipped

    def _read_acks(self, path: Path) -> set[int]:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return set()
        except OSError as exc:
            log.warning("spool: cannot read %s (%s); its messages may be sent again", path, exc)
            return set()
        done: set[int] = set()
        bad = 0
        for pos in range(0, len(data) - ACK.size + 1, ACK.size):
            seq, crc = ACK.unpack_from(data, pos)
            if zlib.crc32(struct.pack("<Q", seq)) == crc:
                done.add(seq)
            else:
                bad += 1
        if bad or len(data) % ACK.size:
            log.warning("spool: %s: skipped a torn or corrupt acknowledgement record", path.name)
        return done

    def _set_aside(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            path.rename(path.with_name(path.name + ".bad"))

    # ---- writing ---------------------------------------------------------------------------
    def _active_first(self) -> int | None:
        return max(self._segments) if self._segments else None

    def append(
        self, kind: str, topic: str, payload: dict[str, Any], retain: bool = False, qos: int = 1
    ) -> SpoolRecord:
        """Give ``payload`` the next ``seq`` and store it durably (fsync) before returning."""
        seq = self._next_seq
        self._next_seq += 1
        payload = {**payload, "seq": seq}
        record = SpoolRecord(seq, kind, topic, retain, qos, self._clock(), payload)
        body = json.dumps(
            {
                "seq": seq,
                "kind": kind,
                "topic": topic,
                "retain": retain,
                "qos": qos,
                "created": record.created,
                "payload": payload,
            },
            separators=(",", ":"),
            allow_nan=False,
        ).encode()
        blob = HEADER.pack(MAGIC, len(body), zlib.crc32(body)) + body
        self._make_room(len(blob))
        seg = self._segment_for_append(seq, len(blob))
        with open(seg.path, "ab", opener=_private) as f:
            offset = f.tell()
            f.write(blob)
            f.flush()
            os.fsync(f.fileno())
        seg.size = offset + len(blob)
        seg.live.add(seq)
        self._pending[seq] = _Entry(seg.first_seq, offset, len(blob), kind)
        self._live_bytes += len(blob)
        return record

    def _segment_for_append(self, seq: int, size: int) -> _Segment:
        active = self._active_first()
        if active is not None:
            seg = self._segments[active]
            if seg.size == 0 or seg.size + size <= self.segment_bytes:
                return seg
        seg = _Segment(seq, self.directory / f"seg-{seq:012d}.log")
        seg.path.touch(mode=0o600)
        _fsync_dir(self.directory)
        self._segments[seq] = seg
        if active is not None and not self._segments[active].live:
            self._delete_segment(self._segments[active])
        return seg

    def _make_room(self, size: int) -> None:
        while self._pending and self._live_bytes + size > self.max_bytes:
            victim = next((s for s, e in self._pending.items() if e.kind in DROPPABLE_KINDS), None)
            if victim is None:
                victim = next(iter(self._pending))
            kind = self._pending[victim].kind
            self.dropped[kind] = self.dropped.get(kind, 0) + 1
            if sum(self.dropped.values()) in (1, 10, 100, 1000) or sum(self.dropped.values()) % 10000 == 0:
                log.warning(
                    "spool: full (%d bytes); dropped the oldest %s (seq %d); drops so far: %s",
                    self.max_bytes,
                    kind,
                    victim,
                    self.dropped,
                )
            self._mark_done(victim)
        self._compact_if_sparse()

    def ack(self, seq: int) -> None:
        """The broker has the message: it is done. Unknown seqs (already done) are ignored."""
        if seq in self._pending:
            self._mark_done(seq)

    def _mark_done(self, seq: int) -> None:
        entry = self._pending.pop(seq)
        self._live_bytes -= entry.length
        seg = self._segments[entry.segment]
        seg.live.discard(seq)
        if not seg.live and seg.first_seq != self._active_first():
            self._delete_segment(seg)
            return
        with open(seg.ack_path, "ab", opener=_private) as f:
            f.write(_ack_bytes(seq))
            f.flush()
            os.fsync(f.fileno())

    def _delete_segment(self, seg: _Segment) -> None:
        for path in (seg.path, seg.ack_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        self._segments.pop(seg.first_seq, None)

    def _compact_if_sparse(self) -> None:
        """Keep the disk near the bound: rewrite old segments that are mostly done records."""
        disk = sum(s.size for s in self._segments.values())
        if disk <= self.max_bytes + self.segment_bytes:
            return
        active = self._active_first()
        for seg in sorted(self._segments.values(), key=lambda s: s.first_seq):
            if seg.first_seq == active:
                continue
            live_bytes = sum(self._pending[s].length for s in seg.live)
            if live_bytes * 2 <= seg.size:
                self._rewrite(seg)

    def _rewrite(self, seg: _Segment) -> None:
        data = seg.path.read_bytes()
        tmp = seg.path.with_name(seg.path.name + ".tmp")
        new_offsets: dict[int, int] = {}
        with open(tmp, "wb", opener=_private) as f:
            for seq in sorted(seg.live):
                entry = self._pending[seq]
                new_offsets[seq] = f.tell()
                f.write(data[entry.offset : entry.offset + entry.length])
            f.flush()
            os.fsync(f.fileno())
            size = f.tell()
        os.replace(tmp, seg.path)
        _fsync_dir(self.directory)
        with contextlib.suppress(FileNotFoundError):
            seg.ack_path.unlink()
        for seq, offset in new_offsets.items():
            self._pending[seq].offset = offset
        seg.size = size

    # ---- reading ---------------------------------------------------------------------------
    def pending_seqs(self) -> Iterator[int]:
        """Seqs not yet done, oldest first (a live view: do not modify the spool while iterating)."""
        return iter(self._pending)

    def first_pending_after(self, seq: int, skip: set[int] | None = None) -> int | None:
        for candidate in self._pending:
            if candidate > seq and (skip is None or candidate not in skip):
                return candidate
        return None

    def read(self, seq: int) -> SpoolRecord | None:
        """The stored record, or None if it is done or unreadable (then it is dropped and logged)."""
        entry = self._pending.get(seq)
        if entry is None:
            return None
        seg = self._segments[entry.segment]
        try:
            with open(seg.path, "rb") as f:
                f.seek(entry.offset)
                blob = f.read(entry.length)
            magic, _length, crc = HEADER.unpack_from(blob, 0)
            body = blob[HEADER.size :]
            if magic != MAGIC or zlib.crc32(body) != crc:
                raise ValueError("checksum mismatch")
            obj = json.loads(body)
            return SpoolRecord(
                int(obj["seq"]),
                str(obj["kind"]),
                str(obj["topic"]),
                bool(obj["retain"]),
                int(obj["qos"]),
                float(obj["created"]),
                dict(obj["payload"]),
            )
        except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
            log.error("spool: record seq %d in %s is unreadable (%s); dropping it", seq, seg.path.name, exc)
            self.corrupt_skipped += 1
            self._mark_done(seq)
            return None

    # ---- reporting -------------------------------------------------------------------------
    @property
    def next_seq(self) -> int:
        return self._next_seq

    @property
    def last_seq(self) -> int:
        return self._next_seq - 1

    def __len__(self) -> int:
        return len(self._pending)

    def stats(self) -> dict[str, int]:
        return {
            "pending": len(self._pending),
            "bytes": self._live_bytes,
            "max_bytes": self.max_bytes,
            "dropped_summaries": self.dropped.get("summary", 0) + self.dropped.get("baseline", 0),
            "dropped_events": self.dropped.get("event", 0),
            "corrupt_skipped": self.corrupt_skipped,
        }
