"""The report's readability fixes (issue 20 item 6): each one checked where it could regress."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from agent.report import render_html
from agent.report.data import TraceSeries, load_report
from agent.report.page import build_payload, drift_periods, robust_range
from agent.report.playbook import markdown_to_html, playbook_text, sections_by_heading

from .test_report_page import synthetic_report

REPO = Path(__file__).resolve().parents[2]


def _payload(page: str) -> dict:  # type: ignore[type-arg]
    marker = '<script id="rackwatt-data" type="application/json">'
    return json.loads(page.split(marker)[1].split("</script>")[0])


def _rewrite(path: Path, edit) -> None:  # type: ignore[no-untyped-def]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(edit(o)) + "\n" for o in lines))


def test_title_is_site_and_rack_not_the_file_name(tmp_path: Path) -> None:
    report = tmp_path / "run-0042.jsonl"
    synthetic_report(report, hours=4)
    page = render_html(report, None, tmp_path / "r.html").read_text()
    assert "<title>rackwatt report: s / r</title>" in page  # from the summary topic
    assert "run-0042" not in page

    def named(obj: dict) -> dict:  # type: ignore[type-arg]
        if obj["type"] == "summary":
            obj["payload"].update(site="hall-b", rack="r07")
        return obj

    _rewrite(report, named)
    page = render_html(report, None, tmp_path / "r.html").read_text()
    assert "<title>rackwatt report: hall-b / r07</title>" in page  # the payload's own fields first


def _step_with_glitch(n: int = 3000) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    x = 1_717_200_000.0 + 60.0 * np.arange(n)
    power = 20_000.0 + rng.normal(0, 150, n)
    power[n // 2 :] *= 1.06  # the fault: a 6 % step
    power[n // 4] = 50_000.0  # one wrong sample
    return x, power


def test_one_glitch_is_clipped_and_marked_so_a_6_percent_step_stays_visible() -> None:
    x, power = _step_with_glitch()
    axis = robust_range([power], [x])
    assert axis is not None
    assert axis["clipped_above"] == [float(x[len(x) // 4])] and axis["peak"] == 50_000.0
    span = axis["max"] - axis["min"]
    # the 1.2 kW step spans a good part of the axis (with min-max scaling it would be ~4 %)
    assert 0.06 * 20_000 / span > 0.25, axis
    assert axis["min"] <= power[: len(x) // 2].min() and axis["max"] >= np.delete(power, len(x) // 4).max()


def test_the_power_axis_uses_the_trace_envelope(tmp_path: Path) -> None:
    synthetic_report(tmp_path / "r.jsonl", hours=30)
    data = load_report(tmp_path / "r.jsonl", buckets=3000)
    _, power = _step_with_glitch(3000)
    data.trace = TraceSeries(power - 500, power + 500, power, {"forward_backward": 1.0},
                             np.zeros(len(data.windows["start"])), None)
    axis = build_payload(data)["power_axis"]
    assert axis["max"] < 30_000 and axis["peak"] == pytest.approx(50_500)
    assert len(axis["clipped_above"]) == 1


def test_a_drift_is_a_period_from_its_estimated_start_to_its_clearing() -> None:
    events = [
        {"ts": 5000.0, "state": "onset", "cause": "cooling", "stage": "eval", "detail": {"since": 4100.0}},
        {"ts": 6000.0, "state": "onset", "cause": "power_chain", "detail": {"since": 5500.0}},
        {"ts": 9000.0, "state": "cleared", "cause": "cooling",
         "detail": {"since": 4100.0, "onset_ts": 5000.0}},
        {"ts": 9500.0, "state": "onset", "cause": "thermal", "detail": {}},  # no estimate: from the onset
    ]
    periods = drift_periods(events, end=12_000.0)
    by_cause = {p["cause"]: p for p in periods}
    assert (by_cause["cooling"]["start"], by_cause["cooling"]["end"], by_cause["cooling"]["active"]) == (
        4100.0, 9000.0, False)
    assert by_cause["cooling"]["confirmed"] == 5000.0
    assert (by_cause["power_chain"]["start"], by_cause["power_chain"]["end"]) == (5500.0, 12_000.0)
    assert by_cause["power_chain"]["active"] is True
    assert by_cause["thermal"]["start"] == 9500.0


def test_the_packaged_playbook_is_the_documented_one() -> None:
    assert playbook_text() == (REPO / "docs" / "drift-playbook.md").read_text(encoding="utf-8"), (
        "agent/report/drift-playbook.md must be a copy of docs/drift-playbook.md: cp docs/drift-playbook.md "
        "agent/report/drift-playbook.md"
    )
    causes = {"cooling", "power_chain", "thermal", "gpu_hardware", "workload", "unknown"}
    assert causes <= set(sections_by_heading(playbook_text()))


def test_playbook_markdown_becomes_escaped_html_without_links() -> None:
    html = markdown_to_html(
        "**Evidence**: a <b>raw</b> tag and `code`, see [job changes](#how-it-works).\n\n"
        "Check first:\n1. one\n   continued\n2. two\n"
    )
    assert "<b>Evidence</b>" in html and "&lt;b&gt;raw&lt;/b&gt;" in html and "<code>code</code>" in html
    assert "href" not in html and "see job changes." in html
    assert "<ol><li>one continued</li><li>two</li></ol>" in html


def test_the_page_embeds_the_playbook_and_links_only_inside_itself(tmp_path: Path) -> None:
    synthetic_report(tmp_path / "r.jsonl", hours=4)
    page = render_html(tmp_path / "r.jsonl", None, tmp_path / "r.html").read_text()
    payload = _payload(page)
    assert set(payload["playbook"]) == {"cooling"}  # the causes of this report's events
    assert "Coil and filter condition" in payload["playbook"]["cooling"]
    assert "drift-playbook.md" not in page.split("rackwatt-data")[1]  # no link to a file not there
    assert "idle" in payload["definitions"]["non_compute"]


@pytest.mark.slow
def test_rendered_page_utc_axes_grouped_legends_labels_and_anchors(
    tmp_path: Path, chromium, monkeypatch: pytest.MonkeyPatch  # type: ignore[no-untyped-def]
) -> None:
    monkeypatch.setenv("TZ", "America/New_York")  # a reader far from UTC still sees UTC
    synthetic_report(tmp_path / "r.jsonl", hours=30)
    rendered = chromium.dump_dom(render_html(tmp_path / "r.jsonl", None, tmp_path / "r.html"))
    dom = rendered.dom
    assert 'data-charts="6"' in dom, rendered.log[-3000:]
    labels = dict(re.findall(r'aria-label="([^";]+); ([^"]*)"', dom))
    power = labels["Facility power: measured vs the baseline's expectation"]
    assert "x: time (UTC)" in power and "y: facility power (kW)" in power
    ticks = power.split("x ticks: ")[1].split(", ")
    assert all(re.fullmatch(r"\d\d:\d\d( \d\d-\d\d)?", t) for t in ticks), ticks  # 24-hour, no am/pm
    assert "00:00 11-25" in ticks, ticks  # the synthetic run crosses UTC midnight on 2025-11-25
    hist = labels["Window error distribution"]
    assert "x: window error (%)" in hist and "y: windows (count)" in hist
    assert "America/New_York" in dom and dom.count('id="zone"') == 1
    legends = re.findall(r'<table class="u-legend.*?</table>', dom, flags=re.S)
    assert all(legend.count('class="u-series') <= 5 for legend in legends)
    assert sum(legend.count('class="u-series') for legend in legends) <= 13  # was 18 + 5 + 3 + ...
    for target in re.findall(r'href="([^"]*)"', dom):
        assert target.startswith("#") and f'id="{target[1:]}"' in dom, target
    assert 'id="playbook-cooling"' in dom and "Check first" in dom
    assert "<dt>non-compute energy</dt>" in dom


def test_deviation_shows_the_step_unclipped(tmp_path: Path) -> None:
    synthetic_report(tmp_path / "r.jsonl", hours=10)

    def step(obj: dict) -> dict:  # type: ignore[type-arg]
        late = obj["type"] == "window" and obj["start"] > 1_764_000_000 + 5 * 3600
        if late and obj["predicted_kwh"] is not None:
            obj["measured_kwh"] = obj["predicted_kwh"] * 1.06
        return obj

    _rewrite(tmp_path / "r.jsonl", step)
    payload = build_payload(load_report(tmp_path / "r.jsonl"))
    deviation = [v for v in payload["windows"]["deviation_pct"] if v is not None]
    assert max(deviation) == pytest.approx(6.0, abs=1e-3)
    assert payload["deviation_axis"]["max"] > 6.0 and payload["deviation_axis"]["min"] <= -1.0


def test_stage_labels_beyond_the_table_are_pooled_as_other(tmp_path: Path) -> None:
    """A trace with more distinct stage labels than the page has colours: the extra ones are
    shown as "other" (the page was refused with an index error once the table was full)."""
    report = tmp_path / "r.jsonl"
    synthetic_report(report, hours=4)
    lines = [json.loads(line) for line in report.read_text().splitlines()]
    start = min(float(o["start"]) for o in lines if o["type"] == "segment")
    extra = [{"type": "segment", "stage": f"custom_{i:02d}", "start": start + 60.0 * i,
              "end": start + 60.0 * i + 30.0, "source": "label"} for i in range(20)]
    report.write_text("".join(json.dumps(o) + "\n" for o in [*lines, *extra]))
    data = load_report(report, buckets=300)
    assert len(data.stages) == len(set(data.stages)) <= 14
    assert data.stages[-1] == "other" and "custom_00" in data.stages and "custom_19" not in data.stages
    render_html(report, None, tmp_path / "r.html")
