"""A snapshot as metric families: names, labels, units, what is left out; promtool finds nothing to lint."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from agent.metrics.families import build_families
from agent.metrics.snapshot import DriftState, RackSnapshot
from agent.trace.model import J_PER_KWH
from tests.metrics.conftest import promtool_problems, samples

LABELS = {"site": "dc1", "rack": "r12", "node": "gw12"}


def snapshot(**changes: object) -> RackSnapshot:
    summary = {
        "stage": "forward_backward",
        "warm": True,
        "power_w": {
            "gpu": 5600.0,
            "it": 8000.0,
            "it_expected": 7900.0,
            "cooling": 2000.0,
            "cooling_expected": None,
        },
        "lag": {"tau_s": 240.0, "dead_s": 60.0, "learned": True},
        "stages": {
            "forward_backward": {"level_w": 9800.0, "band_w": [9500.0, 10100.0], "samples": 40},
            "checkpoint": {"level_w": 4000.0, "band_w": [3800.0, 4300.0], "samples": 5},
        },
        "energy_kwh": {"forward_backward": {"it": 2.0, "cooling": 0.5, "gpu": 1.4}},
    }
    status = {
        "started": 1.7e9,
        "devices": {
            "pdu.a": {
                "ok": True,
                "polls": 10,
                "failures": 1,
                "elapsed_ms": 41.0,
                "interval_s": 5.0,
                "last_ok": 1.7e9 + 50,
            },
            "crac.1": {
                "ok": False,
                "polls": 3,
                "failures": 3,
                "elapsed_ms": None,
                "interval_s": 10.0,
                "last_ok": None,
            },
        },
        "spool": {
            "pending": 2,
            "bytes": 900,
            "max_bytes": 1 << 26,
            "dropped_summaries": 0,
            "dropped_events": 0,
            "corrupt_skipped": 0,
        },
        "hints": {"accepted": 7, "malformed": 1},
        "engine": {"ok": True, "errors": 0},
        "reloads": {"ok": 1, "rejected": 0},
    }
    snap = RackSnapshot(
        labels=LABELS,
        info={"version": "0.1.0", "row": "b", "hall": "h1"},
        summary=summary,
        status=status,
        drifts={"cooling": DriftState(True, 6.1, 1.7e9 + 10), "thermal": DriftState(False)},
        jobs_j={"llama-70b": {"it": 1.0 * J_PER_KWH, "cooling": 0.5 * J_PER_KWH}},
        drift_events={("cooling", "onset"): 1},
        last_summary_ts=1.7e9 + 60,
    )
    for key, value in changes.items():
        setattr(snap, key, value)
    return snap


class Fixed(Collector):
    def __init__(self, snap: RackSnapshot) -> None:
        self.snap = snap

    def collect(self):  # type: ignore[no-untyped-def]
        yield from build_families(self.snap)


def exposition(snap: RackSnapshot) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Fixed(snap))
    return generate_latest(registry).decode()


def key(name: str, **labels: str) -> tuple[str, frozenset[tuple[str, str]]]:
    return name, frozenset({**LABELS, **labels}.items())


def test_the_figures_are_exported_in_base_units_with_the_rack_labels() -> None:
    got = samples(exposition(snapshot()))
    assert got[key("rackwatt_facility_power_watts")] == 10000.0  # IT + cooling
    assert got[key("rackwatt_it_expected_power_watts")] == 7900.0
    assert got[key("rackwatt_stage_baseline_low_watts", stage="forward_backward")] == 9500.0
    assert got[key("rackwatt_stage_active", stage="forward_backward")] == 1.0
    assert got[key("rackwatt_stage_active", stage="checkpoint")] == 0.0
    assert got[key("rackwatt_stage_energy_joules_total", stage="forward_backward", part="it")] == 7.2e6
    assert got[key("rackwatt_stage_gpu_energy_joules_total", stage="forward_backward")] == 1.4 * J_PER_KWH
    assert got[key("rackwatt_job_energy_joules_total", job_id="llama-70b", part="cooling")] == 1.8e6
    assert got[key("rackwatt_cooling_lag_time_constant_seconds")] == 240.0
    assert got[key("rackwatt_drift_active", cause="cooling")] == 1.0
    assert got[key("rackwatt_drift_active", cause="thermal")] == 0.0
    assert got[key("rackwatt_drift_deviation_ratio", cause="cooling")] == 0.061
    assert got[key("rackwatt_device_poll_duration_seconds", device="pdu.a")] == 0.041
    assert got[key("rackwatt_device_up", device="crac.1")] == 0.0
    assert got[key("rackwatt_stage_hints_total", outcome="malformed")] == 1.0
    assert got[key("rackwatt_agent_info", version="0.1.0", row="b", hall="h1")] == 1.0
    assert all({"site", "rack", "node"} <= {k for k, _ in labels} for _, labels in got)


def test_what_the_agent_does_not_know_is_left_out_not_zero() -> None:
    got = samples(exposition(snapshot()))
    names = {name for name, _ in got}
    assert "rackwatt_cooling_expected_power_watts" not in names  # the engine had none
    assert "rackwatt_facility_expected_power_watts" not in names  # so the sum is unknown too
    assert key("rackwatt_device_poll_duration_seconds", device="crac.1") not in got  # never answered
    assert key("rackwatt_drift_deviation_ratio", cause="thermal") not in got  # not active
    without_engine = samples(exposition(snapshot(summary=None)))
    assert not any(name.startswith("rackwatt_facility") for name, _ in without_engine)
    assert key("rackwatt_device_up", device="pdu.a") in without_engine  # status still there


def test_promtool_finds_nothing_to_lint() -> None:
    assert promtool_problems(exposition(snapshot())) == ""
