"""``rackwatt record --config FILE --out trace.csv [--duration S]``: live frames as a replayable trace.

``rackwatt run``'s poll loop with the engine and MQTT off; each tick that sampled something becomes a
row (docs/spec/trace-format.md) for ``rackwatt replay``. A CSV cannot grow columns, so the header is
fixed after a warm-up of the slowest device's interval; a signal first seen later is left out, warned once.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import math
from pathlib import Path

from agent.config.cli_args import add_config_arguments, load_or_report
from agent.config.model import Config
from agent.live.logsetup import setup_logging
from agent.live.loop import LiveAgent
from agent.live.run_cmd import report_to_log, serve, skip_unused_imports
from agent.trace.model import TraceChunk, TraceMeta
from agent.trace.writer import TraceWriter

log = logging.getLogger("rackwatt.record")


def _sampled(chunk: TraceChunk) -> list[str]:
    """The signals (not ``work_rate``) this one-row chunk has a value for."""
    return [name for name, v in chunk.numeric.items() if name != "work_rate" and math.isfinite(float(v[0]))]


class TraceRecorder:
    """Frame sink: buffers the warm-up frames, then streams rows to a ``TraceWriter``."""

    def __init__(self, path: Path, meta: TraceMeta, warmup_s: float) -> None:
        self.path = path
        self.meta = meta
        self.warmup_s = warmup_s
        self._buffer: list[tuple[TraceChunk, list[str]]] = []  # (chunk, its sampled columns)
        self._writer: TraceWriter | None = None
        self._first_ts: float | None = None
        self._ignored: set[str] = set()
        self.rows = 0

    def __call__(self, chunk: TraceChunk) -> None:
        sampled = _sampled(chunk)
        if not sampled and not chunk.stage[0]:
            return  # nothing sampled at this tick
        if self._writer is None:
            self._buffer.append((chunk, sampled))
            self._first_ts = self._first_ts if self._first_ts is not None else float(chunk.ts[0])
            if float(chunk.ts[0]) - self._first_ts >= self.warmup_s:
                self._open()
            return
        self._write(chunk, sampled)

    def _open(self) -> None:
        names = {name for _, sampled in self._buffer for name in sampled}
        columns = ["ts", "stage", "job", "work_rate", *sorted(names)]
        self._writer = TraceWriter(self.path, self.meta, columns)
        for chunk, sampled in self._buffer:
            self._write(chunk, sampled)
        self._buffer.clear()
        log.info("record: writing %s with %d columns", self.path, len(columns))

    def _write(self, chunk: TraceChunk, sampled: list[str]) -> None:
        assert self._writer is not None
        for name in sorted(set(sampled) - set(self._writer.columns) - self._ignored):
            self._ignored.add(name)
            log.warning("record: %s appeared after the header was written; it is not recorded", name)
        self._writer.write(chunk)
        self.rows += 1

    def close(self) -> None:
        if self._writer is None and self._buffer:
            self._open()
        if self._writer is not None:
            self._writer.close()


def configure(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--out", type=Path, required=True, metavar="TRACE.csv", help="the trace to write")
    parser.add_argument("--duration", type=float, default=None, metavar="S",
                        help="stop after S seconds (default: until Ctrl-C or SIGTERM)")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")


def trace_meta(config: Config) -> TraceMeta:
    return TraceMeta(rack=config.agent.rack, site=config.agent.site,
                     crac_shares={c.id: c.share for c in config.cracs}, interval_s=config.agent.tick_s)


async def _record(agent: LiveAgent, duration_s: float | None) -> int:
    if duration_s is not None:
        asyncio.get_running_loop().call_later(duration_s, agent.request_stop)
    return await serve(agent)


def run(args: argparse.Namespace) -> int:
    skip_unused_imports()
    setup_logging(args.verbose)
    config = load_or_report(args.config, args, report_to_log)
    if config is None:
        return 2
    config = dataclasses.replace(config, mqtt=dataclasses.replace(config.mqtt, enabled=False),
                                 stages=dataclasses.replace(config.stages, mqtt_hints=False))
    intervals = [p.interval_s for p in config.pdus] + [c.interval_s for c in config.cracs]
    if config.nvml.enabled:
        intervals.append(config.nvml.interval_s)
    warmup_s = max([config.agent.tick_s, *intervals]) + config.agent.tick_s
    recorder = TraceRecorder(args.out, trace_meta(config), warmup_s)
    agent = LiveAgent(config, config_path=args.config, engine=False, frame_sinks=[recorder])
    try:
        code = asyncio.run(_record(agent, args.duration))
    finally:
        recorder.close()
    log.info("record: %d row(s) written to %s", recorder.rows, args.out)
    return code
