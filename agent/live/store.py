"""The agent's one durable store: outgoing messages, the ``seq`` counter and the engine state.

One sqlite file, ``<state_dir>/rackwatt.db`` (WAL, ``synchronous=FULL``: a commit is on disk when
it returns). A message, its ``seq`` and the new counter are one transaction, and the engine state is
one row replaced in one: a ``kill -9`` or a power cut leaves all or nothing, and no temp file. It
does not talk MQTT (``publisher.py`` sends what ``pending()`` returns and ``ack()``s it).

Bound: pending payloads never exceed ``max_bytes``; when full the lowest ``DROP_PRIORITY``
(envelope.py: summaries and baselines), oldest first, makes room; events go only when nothing else is left.

A full disk, in this order (each step counted in ``stats()`` and logged once per episode):
1. below ``reserve_bytes`` free, messages are no longer written (the room is kept for the state save);
2. new messages are held in memory, in ``seq`` order after those on disk, and still sent;
3. when the hold is full too, held messages are dropped by the same priority (``dropped_disk_full``);
4. once twice the reserve is free the held messages are written and the store is durable again.

``seq`` never goes backwards (docs/mqtt.md), whatever ``state_dir`` does. A reload that moves it
carries the counter over (``seq_floor``). A start may find an older store that another ``state_dir``
has since outrun, so it starts at ``max(the file's counter, the clock floor)``: milliseconds since
the epoch, above any seq a store assigning under 1000 a second can have reached. A jump over seqs
the file never assigned is announced by the next message's ``seq_after`` (its predecessor), so a
subscriber tells it from a loss. Seqs that only lived in memory during a full disk are skipped after
a crash (``DEGRADED_SEQ_LEASE``), even if the clock was stepped back.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Collection
from pathlib import Path

from agent.engine.state import quarantine_name
from agent.live import legacy_spool
from agent.live.envelope import Envelope, MessageKind, Payload, message_kind, payload_json
from agent.live.logsetup import worth_logging
from agent.live.memory_hold import MemoryHold
from agent.live.store_file import DB_FILE, connect, is_disk_full, set_aside, transaction

log = logging.getLogger("rackwatt.store")

# Room kept free on the filesystem for the state save and the store's own bookkeeping: two
# copies of the last state (the WAL holds the new one until a checkpoint moves it) plus 32 KiB,
# the WAL's size (store_file.WAL_PAGES), for the pages a checkpoint adds to the file. A full-disk
# episode ends only when twice the reserve is free, so writing the held messages cannot start
# the next one at once (one episode, one pair of log lines).
MIN_RESERVE_BYTES = 32 * 1024
# Seqs a store may hand out while it cannot write its counter (full disk). Written before it
# stops writing; after a crash in that state the next run starts beyond it. 10^6 seqs outlast a
# full disk of 11 days at one message a second.
DEGRADED_SEQ_LEASE = 1_000_000


class StoreError(RuntimeError):
    """The store could not do what was asked (the message says why); nothing was half done."""


def clock_seq_floor(now_s: float) -> int:
    """The first ``seq`` of a store with no history: milliseconds since the Unix epoch."""
    return max(1, int(now_s * 1000))


class Store:
    """Durable FIFO of envelopes plus named state blobs; ``Store.open`` is the way in."""

    def __init__(
        self,
        db: sqlite3.Connection | None,
        path: Path | None,
        max_bytes: int,
        clock: Callable[[], float],
        seq_floor: int | None,
    ) -> None:
        """Use ``Store.open``; ``db`` None gives a store held in memory."""
        self._db = db
        self.path = path
        self.max_bytes = int(max_bytes)
        self._clock = clock
        self._next_seq = 1
        self._bytes = 0  # pending payload bytes on disk
        self._count = 0  # pending messages on disk
        self._held = MemoryHold()
        self._unwritten_acks: set[int] = set()  # delivered, but the delete could not be written
        self.dropped: dict[str, int] = {"summary": 0, "baseline": 0, "event": 0}
        self.corrupt_skipped = 0
        self.reserve_bytes = MIN_RESERVE_BYTES
        self._seq_after: int | None = None  # the next message's predecessor, after a jump
        self._degraded: str | None = None if db is not None else "no store file"
        history = False  # seqs assigned before this run (a store held in memory knows none)
        if db is not None and path is not None:
            self._load_counters()
            history = self._meta("next_seq") is not None or self._start_fresh(path.parent)
            self._resume_after_degraded_crash()
            if self._count:
                log.info("store: %d message(s) waiting from a previous run", self._count)
        # a start may find an older store that was outrun: on to the clock floor, and if that skips
        # seqs of this store's history the next message says which seq it follows (``seq_after``);
        # a reload continues the running counter, no jump
        floor = clock_seq_floor(clock()) if seq_floor is None else seq_floor
        if floor > self._next_seq:
            if seq_floor is None and history:
                self._seq_after = self._next_seq - 1
            self._next_seq = floor
        self.opened_seq = self._next_seq  # the first seq this run could assign (for reports)

    # ---- opening ---------------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        state_dir: Path,
        max_bytes: int,
        *,
        clock: Callable[[], float] = time.time,
        seq_floor: int | None = None,
    ) -> Store:
        """The store in ``state_dir`` (created, or imported from an older spool); never raises.

        ``seq_floor``: the running counter when a reload moves ``state_dir``; None at a start.

        A file that is not a readable store is set aside (``quarantine``) and a new one started;
        a directory where no file can be written gives a store held in memory, logged.
        """
        state_dir = Path(state_dir)
        path = state_dir / DB_FILE

        def on_file() -> Store:
            db = connect(path)
            try:
                return cls(db, path, max_bytes, clock, seq_floor)
            except BaseException:
                db.close()
                raise

        try:
            state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                return on_file()
            except sqlite3.OperationalError:
                raise  # locked by another process, unwritable, disk full …: not bad data
            except sqlite3.DatabaseError as exc:  # not a database, damaged, or a newer schema
                moved = set_aside(path)
                log.error("store: %s was not a readable store (%s); kept it as %s and started a new one",
                          path, exc, moved.name if moved else "(could not move it)")
                return on_file()
        except (sqlite3.Error, OSError) as exc:
            log.error("store: cannot open %s (%s); messages and state are held in memory only until a "
                      "restart", path, exc)
            return cls(None, None, max_bytes, clock, seq_floor)

    def _start_fresh(self, state_dir: Path) -> bool:
        """A file with no counter: import an older spool and state once; True if that gave it seqs.

        Without one the counter is first written by the first message, so a run killed before
        it leaves no history to announce a jump from (``seq_after`` only names assigned seqs).
        """
        legacy = legacy_spool.read_legacy(state_dir)
        if not legacy.found:
            return False
        db = self._conn()
        with transaction(db):
            for env in legacy.pending:
                self._insert(db, env)
            if legacy.state is not None:
                db.execute("INSERT OR REPLACE INTO state VALUES ('engine', ?, ?)",
                           (legacy.state, self._clock()))
            self._next_seq = max([self._next_seq, legacy.next_seq, *(e.seq + 1 for e in legacy.pending)])
            self._set_meta(db, "next_seq", self._next_seq)
        self._load_counters()
        self.corrupt_skipped += legacy.skipped
        legacy_spool.remove_legacy(state_dir)
        log.info(
            "store: imported the older spool and state of %s: %d pending message(s)%s, %s; "
            "its last seq was %d",
            state_dir,
            len(legacy.pending),
            f" ({legacy.skipped} torn record(s) skipped)" if legacy.skipped else "",
            "engine state kept" if legacy.state is not None else "no engine state",
            self._next_seq - 1,
        )
        return self._next_seq > 1

    def _resume_after_degraded_crash(self) -> None:
        lease = self._meta("degraded_seq_end")
        if lease is not None and lease > self._next_seq:
            log.warning(
                "store: the last run stopped while holding messages in memory (full disk); "
                "seq continues at %d, after every seq it may have used",
                lease,
            )
            self._next_seq = lease
            self._try_write(lambda db: self._set_meta(db, "next_seq", lease))

    def _load_counters(self) -> None:
        count, size, top = self._conn().execute(
            "SELECT count(*), coalesce(sum(size), 0), max(seq) FROM outbox"
        ).fetchone()
        self._count, self._bytes = int(count), int(size)
        self._next_seq = max(self._next_seq, self._meta("next_seq") or 1, (top or 0) + 1)

    # ---- sqlite helpers --------------------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError("the store is held in memory (no file)")
        return self._db

    def _meta(self, key: str) -> int | None:
        if self._db is None:
            return None
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else int(row[0])

    @staticmethod
    def _set_meta(db: sqlite3.Connection, key: str, value: int) -> None:
        db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, int(value)))

    def _insert(self, db: sqlite3.Connection, env: Envelope) -> int:
        text = payload_json(env.payload)
        db.execute("INSERT OR IGNORE INTO outbox VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                   (env.seq, env.kind, env.priority, env.topic, int(env.retain), env.qos, env.created, text,
                    len(text)))
        return len(text)

    def _add(self, db: sqlite3.Connection, env: Envelope) -> None:
        """A new pending message, room made for it first by the drop order."""
        self._make_room(db, len(payload_json(env.payload)))
        self._bytes += self._insert(db, env)
        self._count += 1

    def _try_write(self, write: Callable[[sqlite3.Connection], object]) -> bool:
        """Run ``write`` in one transaction; False (logged once per episode) if it could not be."""
        if self._db is None:
            return False
        try:
            with transaction(self._db):
                write(self._db)
        except (sqlite3.Error, OSError) as exc:
            self._enter_degraded(f"{type(exc).__name__}: {exc}" if not is_disk_full(exc) else "disk full")
            return False
        return True

    # ---- space -----------------------------------------------------------------------------
    def _space_low(self, factor: int = 1) -> bool:
        """Less than ``factor`` × the reserve free on the store's filesystem?"""
        if self.path is None:
            return True
        try:
            st = os.statvfs(self.path.parent)
        except OSError:
            return False
        return st.f_bavail * st.f_frsize < factor * self.reserve_bytes

    def _enter_degraded(self, why: str) -> None:
        if self._degraded is not None:
            return
        self._degraded = why
        if self._db is not None:  # the lease is written while the reserve still has room
            with contextlib.suppress(sqlite3.Error), transaction(self._db):
                self._set_meta(self._db, "degraded_seq_end", self._next_seq + DEGRADED_SEQ_LEASE)
        log.warning(
            "store: cannot write %s (%s); holding new messages in memory (up to %d KiB) and still "
            "sending them; they are written as soon as space returns",
            self.path,
            why,
            self._held.max_bytes // 1024,
        )

    def _recover(self) -> None:
        """Write what is held once the disk has room again; leave degraded mode if all went."""
        if self._degraded is None or self._db is None or self._space_low(factor=2):
            return
        held = self._held.envelopes()
        acks = set(self._unwritten_acks)

        def write(db: sqlite3.Connection) -> None:
            for env in held:
                self._add(db, env)
            if acks:
                db.executemany("DELETE FROM outbox WHERE seq = ?", [(s,) for s in acks])
            self._set_meta(db, "next_seq", self._next_seq)
            db.execute("DELETE FROM meta WHERE key = 'degraded_seq_end'")

        if not self._try_write(write):
            self._load_counters_quietly()
            return  # still no room: the episode goes on (already logged)
        was, self._degraded = self._degraded, None
        self._held.written()
        self._unwritten_acks -= acks
        self._load_counters_quietly()
        log.info("store: writing to %s again (%s is over): %d held message(s) stored", self.path, was,
                 len(held))

    def _load_counters_quietly(self) -> None:
        """After a write that failed (and rolled back) or removed rows: the file's counts again."""
        with contextlib.suppress(sqlite3.Error):
            self._load_counters()

    # ---- messages --------------------------------------------------------------------------
    def put(
        self, kind: MessageKind, topic: str, payload: Payload, *, retain: bool, qos: int, keep: bool = True
    ) -> Envelope:
        """Give ``payload`` the next ``seq`` and keep it until ``ack`` (durably unless degraded).

        ``keep=False`` (MQTT off): only the ``seq`` is taken. Never raises for lack of space.
        """
        payload_json(payload)  # not JSON: the caller's ValueError, before a seq or pending seq_after is used
        seq = self._next_seq
        self._next_seq += 1
        numbered = {**payload, "seq": seq}
        if self._seq_after is not None:
            numbered["seq_after"], self._seq_after = self._seq_after, None
        env = Envelope(seq, kind, topic, retain, qos, self._clock(), numbered)
        self._recover()
        if self._degraded is None and self._space_low():
            self._enter_degraded(f"less than {self.reserve_bytes // 1024} KiB free on its filesystem")
        if self._degraded is None:

            def write(db: sqlite3.Connection) -> None:
                if keep:
                    self._add(db, env)
                self._set_meta(db, "next_seq", self._next_seq)

            if self._try_write(write):
                return env
            self._load_counters_quietly()
        if keep:
            self._held.add(env)
        return env

    def _make_room(self, db: sqlite3.Connection, size: int) -> None:
        while self._count and self._bytes + size > self.max_bytes:
            seq, kind, victim_size = db.execute(
                "SELECT seq, kind, size FROM outbox ORDER BY priority, seq LIMIT 1"
            ).fetchone()
            db.execute("DELETE FROM outbox WHERE seq = ?", (seq,))
            self._count -= 1
            self._bytes -= int(victim_size)
            self.dropped[kind] = self.dropped.get(kind, 0) + 1
            total = sum(self.dropped.values())
            if worth_logging(total):
                log.warning("store: full (%d bytes); dropped the oldest %s (seq %d); drops so far: %s",
                            self.max_bytes, kind, seq, self.dropped)

    def pending(self, limit: int, exclude: Collection[int] = ()) -> list[Envelope]:
        """Up to ``limit`` envelopes waiting for delivery, oldest ``seq`` first."""
        out: list[Envelope] = []
        skip = set(exclude) | self._unwritten_acks
        if self._db is not None and self._count:
            rows = self._db.execute(
                "SELECT seq, kind, topic, retain, qos, created, payload FROM outbox ORDER BY seq LIMIT ?",
                (limit + len(skip),),
            ).fetchall()
            for seq, kind, topic, retain, qos, created, text in rows:
                if seq in skip:
                    continue
                try:
                    env = Envelope(seq, message_kind(kind), topic, bool(retain), int(qos), float(created),
                                   json.loads(text))
                except ValueError as exc:
                    log.error("store: message seq %d is unreadable (%s); dropping it", seq, exc)
                    self.corrupt_skipped += 1
                    self.ack(seq)
                    continue
                out.append(env)
                if len(out) >= limit:
                    return out
        out.extend(e for e in self._held.envelopes() if e.seq not in skip)
        return out[:limit]

    def ack(self, seq: int) -> None:
        """The broker has it: forget it. Unknown seqs (already done) are ignored."""
        if self._held.pop(seq) is not None:
            return
        if self._db is None:
            return

        def delete(db: sqlite3.Connection) -> None:
            cur = db.execute("DELETE FROM outbox WHERE seq = ? RETURNING size", (seq,))
            row = cur.fetchone()
            if row is not None:
                self._count -= 1
                self._bytes -= int(row[0])

        if not self._try_write(delete):
            self._unwritten_acks.add(seq)  # not re-sent this run; a restart may send it again (same seq)

    def take_over(self, older: Store) -> None:
        """Move ``older``'s pending messages here (``state_dir`` moved by reload); ``older`` forgets them."""
        moved = older.pending(older._count + len(older._held) + 1)
        if not moved:
            return
        fresh = [e for e in moved if not self._has(e.seq)]  # the new file may hold some already

        def write(db: sqlite3.Connection) -> None:
            for env in fresh:
                self._add(db, env)

        if self._degraded is not None or not self._try_write(write):
            for env in fresh:
                self._held.add(env)
        self._next_seq = max([self._next_seq, *(e.seq + 1 for e in moved)])
        self._try_write(lambda db: self._set_meta(db, "next_seq", self._next_seq))
        older._forget([e.seq for e in moved])

    def _forget(self, seqs: list[int]) -> None:
        """Drop ``seqs`` in one transaction (they now live in another store)."""
        for seq in seqs:
            self._held.pop(seq)
        if self._try_write(
            lambda db: db.executemany("DELETE FROM outbox WHERE seq = ?", [(s,) for s in seqs])
        ):
            self._load_counters_quietly()
        else:
            self._unwritten_acks.update(seqs)

    def _has(self, seq: int) -> bool:
        if seq in self._held:
            return True
        if self._db is None:
            return False
        return self._db.execute("SELECT 1 FROM outbox WHERE seq = ?", (seq,)).fetchone() is not None

    # ---- state -----------------------------------------------------------------------------
    def save_state(self, name: str, data: bytes) -> None:
        """Replace the state ``name`` in one transaction; StoreError (the old one kept) if it cannot."""
        self.reserve_bytes = max(MIN_RESERVE_BYTES, 2 * len(data) + MIN_RESERVE_BYTES)
        if self._db is None:
            raise StoreError("no store file: the state is not saved")
        try:
            with transaction(self._db):
                self._db.execute("INSERT OR REPLACE INTO state VALUES (?, ?, ?)", (name, data, self._clock()))
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(
                f"saving the {name} state to {self.path}: {exc}; the previous one is kept"
            ) from None

    def load_state(self, name: str) -> bytes | None:
        if self._db is None:
            return None
        row = self._db.execute("SELECT data FROM state WHERE name = ?", (name,)).fetchone()
        return None if row is None else bytes(row[0])

    def quarantine_state(self, name: str, why: str) -> None:
        """Keep an unreadable state aside (one per name, for a post-mortem) and say so."""
        aside = quarantine_name(name)
        prefix = quarantine_name(name, 0).rsplit("-", 1)[0] + "-"

        def move(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM state WHERE name LIKE ? || '%'", (prefix,))
            db.execute("UPDATE state SET name = ? WHERE name = ?", (aside, name))

        if self._try_write(move):
            log.error("%s state in %s cannot be loaded (%s); kept it as %r and started fresh", name,
                      self.path, why, aside)
        else:
            log.error("%s state in %s cannot be loaded (%s) nor set aside; starting fresh", name, self.path,
                      why)

    # ---- reporting and closing -------------------------------------------------------------
    @property
    def next_seq(self) -> int:
        return self._next_seq

    @property
    def last_seq(self) -> int:
        return self._next_seq - 1

    @property
    def dropped_disk_full(self) -> int:
        """Messages lost because the disk and the memory hold were full (since the start)."""
        return self._held.dropped

    @property
    def degraded(self) -> str | None:
        """Why messages are held in memory now (None while the store is durable)."""
        return self._degraded

    def __len__(self) -> int:
        return self._count + len(self._held) - len(self._unwritten_acks)

    def stats(self) -> dict[str, int | bool]:
        """``status.spool`` (agent/schemas/status.schema.json)."""
        return {
            "pending": len(self),
            "bytes": self._bytes + self._held.bytes,
            "max_bytes": self.max_bytes,
            "dropped_summaries": self.dropped.get("summary", 0) + self.dropped.get("baseline", 0),
            "dropped_events": self.dropped.get("event", 0),
            "corrupt_skipped": self.corrupt_skipped,
            "held_in_memory": len(self._held),
            "dropped_disk_full": self.dropped_disk_full,
            "disk_full": self._degraded is not None,
        }

    def close(self) -> None:
        """Write what is held if there is room now; what cannot be is counted as lost and logged."""
        self._recover()
        if self._held:
            log.error(
                "store: stopping with %d message(s) that could not be written (%s): they are lost "
                "(counted in status.spool.dropped_disk_full)",
                self._held.lose_all(),
                self._degraded,
            )
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None
