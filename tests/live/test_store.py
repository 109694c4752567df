"""The durable store: order, bound, drop order, restart, seq floors, state rows, migration."""

from __future__ import annotations

import json
import logging
import os
import stat
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.live.envelope import MessageKind
from agent.live.store import DB_FILE, Store, clock_seq_floor
from tests.live.store_peek import state_names


def _fill(store: Store, n: int, kind: MessageKind = "summary") -> list[int]:
    return [
        store.put(kind, f"t/{kind}", {"i": i, "pad": "x" * 50}, retain=False, qos=1).seq for i in range(n)
    ]


NOW = 1_764_400_000.0


def _at(t: float) -> Callable[[], float]:
    return lambda: t


def test_order_is_kept_across_a_restart_and_acked_messages_stay_done(tmp_path: Path) -> None:
    store = Store.open(tmp_path, 1 << 20, clock=_at(NOW))
    seqs = _fill(store, 20)
    assert seqs == list(range(seqs[0], seqs[0] + 20))
    for s in seqs[:7]:
        store.ack(s)
    store.close()
    again = Store.open(tmp_path, 1 << 20, clock=_at(NOW))  # the clock floor is behind the counter
    assert [e.seq for e in again.pending(100)] == seqs[7:]
    assert [e.payload["i"] for e in again.pending(3)] == [7, 8, 9]
    assert again.pending(100)[0].payload["seq"] == seqs[7]
    assert again.next_seq == seqs[-1] + 1, "seq continues where it was"
    assert again.pending(5, exclude={seqs[7], seqs[8]})[0].seq == seqs[9]


def test_seq_never_goes_back_even_when_everything_was_delivered(tmp_path: Path) -> None:
    store = Store.open(tmp_path, 1 << 20, clock=_at(NOW))
    last = _fill(store, 3)[-1]
    for s in range(last - 2, last + 1):
        store.ack(s)
    store.close()
    again = Store.open(tmp_path, 1 << 20, clock=_at(NOW - 3600))  # and the clock was stepped back
    env = again.put("event", "t", {}, retain=False, qos=1)
    assert env.seq == last + 1 and "seq_after" not in env.payload, "consecutive: nothing to announce"


def test_a_restart_on_an_older_store_jumps_past_the_newer_one_and_says_so(tmp_path: Path) -> None:
    older = Store.open(tmp_path / "a", 1 << 20, clock=_at(NOW))
    last_older = _fill(older, 5)[-1]
    older.close()
    newer = Store.open(tmp_path / "b", 1 << 20, clock=_at(NOW + 10))  # restart with another state_dir
    last_newer = _fill(newer, 100)[-1]  # 10 a second for 10 s
    newer.close()
    back = Store.open(tmp_path / "a", 1 << 20, clock=_at(NOW + 20))  # and back to the older one
    env = back.put("summary", "t", {}, retain=False, qos=1)
    assert env.seq > last_newer > last_older, "seq never goes backwards"
    assert env.payload["seq_after"] == last_older, "the jump names the store's own predecessor"
    assert back.put("summary", "t", {}, retain=False, qos=1).payload.get("seq_after") is None
    back.close()
    assert Store.open(tmp_path / "a", 1 << 20, clock=_at(NOW + 20)).next_seq == env.seq + 2


def test_a_store_that_never_numbered_a_message_announces_no_jump(tmp_path: Path) -> None:
    Store.open(tmp_path, 1 << 20, clock=_at(NOW)).close()  # a run killed before its first message
    again = Store.open(tmp_path, 1 << 20, clock=_at(NOW + 60))
    env = again.put("summary", "t", {}, retain=False, qos=1)
    assert env.seq == clock_seq_floor(NOW + 60) and "seq_after" not in env.payload, "no predecessor"


def test_a_reload_into_a_folder_with_an_older_store_continues_the_higher_counter(tmp_path: Path) -> None:
    older = Store.open(tmp_path / "a", 1 << 20, clock=_at(NOW))
    last_older = _fill(older, 5)[-1]
    older.close()
    running = Store.open(tmp_path / "b", 1 << 20, clock=_at(NOW + 10))
    moved = Store.open(tmp_path / "a", 1 << 20, clock=_at(NOW + 20), seq_floor=running.next_seq)
    env = moved.put("event", "t", {}, retain=False, qos=1)
    assert env.seq == running.next_seq > last_older and "seq_after" not in env.payload
    reload_back = Store.open(tmp_path / "c", 1 << 20, clock=_at(NOW), seq_floor=last_older + 1)
    _fill(reload_back, 1)
    reload_back.close()
    again = Store.open(tmp_path / "c", 1 << 20, clock=_at(NOW), seq_floor=3)  # a floor below it
    assert again.next_seq == last_older + 2, "a floor below the file's counter changes nothing"


def test_a_new_store_starts_past_every_floor(tmp_path: Path) -> None:
    now = 1_764_400_000.0
    fresh = Store.open(tmp_path / "a", 1 << 20, clock=lambda: now)
    assert fresh.next_seq == clock_seq_floor(now) == 1_764_400_000_000
    carried = Store.open(tmp_path / "b", 1 << 20, clock=lambda: now, seq_floor=77)
    assert carried.next_seq == 77, "a known continuation (state_dir moved by reload) does not jump"


def test_full_store_drops_oldest_summaries_first_and_keeps_events(tmp_path: Path) -> None:
    store = Store.open(tmp_path, 4000)
    events = _fill(store, 5, "event")
    _fill(store, 100, "summary")
    pending = [e.seq for e in store.pending(1000)]
    assert pending[:5] == events, "events survive while summaries can be dropped"
    stats = store.stats()
    assert stats["dropped_summaries"] > 0 and stats["dropped_events"] == 0
    assert 0 < int(stats["bytes"]) <= 4000
    assert pending[-1] == store.last_seq and pending == sorted(pending)


def test_events_go_too_when_nothing_else_is_left(tmp_path: Path) -> None:
    store = Store.open(tmp_path, 2000)
    _fill(store, 50, "event")
    assert store.stats()["dropped_events"] > 0
    assert int(store.stats()["bytes"]) <= 2000


def test_state_rows_replace_and_a_bad_one_is_kept_aside_under_one_name(tmp_path: Path) -> None:
    store = Store.open(tmp_path, 1 << 20)
    store.save_state("engine", b"one")
    store.save_state("engine", b"two")
    assert store.load_state("engine") == b"two"
    store.quarantine_state("engine", "does not fit")
    assert store.load_state("engine") is None
    names = state_names(tmp_path)
    assert len(names) == 1 and names[0].startswith("engine.bad-"), names
    store.save_state("engine", b"three")
    store.quarantine_state("engine", "again")
    assert len(state_names(tmp_path)) == 1, "one kept aside per name, not one per failure"


def test_a_file_that_is_not_a_store_is_set_aside_and_a_new_one_starts(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / DB_FILE).write_bytes(b"this is not sqlite" * 100)
    with caplog.at_level(logging.ERROR, logger="rackwatt.store"):
        store = Store.open(tmp_path, 1 << 20)
    assert store.degraded is None and store.put("event", "t", {}, retain=False, qos=1).seq >= 1
    assert list(tmp_path.glob(f"{DB_FILE}.bad-*"))
    assert "not a readable store" in caplog.text


def test_store_file_is_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = Store.open(tmp_path / "state", 1 << 20)
        _fill(store, 3)
        store.close()
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "state").st_mode) == 0o700
    assert stat.S_IMODE(os.stat(tmp_path / "state" / DB_FILE).st_mode) == 0o600


def test_take_over_moves_pending_messages_and_seq(tmp_path: Path) -> None:
    old = Store.open(tmp_path / "a", 1 << 20)
    seqs = _fill(old, 4)
    old.ack(seqs[0])
    new = Store.open(tmp_path / "b", 1 << 20, seq_floor=old.next_seq)
    new.take_over(old)
    assert [e.seq for e in new.pending(10)] == seqs[1:]
    assert len(old) == 0
    assert new.put("event", "t", {}, retain=False, qos=1).seq == seqs[-1] + 1


def _legacy_record(seq: int, kind: str) -> bytes:
    body = json.dumps(
        {
            "seq": seq,
            "kind": kind,
            "topic": f"t/{kind}",
            "retain": False,
            "qos": 1,
            "created": 1.0,
            "payload": {"seq": seq},
        },
    ).encode()
    return struct.pack("<4sII", b"RWS1", len(body), zlib.crc32(body)) + body


def test_an_old_spool_and_state_file_are_imported_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = tmp_path / "spool"
    spool.mkdir()
    data = b"".join(_legacy_record(s, "summary" if s % 2 else "event") for s in range(40, 46))
    (spool / "seg-000000000040.log").write_bytes(data + b"RWS1\x00\x00")  # torn tail
    ack = struct.pack("<QI", 40, zlib.crc32(struct.pack("<Q", 40)))
    (spool / "seg-000000000040.ack").write_bytes(ack)
    (tmp_path / "engine.state").write_bytes(b"old state")
    (tmp_path / ".engine.state.tmp-1234").write_bytes(b"orphan")
    with caplog.at_level(logging.INFO, logger="rackwatt.store"):
        store = Store.open(tmp_path, 1 << 20)
    assert [e.seq for e in store.pending(100)] == [41, 42, 43, 44, 45]
    assert store.load_state("engine") == b"old state"
    assert store.opened_seq >= clock_seq_floor(NOW), "a start: at least the clock floor"
    assert store.put("event", "t", {}, retain=False, qos=1).payload["seq_after"] == 45, "after the old spool"
    assert store.corrupt_skipped == 1
    assert "imported the older spool" in caplog.text
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(DB_FILE)) == []
    store.close()
    again = Store.open(tmp_path, 1 << 20)
    assert [e.seq for e in again.pending(100)][:6] == [41, 42, 43, 44, 45, store.opened_seq], "imported once"


def test_seqs_held_in_memory_are_never_reused_after_the_run_dies(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store.open(tmp_path, 1 << 20)
    before = _fill(store, 2)[-1]
    store.reserve_bytes = 1 << 62  # no filesystem has that much free: the store degrades
    with caplog.at_level(logging.WARNING, logger="rackwatt.store"):
        held = _fill(store, 3)
        assert store.stats()["disk_full"] and store.stats()["held_in_memory"] == 3
        assert [e.seq for e in store.pending(10)] == [before - 1, before, *held], "still sent, in order"
        store.close()  # what was held is lost: counted and logged
    assert store.stats()["dropped_disk_full"] == 3
    assert caplog.text.count("holding new messages in memory") == 1
    again = Store.open(tmp_path, 1 << 20)
    assert again.next_seq > held[-1] + 1000, "seqs the dead run may have published are skipped"
    assert [e.seq for e in again.pending(10)] == [before - 1, before]


def test_a_reload_into_a_folder_where_nothing_can_be_written_continues_the_counter(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")  # a state_dir under a file: no store file can be made
    held = Store.open(tmp_path / "a-file" / "state", 1 << 20, clock=_at(NOW), seq_floor=77)
    env = held.put("event", "t", {}, retain=False, qos=1)
    assert held.degraded is not None, "held in memory"
    assert env.seq == 77 and "seq_after" not in env.payload, "no unannounced jump to the clock floor"


def test_a_payload_that_is_not_json_takes_no_seq_and_keeps_the_jump_announcement(tmp_path: Path) -> None:
    store = Store.open(tmp_path, 1 << 20, clock=_at(NOW))
    last = _fill(store, 2)[-1]
    store.close()
    again = Store.open(tmp_path, 1 << 20, clock=_at(NOW + 60))  # a jump to the clock floor, pending
    with pytest.raises(ValueError):
        again.put("summary", "t", {"x": float("nan")}, retain=False, qos=1)
    env = again.put("summary", "t", {}, retain=False, qos=1)
    assert env.seq == clock_seq_floor(NOW + 60), "the refused payload left no gap"
    assert env.payload["seq_after"] == last, "and the jump is still announced"
