"""How the demo feeds the real engine: the optional pre-warm (live batching is ``LiveAgent``'s).

The drift detector calibrates its thresholds on hours of healthy data, so with ``--fault`` (or
``--warmup H``) the scenario's first H simulated hours are replayed through the same engine in
seconds (``simulate`` → ``Engine.process``, the call replay makes), then the run goes live.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from agent.live.engine_link import EngineLink
from agent.sim import Scenario, simulate
from agent.trace.model import TraceChunk


class IntervalThinner:
    """Keeps one sample per device interval, as the live poller would, so replay looks like live.

    The twin's trace samples NVML every second and the PDUs every 5 s; the demo polls coarser
    (``Intervals``). The drift detector calibrates its thresholds on the noise it sees, so the
    replayed warm-up must carry the same sampling as the live run that follows it: per column, the
    first sample in each interval window is kept, the others become NaN (not sampled).
    """

    def __init__(self, start_ts: float, interval_by_prefix: dict[str, float]) -> None:
        self.start_ts = start_ts
        self.interval_by_prefix = interval_by_prefix
        self._last_window: dict[str, float] = {}

    def thin(self, chunk: TraceChunk) -> TraceChunk:
        rel = chunk.ts - self.start_ts
        numeric = dict(chunk.numeric)
        for name, values in chunk.numeric.items():
            interval = self.interval_by_prefix.get(name.split(".", 1)[0])
            valid = np.flatnonzero(~np.isnan(values))
            if interval is None or not len(valid):
                continue
            window = np.floor(rel[valid] / interval)
            previous = np.concatenate(([self._last_window.get(name, -1.0)], window[:-1]))
            first = valid[window != previous]
            out = np.full(len(values), math.nan)
            out[first] = values[first]
            numeric[name] = out
            self._last_window[name] = float(window[-1])
        return TraceChunk(ts=chunk.ts, numeric=numeric, stage=chunk.stage, job=chunk.job)


def prewarm(
    link: EngineLink,
    scenario: Scenario,
    hours: float,
    interval_by_prefix: dict[str, float] | None = None,
) -> list[dict[str, Any]]:
    """Replay the scenario's first ``hours`` through ``link``'s engine; return its event reports.

    ``interval_by_prefix`` ({"gpu": 5, "pdu": 10, …}, simulated s) thins each device's samples to
    the live poll intervals (``IntervalThinner``).
    """
    end_ts = scenario.start_ts + hours * 3600.0
    events: list[dict[str, Any]] = []
    if hours <= 0:
        return events
    thinner = IntervalThinner(scenario.start_ts, interval_by_prefix) if interval_by_prefix else None
    for chunk in simulate(scenario, chunk_s=900):
        keep = chunk.ts < end_ts
        if not keep.any():
            break
        if not keep.all():
            chunk = chunk.take(keep)
        if thinner is not None:
            chunk = thinner.thin(chunk)
        events += [r for r in link.engine.process(chunk) if r.get("type") == "event"]
    return events
