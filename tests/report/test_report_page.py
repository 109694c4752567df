"""The HTML report: self-contained, renders in headless Chromium without errors or network."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from agent.report import ReportInputError, render_html
from agent.report.data import load_report

STAGES = ["idle", "data_load", "forward_backward", "grad_sync", "checkpoint", "eval"]


def synthetic_report(
    path: Path, hours: float = 30.0, seed: int = 1, inferred_after_h: float | None = 20.0
) -> None:
    """A report with the spec's line types: segments tiling the span, windows, summaries, events."""
    rng = np.random.default_rng(seed)
    t0 = 1_764_000_000.0
    end = t0 + hours * 3600
    lines: list[dict[str, object]] = []
    t = t0
    while t < end:
        stage = STAGES[int(rng.integers(0, len(STAGES)))]
        duration = float(rng.uniform(5, 900))
        source = "inferred" if inferred_after_h is not None and t > t0 + inferred_after_h * 3600 else "hint"
        lines.append(
            {"type": "segment", "start": t, "end": min(end, t + duration), "stage": stage, "source": source}
        )
        t += duration
    for k in range(int(hours * 4)):
        start = t0 + k * 900
        measured = 3.0 + rng.normal(0, 0.2)
        predicted = None if k < 8 else measured * (1 + rng.normal(0, 0.01))
        lines.append(
            {
                "type": "window",
                "start": start,
                "end": start + 900,
                "measured_kwh": measured,
                "predicted_kwh": predicted,
                "it_measured_kwh": measured * 0.8,
                "it_predicted_kwh": None if predicted is None else predicted * 0.8,
                "cooling_measured_kwh": measured * 0.2,
                "cooling_predicted_kwh": None if predicted is None else predicted * 0.2,
                "coverage": 0.99,
            }
        )
        lines.append(
            {
                "type": "summary",
                "ts": start + 900,
                "topic": "rackwatt/v1/s/r/summary",
                "payload": {
                    "v": 1,
                    "seq": k,
                    "stages": {
                        s: {
                            "level_w": 8000 + 1000 * i + rng.normal(0, 50),
                            "band_w": [7800 + 1000 * i, 8300 + 1000 * i],
                            "lag_s": 300,
                            "facility_gpu_ratio": 1.3,
                        }
                        for i, s in enumerate(STAGES)
                    },
                },
            }
        )
    lines.append(
        {
            "type": "event",
            "ts": t0 + 22 * 3600,
            "kind": "drift",
            "state": "onset",
            "cause": "cooling",
            "stage": "forward_backward",
            "deviation_pct": 6.1,
            "detail": {
                "explanation": "Cooling uses 6 % more power for the same heat </script>",
                "playbook": "docs/drift-playbook.md#cooling",
            },
        }
    )
    lines.sort(key=lambda o: float(o.get("start", o.get("ts", 0))))  # type: ignore[arg-type]
    path.write_text("".join(json.dumps(o) + "\n" for o in lines))


def test_page_is_self_contained(tmp_path: Path) -> None:
    synthetic_report(tmp_path / "r.jsonl")
    page = render_html(tmp_path / "r.jsonl", None, tmp_path / "r.html").read_text()
    # No external resource of any kind: every src is inline, every href an anchor in the page.
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "@import" not in page and "fetch(" not in page.split("uPlot")[-1]
    assert all(h.startswith("#") for h in re.findall(r'href="([^"]*)"', page.split("rackwatt-data")[0]))
    assert page.count("<script") == 3  # uPlot, the data, the page script
    # A hostile explanation cannot break out of the data script element.
    assert "</script> </script>" not in page


def test_bad_report_line_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"type":"window","start":0,"end":900}\nnot json\n')
    with pytest.raises(ReportInputError, match=r"bad\.jsonl line 2"):
        load_report(path)


def test_timeline_buckets_keep_time_and_sources(tmp_path: Path) -> None:
    synthetic_report(tmp_path / "r.jsonl", hours=30, inferred_after_h=20)
    data = load_report(tmp_path / "r.jsonl", buckets=300)
    covered_s = data.stage_time_s.sum()
    assert covered_s == pytest.approx(30 * 3600, rel=1e-6)
    assert data.inferred_time_s.sum() == pytest.approx(10 * 3600, rel=0.05)


@pytest.mark.slow
def test_page_renders_in_chromium_without_errors(tmp_path: Path, chromium) -> None:  # type: ignore[no-untyped-def]
    synthetic_report(tmp_path / "r.jsonl")
    page = render_html(tmp_path / "r.jsonl", None, tmp_path / "r.html")
    rendered = chromium.dump_dom(page)
    assert 'data-charts="6"' in rendered.dom, rendered.log[-3000:]
    assert rendered.dom.count("<canvas") >= 5
    console_errors = [
        line
        for line in rendered.log.splitlines()
        if "CONSOLE" in line and ("Uncaught" in line or "Error" in line)
    ]
    assert not console_errors, console_errors
    assert "net::ERR" not in rendered.log, "the page tried to fetch something"
    shot = chromium.screenshot(page, tmp_path / "shot.png")
    assert (tmp_path / "shot.png").stat().st_size > 20_000, shot.log[-2000:]


@pytest.mark.slow
def test_replay_html_shortcut_on_a_twin_trace(tmp_path: Path, chromium) -> None:  # type: ignore[no-untyped-def]
    """sim → replay --html: the real report renders, with the static-PUE reference from the trace."""
    import subprocess
    import sys

    def rackwatt(*args: str) -> None:
        result = subprocess.run(
            [sys.executable, "-m", "agent", *args], capture_output=True, text=True, timeout=300
        )
        assert result.returncode == 0, result.stderr[-2000:]

    rackwatt(
        "sim", "--scenario", "steady", "--days", "0.4", "--seed", "5", "--gpus", "8", "--out", str(tmp_path)
    )
    page = tmp_path / "r.html"
    rackwatt(
        "replay", str(tmp_path / "trace.csv"), "--report", str(tmp_path / "r.jsonl"), "--html", str(page)
    )
    text = page.read_text()
    payload = json.loads(
        text.split('<script id="rackwatt-data" type="application/json">')[1].split("</script>")[0]
    )
    assert payload["errors"]["static_ratio"] is not None and payload["errors"]["static_ratio"] > 1.0
    assert payload["envelope"] is not None
    envelope_max = [v for v in payload["envelope"]["max"] if v is not None]
    envelope_min = [v for v in payload["envelope"]["min"] if v is not None]
    assert envelope_max and min(envelope_max) >= max(0.0, min(envelope_min))
    rendered = chromium.dump_dom(page)
    assert 'data-charts="6"' in rendered.dom, rendered.log[-3000:]


@pytest.mark.slow
def test_a_report_without_gpu_telemetry_says_which_detections_were_off(
    tmp_path: Path, chromium  # type: ignore[no-untyped-def]
) -> None:
    synthetic_report(tmp_path / "r.jsonl", hours=10)
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    off = "off: no GPU telemetry (configure [[dcgm]] nodes or node agents)"
    for obj in lines:
        if obj["type"] == "summary":
            obj["payload"]["capabilities"] = {"gpu_telemetry": False, "prediction": "stages",
                                              "detections": {"cooling": "on", "power_chain": off,
                                                             "gpu_hardware": off}}
        if obj["type"] == "event":
            obj["state"] = "cleared"  # no onset: the page must not say plainly "no drift detected"
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(o) + "\n" for o in lines))
    data = load_report(tmp_path / "r.jsonl")
    assert set(data.detections_off) == {"power_chain", "gpu_hardware"}
    assert data.detections_off["power_chain"][1] == pytest.approx(1.0)
    rendered = chromium.dump_dom(render_html(tmp_path / "r.jsonl", None, tmp_path / "r.html"))
    assert "no drift detected by the detections that ran" in rendered.dom
    assert "power_chain (no GPU telemetry" in rendered.dom
