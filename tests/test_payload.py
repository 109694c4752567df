"""agent.payload: what counts as a number in a decoded payload, and what its readers make of the rest.

A finite int or float is a value; bool, NaN, ±inf, text, null and anything else are "unknown"
(None), so no reader shows JSON ``true`` as 1 W or NaN as a power. Only a metric family that
exports a flag on purpose (``FamilySet.flag``) turns a bool into 0/1.
"""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from agent.live.accept import parse_accept
from agent.metrics.families import FamilySet
from agent.metrics.jobs import stage_energy_kwh
from agent.payload import json_object, number, section, total
from agent.report.page import _skipped_input, drift_periods, job_rows
from agent.sparkplug.node import EdgeNode, summary_metrics
from agent.watch.board import SiteBoard

NOT_NUMBERS = [True, False, math.nan, math.inf, -math.inf, "12", "nan", None, [1], {"w": 1}, 10**400]


@pytest.mark.parametrize(("value", "expected"), [(0, 0.0), (7, 7.0), (-3, -3.0), (1.5, 1.5), (2**53, 2**53)])
def test_number_takes_finite_ints_and_floats(value: Any, expected: float) -> None:
    got = number(value)
    assert got == expected and type(got) is float


@pytest.mark.parametrize("value", NOT_NUMBERS)
def test_number_refuses_bool_nonfinite_text_and_null(value: Any) -> None:
    assert number(value) is None


def test_number_reads_what_json_decodes() -> None:
    body = json.loads('{"a": NaN, "b": Infinity, "c": true, "d": 3, "e": "3", "f": null, "g": 2.5}')
    assert {k: number(v) for k, v in body.items()} == {
        "a": None, "b": None, "c": None, "d": 3.0, "e": None, "f": None, "g": 2.5
    }


def test_total_is_unknown_when_any_part_is() -> None:
    assert total(1000, 250.5) == 1250.5
    assert total() == 0.0 and type(total()) is float  # no parts: nothing to add (a job with no stages)
    for bad in NOT_NUMBERS:
        assert total(1000, bad) is None, bad


def test_section_is_empty_unless_an_object() -> None:
    assert section({"p": {"it": 1}}, "p") == {"it": 1}
    for bad in (None, [1], "x", 3, True):
        assert section({"p": bad}, "p") == {}
    assert section({}, "p") == {}


def test_json_object_is_none_unless_an_object() -> None:
    assert json_object(b'{"a": 1}') == {"a": 1}
    for bad in (b"[1]", b"3", b"not json", b"\xff", b"[" * 100_000 + b"]" * 100_000):
        assert json_object(bad) is None


def test_watch_board_counts_a_nested_flood_as_unreadable() -> None:
    board = SiteBoard("dc", "s1")
    assert not board.receive("dc/s1/r1/summary", b"[" * 100_000, 0.0)  # raised RecursionError
    assert board.ignored == 1


# ---- the readers -------------------------------------------------------------------------------

def _summary(it: Any, cooling: Any = 200.0) -> dict[str, Any]:
    return {"power_w": {"it": it, "cooling": cooling, "it_expected": it, "cooling_expected": cooling}}


@pytest.mark.parametrize("it", NOT_NUMBERS)
def test_watch_board_shows_unknown_power(it: Any) -> None:
    board = SiteBoard("dc", "s1")
    body = json.dumps(_summary(it, 200.0), default=str).encode()  # NaN/inf as JSON NaN/Infinity
    assert board.receive("dc/s1/r1/summary", body, 0.0)
    row = board.rows(0.0)[0]
    assert (row.facility_kw, row.expected_kw, row.deviation_pct) == (None, None, None)


def test_watch_board_sums_numbers() -> None:
    board = SiteBoard("dc", "s1")
    board.receive("dc/s1/r1/summary", json.dumps(_summary(1000, 500.0)).encode(), 0.0)
    assert board.rows(0.0)[0].facility_kw == 1.5


@pytest.mark.parametrize("it", NOT_NUMBERS)
def test_sparkplug_sends_null_for_unknown(it: Any) -> None:
    metrics = summary_metrics(_summary(it))
    assert metrics["power/it_w"][1] is None and metrics["power/facility_w"][1] is None
    assert metrics["power/cooling_w"][1] == 200.0


def test_sparkplug_nan_is_not_a_change_every_summary() -> None:
    """NaN != NaN: a NaN value would have been resent as NDATA with every summary."""
    node = EdgeNode("g", "r1")
    birth = node.update(_summary(math.nan), 1)
    assert birth is not None and birth[0] == node.topic("NBIRTH")
    assert node.update(_summary(math.nan), 2) is None


def _gauges(fs: FamilySet) -> dict[str, list[float]]:
    return {m.name: [s.value for s in m.samples] for m in fs}


@pytest.mark.parametrize("value", NOT_NUMBERS)
def test_metric_families_leave_unknown_out(value: Any) -> None:
    fs = FamilySet({"rack": "r1"})
    fs.gauge("x_watts", "doc", value)
    fs.counter("y_joules", "doc", value)
    assert _gauges(fs) == {}


def test_metric_families_export_numbers_and_flags() -> None:
    fs = FamilySet({"rack": "r1"})
    fs.gauge("x_watts", "doc", 7)
    fs.flag("up", "doc", True)
    fs.flag("down", "doc", False)
    assert _gauges(fs) == {"rackwatt_x_watts": [7.0], "rackwatt_up": [1.0], "rackwatt_down": [0.0]}


def test_job_ledger_reads_only_finite_energy() -> None:
    summary = {"energy_kwh": {"a": {"it": 1.5, "cooling": True}, "b": {"it": math.inf, "cooling": -1},
                              "c": "x", "d": {"it": 2, "cooling": math.nan}}}
    assert stage_energy_kwh(summary) == {("a", "it"): 1.5, ("d", "it"): 2.0}


def test_report_job_total_is_unknown_when_a_stage_lacks_a_part() -> None:
    stages = {"train": {"it": 1.0, "cooling": 0.5, "facility": 1.5, "gpu": True},
              "eval": {"it": 2.0, "cooling": math.nan, "facility": 2.0, "gpu": 1}}
    job_total = job_rows({"job_energy_kwh": {"j1": stages}})[0]
    assert job_total == {"job": "j1", "stage": None, "it": 3.0, "cooling": None, "facility": 3.5, "gpu": None}


def test_report_drift_periods_skip_events_without_a_time() -> None:
    events = [{"ts": True, "cause": "a", "state": "onset"}, {"ts": math.nan, "cause": "b", "state": "onset"},
              {"ts": 100, "cause": "c", "state": "onset", "detail": {"since": math.inf}}]
    assert [(p["cause"], p["start"]) for p in drift_periods(events, 200.0)] == [("c", 100.0)]


def test_report_skipped_input_counts_only_numbers() -> None:
    summary = {"hygiene": {"gaps": math.inf, "bad_ts_rows": 3.0, "out_of_order_rows": True}}
    assert _skipped_input(summary) == {"out_of_order_rows": 0, "bad_ts_rows": 3, "gaps": 0}  # inf raised


@pytest.mark.parametrize(("pending", "shown"), [(3, 3), (True, None), (math.inf, None), ("3", None)])
def test_watch_board_spool_pending_is_a_number(pending: Any, shown: int | None) -> None:
    board = SiteBoard("dc", "s1")
    body = json.dumps({"state": "online", "spool": {"pending": pending}}).encode()
    board.receive("dc/s1/r1/status", body, 0.0)
    assert board.rows(0.0)[0].spool_pending == shown


def test_accept_refuses_a_nested_flood_as_not_json() -> None:
    with pytest.raises(ValueError, match="not JSON"):  # was a RecursionError (a logged traceback)
        parse_accept(b"[" * 1024)
