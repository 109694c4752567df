"""``rackwatt watch``'s renderings of the board: a table, plain change lines, JSON.

Sort keys put what needs attention first (largest deviation or power, active drifts by oldest
onset, longest silent); ``rack`` is alphabetical. Unknown values sort last.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from typing import Any

from agent.watch.board import RackRow

SortKey = Callable[[RackRow], tuple[Any, ...]]


def _largest_first(value: float | None) -> tuple[int, float]:
    return (1, 0.0) if value is None else (0, -value)


SORT_KEYS: dict[str, SortKey] = {
    "rack": lambda r: (r.rack,),
    "deviation": lambda r: (
        *_largest_first(None if r.deviation_pct is None else abs(r.deviation_pct)), r.rack),
    "drift": lambda r: (0 if r.drifts else 1, min((d.since_ts for d in r.drifts), default=0.0), r.rack),
    "power": lambda r: (*_largest_first(r.facility_kw), r.rack),
    "seen": lambda r: (*_largest_first(r.last_seen_s), r.rack),
}


def sort_rows(rows: list[RackRow], key: str) -> list[RackRow]:
    return sorted(rows, key=SORT_KEYS[key])


def hhmm(ts: float) -> str:
    if not math.isfinite(ts):
        return "?"
    return time.strftime("%m-%d %H:%MZ", time.gmtime(ts))


def _kw(value: float | None) -> str:
    return "—" if value is None else f"{value:.1f}"


def _drifts(row: RackRow) -> str:
    if row.drifts:
        return ", ".join(
            f"{d.cause}"
            + (f" {d.deviation_pct:+.1f}%" if d.deviation_pct is not None else "")
            + f" since {hhmm(d.since_ts)}"
            for d in row.drifts
        )
    return f"(held: {', '.join(row.held)})" if row.held else "—"


def _seen(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    return f"{seconds / 3600:.1f} h ago"


COLUMNS = ("rack", "state", "stage", "facility kW", "expected kW", "dev %", "spool", "last seen",
           "active drifts")


def cells(row: RackRow) -> tuple[str, ...]:
    state = row.state + (f", down: {','.join(row.devices_down)}" if row.devices_down else "")
    return (
        row.rack,
        state or "?",
        row.stage or "—",
        _kw(row.facility_kw),
        _kw(row.expected_kw),
        "—" if row.deviation_pct is None else f"{row.deviation_pct:+.1f}",
        "—" if row.spool_pending is None else str(row.spool_pending),
        _seen(row.last_seen_s),
        _drifts(row),
    )


def table_lines(rows: list[RackRow], header: str) -> list[str]:
    """The full-screen view: a header line, then columns padded to their widest cell."""
    body = [cells(r) for r in rows]
    widths = [max(len(c) for c in col) for col in zip(COLUMNS, *body, strict=False)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths[:-1]) + "  {}"
    lines = [header, "", fmt.format(*COLUMNS)]
    lines += [fmt.format(*c) for c in body] or ["(no rack has published yet)"]
    return lines


def plain_line(row: RackRow, now: float) -> str:
    """One line for a pipe or a log: what changed about one rack."""
    c = dict(zip(COLUMNS, cells(row), strict=True))
    return (
        f"{time.strftime('%Y-%m-%d %H:%M:%SZ', time.gmtime(now))} rack {c['rack']}: {c['state']}, "
        f"stage {c['stage']}, facility {c['facility kW']} kW vs {c['expected kW']} kW expected "
        f"({c['dev %']} %), drifts {c['active drifts']}, spool {c['spool']}"
    )


def change_key(row: RackRow) -> tuple[Any, ...]:
    """What makes a plain line worth printing again (not last-seen, which changes every second)."""
    return (row.state, row.stage, row.facility_kw, row.expected_kw, row.drifts, row.held, row.spool_pending,
            row.devices_down)


def json_line(site: str, rows: list[RackRow], now: float) -> str:
    return json.dumps({"site": site, "ts": round(now, 3), "racks": [r.as_json() for r in rows]},
                      separators=(",", ":"))
