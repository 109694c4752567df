"""``rackwatt replay TRACE --report OUT.jsonl``: the live engine, run over a recorded trace.

Streams the trace chunk by chunk through the same ``Engine.process`` the live agent calls every
tick and writes the report records as JSON Lines (docs/spec/report-format.md) as they come, with
``output_file``'s rules. Skipped rows are counted and their first file lines named on stderr
(``--strict`` refuses such a trace); progress goes to stderr only on a terminal.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, TextIO

from agent.engine.engine import GAP_WINDOWS, Engine
from agent.engine.frames import rack_info
from agent.engine.output_file import open_text_output, write_output, writes_in_place
from agent.engine.row_times import MAX_AHEAD_S, TS_FLOOR_S, RowTimes
from agent.engine.state import StateError, read_or_quarantine


def configure(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("trace", type=Path, metavar="TRACE", help="trace CSV (docs/spec/trace-format.md)")
    add("--report", type=Path, required=True, metavar="OUT.jsonl",
        help="report to write ('-': standard output)")
    add("--config", type=Path, metavar="F", help="agent TOML; overrides the trace metadata")
    add("--window", type=float, metavar="S", help="window length, seconds (default 900)")
    add("--state-in", type=Path, metavar="F", help="start from this engine state file")
    add("--state-out", type=Path, metavar="F", help="write the engine state here at the end")
    add("--html", type=Path, metavar="OUT.html", help="also render the HTML report")
    add("--strict", action="store_true",
        help="refuse a trace whose ts does not strictly increase (default: skip those rows)")


def clean_json(obj: Any) -> Any:
    """Non-finite floats → null (JSON has no NaN); numpy scalars → Python numbers."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): clean_json(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_json(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):
        return clean_json(obj.item())
    return obj


class Progress:
    """Replay progress on stderr: on a terminal, a line redrawn in place with percent and ETA;
    otherwise (a log, a pipe) nothing until one summary line at the end, so logs stay short."""

    REDRAW_S = 0.2  # redraw at most 5×/s: fast enough to look live, cheap next to the replay

    def __init__(self, stream: TextIO, total_bytes: int) -> None:
        self.stream = stream
        self.enabled = stream.isatty()
        self.total = max(total_bytes, 1)
        self.started = time.monotonic()
        self.last = 0.0
        self.rows = 0
        self.last_ts = math.nan

    def update(self, rows: int, ts: float, pos: int) -> None:
        """``pos``: bytes of the trace read so far (``TraceReader.position``)."""
        self.rows = rows
        if math.isfinite(ts):
            self.last_ts = ts
        now = time.monotonic()
        if not self.enabled or now - self.last < self.REDRAW_S:
            return
        self.last = now
        elapsed = now - self.started
        done = min(pos / self.total, 1.0)
        eta = f"  ETA {_duration(elapsed * (1.0 - done) / done)}" if done else ""
        self.stream.write(f"\r{100.0 * done:5.1f} %  {rows:,} rows  {_utc(ts)}  {_duration(elapsed)}{eta}   ")
        self.stream.flush()

    def done(self, finished: bool = True) -> None:
        elapsed = time.monotonic() - self.started
        if self.enabled:
            self.stream.write("\n")
        elif finished:
            until = f" up to {_utc(self.last_ts)}" if math.isfinite(self.last_ts) else ""
            self.stream.write(f"rackwatt replay: {self.rows:,} rows{until} in {_duration(elapsed)}\n")
        self.stream.flush()


def _utc(ts: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(ts)) if math.isfinite(ts) else ""


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes // 60}:{minutes % 60:02d}:{secs:02d}" if minutes >= 60 else f"{minutes}:{secs:02d}"


def _engine_config(args: argparse.Namespace) -> tuple[Any, Any]:
    config = None
    if args.config is not None:
        from agent.config.loader import load_config

        config = load_config(args.config)
    engine_cfg = config.engine if config is not None else None
    if args.window is not None:
        if not args.window > 0:
            raise ValueError(f"--window must be > 0 seconds, got {args.window:g}")
        from agent.config.model import EngineSection

        engine_cfg = dataclasses.replace(engine_cfg or EngineSection(), window_s=float(args.window))
    return config, engine_cfg


def _build_engine(args: argparse.Namespace, meta: Any, config: Any, engine_cfg: Any) -> Engine:
    rack = rack_info(meta, config, engine_cfg)
    names = {
        "site": config.agent.site if config else meta.site,
        "rack_name": config.agent.rack if config else meta.rack,
    }
    if config is not None:
        names["topic_root"] = config.mqtt.topic_root
    if args.state_in is not None:
        blob, problem = read_or_quarantine(args.state_in)
        if problem:
            print(f"rackwatt replay: {problem}", file=sys.stderr)
        if blob is not None:
            try:
                return Engine.load_state(blob, engine_cfg, rack, **names)
            except StateError as exc:
                print(f"rackwatt replay: state file {args.state_in}: {exc}; starting fresh", file=sys.stderr)
    return Engine(engine_cfg, rack, **names)


def run(args: argparse.Namespace) -> int:
    from agent.engine.batch_heap import keep_freed_memory
    from agent.engine.signals import engine_never_reads
    from agent.trace.reader import open_trace  # deferred: ``rackwatt --help`` stays fast

    keep_freed_memory()

    if args.html is not None and writes_in_place(args.report):
        print(f"rackwatt replay: --html reads the report back: --report must be a file, not {args.report}",
              file=sys.stderr)
        return 2
    try:
        config, engine_cfg = _engine_config(args)
        reader = open_trace(args.trace, strict=args.strict, skip=engine_never_reads)
        engine = _build_engine(args, reader.meta, config, engine_cfg)
    except (OSError, ValueError) as exc:
        print(f"rackwatt replay: {exc}", file=sys.stderr)
        return 2
    try:
        size = args.trace.stat().st_size
    except OSError:
        size = 0
    progress = Progress(sys.stderr, size)
    rows = 0
    try:
        with open_text_output(args.report) as out:  # a regular file appears only when complete
            for chunk in reader:
                rows += len(chunk)
                _write(out, engine.process(chunk))
                progress.update(rows, float(chunk.ts[-1]) if len(chunk) else math.nan, reader.position)
            _write(out, engine.finish())
    except (OSError, ValueError) as exc:
        progress.done(finished=False)
        print(f"rackwatt replay: {exc}", file=sys.stderr)
        return 1
    progress.done()
    for line in skipped_rows_lines(engine.rows.times, engine.rows.gaps):
        print(f"rackwatt replay: {line}", file=sys.stderr)
    if args.state_out is not None:
        try:
            write_output(args.state_out, engine.save_state())
        except OSError as exc:
            print(f"rackwatt replay: writing state {args.state_out}: {exc.strerror or exc}", file=sys.stderr)
            return 1
    if args.html is not None:
        from agent.report import render_html  # deferred: only --html needs it

        try:
            render_html(args.report, args.trace, args.html)
        except (OSError, ValueError) as exc:
            print(f"rackwatt replay: --html: {exc}", file=sys.stderr)
            return 1
    return 0


def skipped_rows_lines(times: RowTimes, gaps: int) -> list[str]:
    """What the operator is told about rows the engine did not use (one line per kind)."""

    def where(lines: list[int], count: int) -> str:
        if not lines:
            return ""
        more = ", …" if count > len(lines) else ""
        return f" (line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}{more})"

    out = []
    if times.out_of_order_rows:
        out.append(
            f"{times.out_of_order_rows} rows were not later than the row before them (duplicated or out of "
            f"order, or before the end of --state-in) and were skipped"
            f"{where(times.out_of_order_lines, times.out_of_order_rows)}; --strict refuses such a trace"
        )
    if times.bad_ts_rows:
        out.append(
            f"{times.bad_ts_rows} rows had a ts that is not a time a clock that was set can show (before "
            f"{time.strftime('%Y-%m-%d', time.gmtime(TS_FLOOR_S))} or over {MAX_AHEAD_S / 3600:g} h ahead) "
            f"and were skipped{where(times.bad_ts_lines, times.bad_ts_rows)}"
        )
    if gaps:
        out.append(
            f"{gaps} gap(s) of over {GAP_WINDOWS} windows without rows: each closed the open window and "
            "started again after it (a 'gap' line in the report)"
        )
    return out


def _write(out: TextIO, records: list[dict[str, Any]]) -> None:
    for rec in records:
        out.write(json.dumps(clean_json(rec), separators=(",", ":"), allow_nan=False))
        out.write("\n")

