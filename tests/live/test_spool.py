"""The on-disk spool: order, bound, drop policy, restart, torn and corrupt records."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from agent.live.spool import HEADER, Spool


def _fill(spool: Spool, n: int, kind: str = "summary") -> list[int]:
    return [spool.append(kind, f"t/{kind}", {"i": i, "pad": "x" * 50}).seq for i in range(n)]


def test_seq_is_monotonic_and_survives_restart_even_when_everything_was_delivered(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    seqs = _fill(spool, 5)
    assert seqs == [1, 2, 3, 4, 5]
    for s in seqs:
        spool.ack(s)
    assert len(spool) == 0
    again = Spool(tmp_path, max_bytes=1 << 20)
    assert len(again) == 0
    assert again.append("event", "t/event", {}).seq == 6


def test_pending_records_come_back_in_order_after_restart(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=600)  # several segments
    seqs = _fill(spool, 20)
    for s in seqs[:7]:
        spool.ack(s)
    again = Spool(tmp_path, max_bytes=1 << 20, segment_bytes=600)
    assert list(again.pending_seqs()) == seqs[7:]
    record = again.read(seqs[7])
    assert record is not None and record.payload == {"i": 7, "pad": "x" * 50, "seq": seqs[7]}
    # Fully delivered old segments are deleted from disk.
    assert not (tmp_path / "seg-000000000001.log").exists()
    first_left = min(int(p.stem[4:]) for p in tmp_path.glob("seg-*.log"))
    assert 1 < first_left <= seqs[7]


def test_full_spool_drops_oldest_summaries_first_and_keeps_events(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=4000, segment_bytes=1000)
    events = _fill(spool, 5, "event")
    _fill(spool, 100, "summary")
    pending = list(spool.pending_seqs())
    assert all(e in pending for e in events)
    assert spool.stats()["dropped_summaries"] > 0
    assert spool.stats()["dropped_events"] == 0
    assert spool.stats()["bytes"] <= 4000
    # The newest summaries are the ones kept.
    assert pending[-1] == spool.last_seq
    disk = sum(p.stat().st_size for p in tmp_path.glob("seg-*.log"))
    assert disk <= 4000 + 2 * 1000


def test_events_are_dropped_only_when_nothing_else_is_left(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=2000, segment_bytes=500)
    _fill(spool, 50, "event")
    assert spool.stats()["dropped_events"] > 0
    assert spool.stats()["bytes"] <= 2000


def test_torn_tail_after_kill_is_skipped_with_one_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    _fill(spool, 3)
    seg = next(tmp_path.glob("seg-*.log"))
    with open(seg, "ab") as f:  # a record cut short by kill -9
        f.write(HEADER.pack(b"RWS1", 500, 0) + b'{"seq":4,"kind":"summ')
    with caplog.at_level(logging.WARNING, logger="rackwatt.spool"):
        again = Spool(tmp_path, max_bytes=1 << 20)
    assert list(again.pending_seqs()) == [1, 2, 3]
    assert len([r for r in caplog.records if "torn or corrupt" in r.message]) == 1
    # The tail was cut, so a new record lands on a clean boundary and a third load is silent.
    assert again.append("summary", "t", {}).seq == 4
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="rackwatt.spool"):
        third = Spool(tmp_path, max_bytes=1 << 20)
    assert list(third.pending_seqs()) == [1, 2, 3, 4]
    assert not caplog.records


def test_corrupt_record_in_the_middle_is_skipped_and_the_rest_kept(tmp_path: Path) -> None:
    spool = Spool(tmp_path, max_bytes=1 << 20)
    _fill(spool, 5)
    seg = next(tmp_path.glob("seg-*.log"))
    data = bytearray(seg.read_bytes())
    second = data.find(b"RWS1", 1)
    data[second + HEADER.size + 5] ^= 0xFF  # flip a byte in record 2's body
    seg.write_bytes(bytes(data))
    again = Spool(tmp_path, max_bytes=1 << 20)
    assert list(again.pending_seqs()) == [1, 3, 4, 5]
    assert again.stats()["corrupt_skipped"] == 1


def test_garbage_files_never_crash_the_loader(tmp_path: Path) -> None:
    (tmp_path / "seg-000000000001.log").write_bytes(b"\x00garbage" * 100 + b"RWS1" + b"\xff" * 20)
    (tmp_path / "seg-000000000001.ack").write_bytes(b"\x01\x02\x03")
    (tmp_path / "seg-notanumber.log").write_bytes(b"")
    spool = Spool(tmp_path, max_bytes=1 << 20)
    assert len(spool) == 0
    assert spool.append("event", "t", {}).seq >= 1


def test_spool_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    """Issue 18 #7: 0600 files and a 0700 directory even under a permissive umask (outside systemd)."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        spool = Spool(tmp_path / "spool", max_bytes=1 << 20, segment_bytes=600)
        for seq in _fill(spool, 20):
            spool.ack(seq)
        _fill(spool, 3)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "spool").st_mode) == 0o700
    files = list((tmp_path / "spool").iterdir())
    assert files
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in files} == {f.name: 0o600 for f in files}
