"""A real Prometheus scrapes two demo agents; every query of the Grafana dashboards returns data.

Two ``rackwatt demo`` racks on one mosquitto (so the spool is live), one with ``--fault hotspot``
so that the drift panels have an active drift to show; Prometheus on loopback scrapes both every
second. The queries come from the dashboard JSON (tests/metrics/dashboards.py), so a dashboard
and this test cannot drift apart. Bounded: the drift is waited for at most 60 s.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import free_port
from tests.live.conftest import Broker, wait_until
from tests.live.conftest import make_broker as make_broker  # the fixture, re-exported for this module
from tests.metrics.conftest import Prometheus, promtool_problems
from tests.metrics.dashboards import LABEL_VALUES, queries

pytestmark = pytest.mark.slow

SPEED = "240"  # simulated seconds per real second: the hot spot is found ~10 s after going live
RANGES = {"__range": "1m", "__rate_interval": "15s", "__interval": "5m"}  # windows a short run has data for


def _returns_data(prom: Prometheus, expr: str) -> bool:
    found = LABEL_VALUES.fullmatch(expr)
    if found:  # a Grafana variable: label_values(match, label) is the label values API
        params: dict[str, Any] = {"match[]": found.group("match")} if found.group("match") else {}
        return bool(prom.get(f"/api/v1/label/{found.group('label')}/values", **params))
    return bool(prom.query(expr))


@pytest.mark.serial  # several agents against wall-clock bounds: needs the cores to itself
def test_every_dashboard_query_returns_data_from_two_scraped_agents(
    make_broker: Callable[..., Broker], start_demo: Callable[..., Any], start_prometheus: Any
) -> None:
    broker = make_broker()
    ports = {"r01": free_port(), "r02": free_port()}
    common = ["--speed", SPEED, "--mqtt", f"127.0.0.1:{broker.port}", "--site", "dc9"]
    start_demo(*common, "--rack", "r01", "--warmup", "1", "--metrics", f"127.0.0.1:{ports['r01']}")
    faulty = start_demo(
        *common,
        "--rack",
        "r02",
        "--fault",
        "hotspot",
        "--warmup",
        "8",
        "--metrics",
        f"127.0.0.1:{ports['r02']}",
    )
    prom = start_prometheus([f"127.0.0.1:{p}" for p in ports.values()])
    wait_until(prom.ready, 30, "prometheus to be ready", step_s=0.3)
    started = time.monotonic()
    try:
        wait_until(
            lambda: prom.query('rackwatt_drift_active{site="dc9", rack="r02", cause="thermal"} == 1'),
            60,
            "the hot spot's drift in Prometheus",
            step_s=1.0,
        )
    except AssertionError:
        raise AssertionError(
            "no thermal drift scraped; demo output:\n"
            + "\n".join(faulty.output()[-30:])
            + faulty.stderr()[-2000:]
        ) from None
    assert len(prom.query("rackwatt_agent_info")) == 2

    fleet_and_rack = queries({"site": "dc9", "rack": "r02", **RANGES})
    assert len(fleet_and_rack) > 20
    missing: list[str] = []
    deadline = time.monotonic() + 30  # range queries need a few scrapes of the new series
    while True:
        missing = [
            f"{q.dashboard} {q.where}: {q.expr}" for q in fleet_and_rack if not _returns_data(prom, q.expr)
        ]
        if not missing or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert not missing, "queries without data:\n" + "\n".join(missing)
    assert time.monotonic() - started < 90

    for port in ports.values():  # what Prometheus scraped is lint-clean
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
            assert promtool_problems(response.read().decode()) == ""
