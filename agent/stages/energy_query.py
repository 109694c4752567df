"""The energy query on the stage socket: a job asks what the rack agent accounted for its window.

The wire format is the client's (``rackwatt_client.rack_query``). Only the Unix socket answers: the
reply goes to the sender's autobound address and the kernel says who asked (a UDP reply to a forged
source would be a reflector). Answering reads the engine's ledger only: microseconds of the loop.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rackwatt_client.rack_query import FIELDS, QUERY, VERSION

from agent.payload import json_object
from agent.stages.hints import HintError, check_job, check_ts

MAX_WINDOW_S = 86400.0 * 7  # a week: longer than the ledger reaches; beyond it the request is wrong


@dataclass(frozen=True)
class Query:
    """One energy query: ``t0`` None asks only for the clock; ``t1`` None means now."""

    qid: int
    t0: float | None
    t1: float | None
    job: str | None


def parse_query(data: bytes) -> Query | None:
    """The query in ``data``, None when ``data`` is not a query; raises HintError naming what is wrong."""
    if b'"query"' not in data:  # the cheap test: hints and commands never carry this key
        return None
    obj = json_object(data)
    if obj is None or "query" not in obj:
        return None  # not JSON (the hint parser says so, under its own reason), or not a query
    unknown = set(obj) - FIELDS
    if unknown:
        raise HintError("unknown_field", f"unknown field(s) in query: {', '.join(sorted(unknown))[:120]}")
    if obj["query"] != QUERY:
        raise HintError("unknown_field", f"unknown query {str(obj['query'])[:40]!r}; known: [{QUERY!r}]")
    qid = obj.get("id")
    if isinstance(qid, bool) or not isinstance(qid, int) or not 0 <= qid < 2**53:
        raise HintError("bad_value", "id: expected a non-negative integer")
    t0, t1 = check_ts(obj.get("t0"), "t0"), check_ts(obj.get("t1"), "t1")
    if t1 is not None and t0 is None:
        raise HintError("bad_value", "t1 given without t0")
    if t0 is not None and t1 is not None and not 0 <= t1 - t0 <= MAX_WINDOW_S:
        raise HintError("bad_value", f"t1 - t0 must be within [0, {MAX_WINDOW_S:g}] s, got {t1 - t0:g}")
    return Query(qid, t0, t1, check_job(obj.get("job")))


def answer(query: Query, now: float, engine: Any) -> dict[str, Any]:
    """The reply to ``query`` from ``engine``'s ledger (an ``error`` reply without one)."""
    reply: dict[str, Any] = {"v": VERSION, "id": query.qid, "now": now}  # full precision: short windows
    if query.t0 is None:
        return reply
    ledger = getattr(engine, "ledger", None)
    if ledger is None:
        reply["error"] = "this agent has no engine accounting energy (see its log)"
        return reply
    t1 = now if query.t1 is None else query.t1
    found = ledger.interval(query.t0, t1, job=query.job, cooling_measured=_cooling_measured(engine))
    until = ledger.accounted_until
    reply["accounted_until"] = until
    reply["energy"] = {**dataclasses.asdict(found), "pending": until is None or until < t1}
    return reply


def _cooling_measured(engine: Any) -> bool:
    """Does the rack have cooling-unit power telemetry? (Without it the engine counts cooling as 0 W.)"""
    signals = getattr(getattr(engine, "rows", None), "signals", None)
    indices = getattr(signals, "indices", None)
    return bool(indices("crac.", ".power_w")) if indices is not None else True


def engine_answerer(engine: Callable[[], Any], clock: Callable[[], float]) -> Callable[[Query], bytes]:
    """What the hint intake calls for a query: the encoded reply, from the current engine."""

    def reply(query: Query) -> bytes:
        link = engine()
        body = answer(query, clock(), getattr(link, "engine", link))
        return json.dumps(body, separators=(",", ":"), allow_nan=False).encode()

    return reply
