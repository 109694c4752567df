"""The replay leaves the columns the engine never reads unconverted (signals.engine_never_reads):
that must not change a single number of its report."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from agent.engine import Engine, rack_info
from agent.engine.signals import COLUMNS, engine_never_reads
from agent.sim.scenarios import make_scenario
from agent.sim.twin import columns, decimals, simulate, trace_meta
from agent.trace.reader import open_trace
from agent.trace.writer import TraceWriter


@pytest.fixture(scope="module")
def twin_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A twin rack with every column kind the twin writes, without stage hints (the inferrer reads
    GPU utilisation, which the signal table does not list)."""
    scenario = make_scenario("steady", days=0.25, seed=21, gpus=8, hints=False)
    path = tmp_path_factory.mktemp("skip") / "trace.csv"
    with TraceWriter(path, trace_meta(scenario), columns(scenario), decimals(scenario)) as writer:
        for chunk in simulate(scenario):
            writer.write(chunk)
    return path


def _report(path: Path, skip: Callable[[str], bool] | None) -> list[dict]:
    reader = open_trace(path, chunk_rows=5000, skip=skip)
    engine = Engine(None, rack_info(reader.meta), site="st", rack_name="rt")
    out: list[dict] = []
    for chunk in reader:
        out += engine.process(chunk)
    return out + engine.finish()


def test_skipping_unread_columns_changes_nothing(twin_trace: Path) -> None:
    skipped = [name for name in open_trace(twin_trace).columns if engine_never_reads(name)]
    assert {"gpu.0.temp_c", "gpu.0.sm_clock_mhz", "pdu.a.voltage_v", "crac.1.supply_temp_c"} <= set(skipped)
    full, lean = _report(twin_trace, None), _report(twin_trace, engine_never_reads)
    assert any(r["type"] == "window" and r["predicted_kwh"] is not None for r in full)
    assert lean == full


def test_no_signal_the_engine_reads_is_skipped() -> None:
    for column in COLUMNS:
        name = f"{column.device}.0.{column.suffix}" if column.device else column.suffix
        assert not engine_never_reads(name), name
    for name in ("gpu.0.util_pct", "gpu.0.power_limit_w", "gpu.0.energy_resets", "pdu.a.power_w", "x.y"):
        assert not engine_never_reads(name), name
