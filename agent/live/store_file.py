"""The store's sqlite file: schema, pragmas, opening, transactions, setting a bad file aside.

Kept apart from ``store.py`` (what the store does) so the on-disk contract is one short page.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from agent.engine.state import quarantine

DB_FILE = "rackwatt.db"
SCHEMA_VERSION = 1
# The WAL is checkpointed every 8 pages (32 KiB) and cut back to that size: the agent writes a
# few small messages a minute, so checkpoints cost nothing, and the WAL never outgrows the
# store's reserve (store.MIN_RESERVE_BYTES).
WAL_PAGES = 8
PAGE_BYTES = 4096  # sqlite's default page size

SCHEMA = """
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, priority INTEGER NOT NULL, topic TEXT NOT NULL,
    retain INTEGER NOT NULL, qos INTEGER NOT NULL, created REAL NOT NULL, payload TEXT NOT NULL,
    size INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS outbox_drop_order ON outbox (priority, seq);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS state (name TEXT PRIMARY KEY, data BLOB NOT NULL, saved REAL NOT NULL);
"""


def connect(path: Path) -> sqlite3.Connection:
    """Open (or create, 0600 whatever the umask) the store file; DatabaseError if it is not one."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)
    db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.execute(f"PRAGMA wal_autocheckpoint={WAL_PAGES}")
        db.execute(f"PRAGMA journal_size_limit={WAL_PAGES * PAGE_BYTES}")
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise sqlite3.DatabaseError(f"store schema {version}, this build reads {SCHEMA_VERSION}")
        db.executescript(SCHEMA)
        db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
        db.execute("SELECT count(*) FROM outbox").fetchone()
    except BaseException:
        db.close()
        raise
    return db


def set_aside(path: Path) -> Path | None:
    """Quarantine an unreadable store file (its WAL and shared memory belong to it: removed)."""
    for sibling in (path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(OSError):
            sibling.unlink()
    try:
        return quarantine(path)
    except OSError:
        return None


@contextlib.contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[None]:
    """``BEGIN IMMEDIATE`` … ``COMMIT``; anything raised rolls it all back."""
    db.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


def is_disk_full(exc: BaseException) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return code == sqlite3.SQLITE_FULL or (isinstance(exc, OSError) and exc.errno == 28)
