"""Read-only looks into an agent's store file from a test (the agent may still be running)."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

from agent.live.store import DB_FILE


def _query(state_dir: Path, sql: str, args: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    path = Path(state_dir) / DB_FILE
    if not path.exists():
        return []
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)) as db:
        try:
            return list(db.execute(sql, args))
        except sqlite3.OperationalError as exc:  # created by a run killed before its first commit
            if "no such table" in str(exc):
                return []
            raise


def pending_seqs(state_dir: Path) -> list[int]:
    return [int(r[0]) for r in _query(state_dir, "SELECT seq FROM outbox ORDER BY seq")]  # type: ignore[call-overload]


def stored_state(state_dir: Path, name: str = "engine") -> bytes | None:
    rows = _query(state_dir, "SELECT data FROM state WHERE name = ?", (name,))
    return bytes(rows[0][0]) if rows else None  # type: ignore[arg-type]


def state_names(state_dir: Path) -> list[str]:
    return [str(r[0]) for r in _query(state_dir, "SELECT name FROM state ORDER BY name")]


def next_seq(state_dir: Path) -> int:
    rows = _query(state_dir, "SELECT value FROM meta WHERE key = 'next_seq'")
    return int(rows[0][0]) if rows else 0  # type: ignore[call-overload]
