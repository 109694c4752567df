"""A ``RackSnapshot`` as Prometheus metric families: the names, units and labels of docs/metrics.md.

Base units in the name, ``_total`` on counters, ``site``/``rack``/``node`` on every series, a bounded
label set. A value the agent does not know is left out, never exported as 0.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric

from agent.metrics.snapshot import RackSnapshot
from agent.payload import number, section, total
from agent.trace.model import J_PER_KWH

P = "rackwatt_"


class FamilySet:
    """Families by name, each with the base labels plus its own; a value that is not a ``number`` (None,
    NaN, a bool read from a payload) is skipped. ``flag`` is the one way a bool is exported: as 0/1."""

    def __init__(self, base: Mapping[str, str]) -> None:
        self.base = dict(base)
        self._families: dict[str, Metric] = {}

    def gauge(self, name: str, doc: str, value: Any, **labels: str) -> None:
        self._add(GaugeMetricFamily, name, doc, value, labels)

    def counter(self, name: str, doc: str, value: Any, **labels: str) -> None:
        self._add(CounterMetricFamily, name, doc, value, labels)

    def flag(self, name: str, doc: str, on: bool, **labels: str) -> None:
        self._add(GaugeMetricFamily, name, doc, int(on), labels)

    def _add(self, kind: type, name: str, doc: str, value: Any, labels: dict[str, str]) -> None:
        value = number(value)
        if value is None:
            return
        family: Any = self._families.get(name)
        if family is None:
            family = self._families[name] = kind(P + name, doc, labels=[*self.base, *labels])
        family.add_metric([*self.base.values(), *labels.values()], value)

    def info(self, name: str, doc: str, values: Mapping[str, str]) -> None:
        family = InfoMetricFamily(P + name, doc, labels=list(self.base))
        family.add_metric(list(self.base.values()), dict(values))
        self._families[name] = family

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._families.values())


def build_families(snap: RackSnapshot) -> FamilySet:
    fs = FamilySet(snap.labels)
    fs.info("agent", "The rack agent: version, and where the rack stands (row, hall).", snap.info)
    _status(fs, snap.status)
    if snap.summary is not None:
        _power(fs, snap.summary)
        _stages(fs, snap.summary)
        _lag(fs, snap.summary)
    _drift(fs, snap)
    for job, parts in snap.jobs_j.items():
        for part, joules in parts.items():
            fs.counter("job_energy_joules", "Facility energy by training job (IT and attributed cooling), "
                       "for the most recently seen jobs.", joules, job_id=job, part=part)
    fs.gauge("last_published_timestamp_seconds",
             "When the agent last published its rack summary (its clock).", snap.last_summary_ts)
    return fs


def _joules(kwh: Any) -> float | None:
    value = number(kwh)
    return value * J_PER_KWH if value is not None else None


def _power(fs: FamilySet, s: Mapping[str, Any]) -> None:
    p = section(s, "power_w")
    it, cool, it_x, cool_x = (p.get(k) for k in ("it", "cooling", "it_expected", "cooling_expected"))
    for name, doc, value in (
        ("facility_power_watts",
         "Facility power of the rack: PDU input plus its cooling share, last drift bin.", total(it, cool)),
        ("facility_expected_power_watts", "Facility power the learned baseline expects for the "
         "same stage and load (cooling through the learned lag).", total(it_x, cool_x)),
        ("it_power_watts", "IT power of the rack (PDU input).", it),
        ("it_expected_power_watts", "IT power the learned model expects.", it_x),
        ("cooling_power_watts", "The rack's share of its cooling units' power.", cool),
        ("cooling_expected_power_watts", "Cooling power the lag-aware model expects.", cool_x),
        ("gpu_power_watts", "Sum of the rack's GPU power.", p.get("gpu")),
    ):
        fs.gauge(name, doc, value)
    fs.flag("engine_warm", "1 once the engine has learned enough to predict.", bool(s.get("warm")))


def _stages(fs: FamilySet, s: Mapping[str, Any]) -> None:
    current = s.get("stage")
    stages = section(s, "stages")
    for stage in dict.fromkeys([*stages, *([current] if current else [])]):
        fs.flag("stage_active", "1 for the training stage the rack is in now, 0 for the other stages it "
                "has a baseline for.", stage == current, stage=stage)
    for stage, b in stages.items():
        band = b.get("band_w") or [None, None]
        for name, doc, value in (
            ("stage_baseline_watts", "Learned facility power level of the stage.", b.get("level_w")),
            ("stage_baseline_low_watts", "Lower edge of the stage's band (10th percentile).", band[0]),
            ("stage_baseline_high_watts", "Upper edge of the stage's band (90th percentile).", band[1]),
            ("stage_baseline_samples", "Drift bins the stage's baseline has learned from.", b.get("samples")),
        ):
            fs.gauge(name, doc, value, stage=stage)
    for stage, e in section(s, "energy_kwh").items():
        for part in ("it", "cooling"):
            fs.counter("stage_energy_joules", "Facility energy by stage: IT, and cooling attributed to the "
                       "stage that caused the heat.", _joules(e.get(part)), stage=stage, part=part)
        fs.counter("stage_gpu_energy_joules", "GPU energy by stage (part of IT).", _joules(e.get("gpu")),
                   stage=stage)


def _lag(fs: FamilySet, s: Mapping[str, Any]) -> None:
    lag = section(s, "lag")
    fs.gauge("cooling_lag_time_constant_seconds", "Learned time constant of the cooling response.",
             lag.get("tau_s"))
    fs.gauge("cooling_lag_dead_time_seconds", "Learned dead time of the cooling response.", lag.get("dead_s"))
    fs.flag("cooling_lag_learned", "1 once the lag is learned from data (else the prior).",
            bool(lag.get("learned")))


def _drift(fs: FamilySet, snap: RackSnapshot) -> None:
    for cause, d in snap.drifts.items():
        fs.flag("drift_active", "1 while a drift of this cause is active (confirmed, not cleared).",
                d.active, cause=cause)
        if d.active:
            dev = d.deviation_pct / 100.0 if d.deviation_pct is not None else None
            fs.gauge("drift_deviation_ratio", "Deviation of the active drift from the expectation "
                     "(0.06 = 6 %), as its onset event published it.", dev, cause=cause)
            fs.gauge("drift_since_timestamp_seconds", "Estimated start of the active drift.", d.since_ts,
                     cause=cause)
    # every cause and state from 0, so the first event is an increase Prometheus can see
    events = {(cause, state): 0 for cause in snap.drifts for state in ("onset", "cleared")}
    events.update(snap.drift_events)
    for (cause, state), n in sorted(events.items()):
        fs.counter("drift_events", "Drift events published since the agent started.", n,
                   cause=cause, state=state)


def _status(fs: FamilySet, st: Mapping[str, Any]) -> None:
    fs.gauge("start_time_seconds", "When the agent started (its clock).", st.get("started"))
    for device, h in sorted(section(st, "devices").items()):
        ms = number(h.get("elapsed_ms"))
        poll_s = ms / 1000.0 if ms is not None else None
        fs.flag("device_up", "1 if the device's last poll succeeded.", bool(h.get("ok")), device=device)
        for name, doc, value in (
            ("device_poll_duration_seconds", "How long the device's last poll took.", poll_s),
            ("device_poll_interval_seconds", "The device's configured poll interval.", h.get("interval_s")),
            ("device_last_ok_timestamp_seconds", "When the device last answered.", h.get("last_ok")),
        ):
            fs.gauge(name, doc, value, device=device)
        fs.counter("device_polls", "Polls of the device.", h.get("polls"), device=device)
        fs.counter("device_poll_failures", "Failed polls of the device.", h.get("failures"), device=device)
    spool = section(st, "spool")
    fs.gauge("spool_pending_messages", "Messages on disk waiting for the broker.", spool.get("pending"))
    fs.gauge("spool_size_bytes", "Bytes of the pending messages.", spool.get("bytes"))
    fs.gauge("spool_max_bytes", "The spool's bound ([mqtt] spool_max_mb).", spool.get("max_bytes"))
    for kind, key in (("summary", "dropped_summaries"), ("event", "dropped_events")):
        n = spool.get(key)
        fs.counter("spool_dropped_messages", "Messages dropped because the spool was full.", n, kind=kind)
    fs.counter("spool_corrupt_records", "Torn or corrupt spool records skipped.",
               spool.get("corrupt_skipped"))
    for outcome, n in sorted(section(st, "hints").items()):
        fs.counter("stage_hints", "Stage hints received, by what became of them.", n, outcome=outcome)
    engine = section(st, "engine")
    fs.counter("engine_errors", "Engine failures the agent survived.", engine.get("errors"))
    reloads = section(st, "reloads")
    for result, key in (("applied", "ok"), ("rejected", "rejected")):
        fs.counter("config_reloads", "Configuration reloads (SIGHUP).", reloads.get(key), result=result)
