"""The report's "Energy by job" table, from the last summary's ``job_energy_kwh``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.report import render_html
from agent.report.page import job_rows
from tests.report.test_report_page import synthetic_report

JOBS = {
    "llama-r3": {"forward_backward": {"it": 50.0, "cooling": 15.0, "facility": 65.0, "gpu": 40.0},
                 "checkpoint": {"it": 4.0, "cooling": 1.25, "facility": 5.25, "gpu": 1.0}},
    "-": {"idle": {"it": 2.0, "cooling": None, "facility": None, "gpu": 0.5}},
}


def _with_jobs(path: Path) -> None:
    synthetic_report(path, hours=6)
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    last = max((x for x in lines if x["type"] == "summary"), key=lambda x: x["ts"])
    last["payload"]["job_energy_kwh"] = JOBS
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_rows_give_each_job_its_total_then_its_stages() -> None:
    rows = job_rows({"job_energy_kwh": JOBS})
    assert [(r["job"], r["stage"]) for r in rows] == [
        ("no job reported", None), ("no job reported", "idle"),
        ("llama-r3", None), ("llama-r3", "checkpoint"), ("llama-r3", "forward_backward"),
    ]
    total = rows[2]
    assert total["facility"] == pytest.approx(70.25) and total["it"] == pytest.approx(54.0)
    assert rows[0]["cooling"] is None  # unknown in one stage: the total is unknown, never 0
    assert job_rows({}) == [] and job_rows({"job_energy_kwh": "bad"}) == []


@pytest.mark.slow
def test_the_page_shows_energy_by_job(tmp_path: Path, chromium) -> None:  # type: ignore[no-untyped-def]
    _with_jobs(tmp_path / "r.jsonl")
    page = render_html(tmp_path / "r.jsonl", None, tmp_path / "r.html")
    dom = chromium.dump_dom(page).dom
    assert "Energy by job" in dom
    section = dom.split("Energy by job", 1)[1]
    assert "llama-r3" in section and "70.3" in section and "no job reported" in section
