"""The visual report: one self-contained, offline HTML page of a replay report (and its trace)."""

from __future__ import annotations

from pathlib import Path

from agent.report.data import ReportInputError, load_report, load_trace_series
from agent.report.page import page_title, render_page

__all__ = ["ReportInputError", "render_html"]


def render_html(report_path: Path, trace_path: Path | None, out_path: Path, title: str | None = None) -> Path:
    """Render REPORT.jsonl (+ TRACE.csv for the envelope and static-PUE reference) to OUT.html."""
    data = load_report(Path(report_path))
    if trace_path is not None:
        data.trace = load_trace_series(Path(trace_path), data)
    page = render_page(data, title or page_title(data, Path(report_path).name))
    out_path = Path(out_path)
    tmp = out_path.with_name(out_path.name + ".tmp")
    tmp.write_text(page, encoding="utf-8")
    tmp.replace(out_path)
    return out_path
