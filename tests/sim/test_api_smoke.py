"""The twin's public API runs, is deterministic per seed, and writes a parseable trace."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from agent.cli import main
from agent.sim import SCENARIOS, columns, make_scenario, scenario_truth, simulate


def _concat(name: str, hours: float, seed: int = 3) -> dict[str, np.ndarray]:
    chunks = list(simulate(make_scenario(name, days=hours / 24.0, seed=seed)))
    return {k: np.concatenate([c.numeric[k] for c in chunks]) for k in chunks[0].numeric}


def test_every_scenario_simulates_an_hour() -> None:
    for name in SCENARIOS:
        sc = make_scenario(name, days=1 / 24, seed=1)
        chunks = list(simulate(sc))
        assert sum(len(c) for c in chunks) == 3600
        assert set(columns(sc)) - {"ts", "stage", "job"} == set(chunks[0].numeric)


def test_same_seed_same_trace_other_seed_differs() -> None:
    a, b, c = _concat("tide", 2, seed=5), _concat("tide", 2, seed=5), _concat("tide", 2, seed=6)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert not np.array_equal(a["gpu.0.power_w"], c["gpu.0.power_w"], equal_nan=True)


def test_sim_command_writes_trace_and_truth(tmp_path: Path) -> None:
    assert (
        main(
            [
                "sim",
                "--scenario",
                "fault_hotspot",
                "--days",
                "0.05",
                "--seed",
                "2",
                "--out",
                str(tmp_path),
                "--quiet",
            ]
        )
        == 0
    )
    lines = (tmp_path / "trace.csv").read_text().splitlines()
    meta = [line for line in lines if line.startswith("#")]
    assert "# crac.1.share=0.25" in meta and "# interval_s=1" in meta
    rows = list(csv.reader(lines[len(meta) :]))
    assert rows[0][:4] == ["ts", "stage", "job", "work_rate"]
    assert len(rows) - 1 == round(0.05 * 86400)
    assert all(len(r) == len(rows[0]) for r in rows)
    assert not any("nan" in cell for r in rows[1:] for cell in r)
    truth = json.loads((tmp_path / "truth.json").read_text())
    assert truth["faults"][0]["cause"] == "thermal"
    assert truth == json.loads(json.dumps(scenario_truth(make_scenario("fault_hotspot", days=0.05, seed=2))))
