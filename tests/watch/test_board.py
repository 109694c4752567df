"""SiteBoard and its renderings, from payloads shaped as the agent publishes them (schemas checked)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema

from agent.watch.board import SiteBoard
from agent.watch.table import change_key, json_line, plain_line, sort_rows, table_lines
from tests.live.conftest import load_schema

ROOT = "rackwatt/v1/dc1"
T = 1.8e9


def status(rack: str, **extra: Any) -> dict[str, Any]:
    body = {
        "v": 1,
        "type": "status",
        "state": "online",
        "seq": 3,
        "site": "dc1",
        "rack": rack,
        "version": "0.1.0",
        "ts": T,
        "started": T - 100,
        "uptime_s": 100.0,
        "engine": {"ok": True, "errors": 0, "last_error": None},
        "devices": {
            "pdu.a": {"ok": True, "polls": 9, "failures": 0, "last_ok": T, "error": None},
            "crac.1": {
                "ok": False,
                "polls": 9,
                "failures": 9,
                "last_ok": None,
                "error": "crac 'crac.1': timeout",
            },
        },
        "spool": {
            "pending": 4,
            "bytes": 100,
            "max_bytes": 1000,
            "dropped_summaries": 0,
            "dropped_events": 0,
            "corrupt_skipped": 0,
        },
    }
    body.update(extra)
    jsonschema.validate(body, load_schema("status"))
    return body


def summary(rack: str, it: float, cooling: float, it_x: float, cooling_x: float) -> dict[str, Any]:
    return {
        "v": 1,
        "seq": 4,
        "ts": T + 60,
        "site": "dc1",
        "rack": rack,
        "warm": True,
        "stage": "forward_backward",
        "job": "j1",
        "held": [],
        "power_w": {
            "gpu": 1.0,
            "it": it,
            "it_expected": it_x,
            "cooling": cooling,
            "cooling_expected": cooling_x,
        },
    }


def event(rack: str, state: str, cause: str = "thermal") -> dict[str, Any]:
    return {
        "v": 1,
        "type": "event",
        "site": "dc1",
        "rack": rack,
        "seq": 5,
        "ts": T + 120,
        "kind": "drift",
        "state": state,
        "cause": cause,
        "stage": "eval",
        "deviation_pct": 19.9 if state == "onset" else None,
        "detail": {"since": T + 30, "component": "thermal"},
    }


def feed(board: SiteBoard, rack: str, kind: str, body: Any, at: float = T) -> bool:
    return board.receive(f"{ROOT}/{rack}/{kind}", json.dumps(body).encode(), at)


def test_rows_show_power_deviation_spool_devices_and_drifts() -> None:
    board = SiteBoard("rackwatt/v1", "dc1")
    feed(board, "r1", "status", status("r1"))
    feed(board, "r1", "summary", summary("r1", 8000, 2600, 8000, 2000))
    feed(board, "r1", "event", event("r1", "onset"), at=T + 5)
    (row,) = board.rows(now=T + 15)
    assert (row.facility_kw, row.expected_kw, row.deviation_pct) == (10.6, 10.0, 6.0)
    assert row.spool_pending == 4 and row.devices_down == ("crac.1",) and row.last_seen_s == 10.0
    (drift,) = row.drifts
    assert (drift.cause, drift.since_ts, drift.deviation_pct) == ("thermal", T + 30, 19.9)
    feed(board, "r1", "event", event("r1", "cleared"))
    assert board.rows(now=T)[0].drifts == ()


def test_a_late_watcher_learns_active_drifts_from_the_retained_status() -> None:
    board = SiteBoard("rackwatt/v1", "dc1")
    feed(
        board,
        "r2",
        "status",
        status("r2", drifts=[{"cause": "cooling", "since": T - 600, "onset": T, "stage": None}]),
    )
    (drift,) = board.rows(now=T)[0].drifts
    assert (drift.cause, drift.since_ts, drift.deviation_pct) == ("cooling", T - 600, None)
    feed(board, "r2", "status", status("r2", drifts=[]))  # republished with none: cleared
    assert board.rows(now=T)[0].drifts == ()


def test_offline_unreadable_and_foreign_messages() -> None:
    board = SiteBoard("rackwatt/v1", "dc1")
    assert not feed(board, "r3", "baseline", {})  # not read by the board
    assert not board.receive("rackwatt/v1/other/r3/status", b"{}", T)  # another site
    assert not board.receive(f"{ROOT}/r3/summary", b"\xff not json", T)
    assert board.ignored == 1
    feed(board, "r3", "status", {"v": 1, "type": "status", "state": "offline", "reason": "lost"})
    assert board.rows(now=T)[0].state == "offline (lost)"


def test_sorting_puts_what_needs_attention_first() -> None:
    board = SiteBoard("rackwatt/v1", "dc1")
    feed(board, "a", "summary", summary("a", 5000, 1000, 5000, 1000), at=T)
    feed(board, "b", "summary", summary("b", 9000, 1000, 8000, 1000), at=T + 50)
    feed(board, "c", "status", status("c"), at=T + 10)
    feed(board, "c", "event", event("c", "onset"), at=T + 10)
    rows = board.rows(now=T + 60)
    assert [r.rack for r in sort_rows(rows, "rack")] == ["a", "b", "c"]
    assert [r.rack for r in sort_rows(rows, "deviation")] == ["b", "a", "c"]  # unknown last
    assert [r.rack for r in sort_rows(rows, "drift")] == ["c", "a", "b"]
    assert [r.rack for r in sort_rows(rows, "power")] == ["b", "a", "c"]
    assert [r.rack for r in sort_rows(rows, "seen")] == ["a", "c", "b"]  # longest silent first


def test_renderings() -> None:
    board = SiteBoard("rackwatt/v1", "dc1")
    feed(board, "r1", "summary", summary("r1", 8000, 2600, 8000, 2000))
    feed(board, "r1", "event", event("r1", "onset"))
    rows = board.rows(now=T + 3)
    lines = table_lines(rows, "header")
    assert lines[2].split()[:3] == ["rack", "state", "stage"]
    assert "thermal +19.9% since" in lines[3] and "+6.0" in lines[3]
    assert (
        "rack r1: online, stage forward_backward, facility 10.6 kW vs 10.0 kW expected (+6.0 %)"
        in plain_line(rows[0], T)
    )
    doc = json.loads(json_line("dc1", rows, T + 3))
    assert doc["site"] == "dc1" and doc["racks"][0]["drifts"][0]["cause"] == "thermal"
    later = board.rows(now=T + 30)
    assert change_key(later[0]) == change_key(rows[0])  # only last-seen moved: no new plain line
    assert table_lines([], "h")[-1] == "(no rack has published yet)"
