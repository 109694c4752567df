"""The visual report: one self-contained, offline HTML page of a replay report (and its trace)."""

from __future__ import annotations

from pathlib import Path

from agent.engine.output_file import write_output
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
    write_output(out_path, page.encode("utf-8"))  # atomic onto a file; a device or FIFO is written directly
    return out_path
