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


def test_sim_command_options_reach_trace_and_truth(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [
        "sim",
        "--scenario",
        "fault_cooling",
        "--days",
        "0.02",
        "--seed",
        "4",
        "--out",
        str(out),
        "--quiet",
    ]
    args += [
        "--gpus",
        "12",
        "--no-hints",
        "--fault-magnitude",
        "7.5",
        "--fault-shape",
        "step",
        "--fault-start-h",
        "0.1",
    ]
    assert main(args) == 0
    lines = [line for line in (out / "trace.csv").read_text().splitlines() if not line.startswith("#")]
    header = lines[0].split(",")
    assert "gpu.11.power_w" in header and "gpu.12.power_w" not in header
    rows = list(csv.reader(lines[1:]))
    for name in ("stage", "job", "work_rate"):
        assert {r[header.index(name)] for r in rows} == {""}
    truth = json.loads((out / "truth.json").read_text())
    (fault,) = truth["faults"]
    assert (fault["magnitude_pct"], fault["shape"], fault["start_h"]) == (7.5, "step", 0.1)
    assert {s[2] for s in truth["stage_segments"]} - {"idle"}  # the truth keeps the stages


def test_sim_command_rejects_bad_values_with_a_message(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["sim", "--days", "0", "--out", str(tmp_path)]) == 2
    assert "days must be in (0, 400]" in capsys.readouterr().err
    assert (
        main(
            ["sim", "--scenario", "steady", "--days", "0.01", "--fault-start-h", "1", "--out", str(tmp_path)]
        )
        == 0
    )
    assert (
        main(
            [
                "sim",
                "--scenario",
                "fault_hotspot",
                "--days",
                "0.01",
                "--fault-start-h",
                "5",
                "--out",
                str(tmp_path),
            ]
        )
        == 2
    )
    assert "after the trace ends" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["sim", "--days", "0.01", "--out", str(blocker / "sub")]) == 1
    assert "cannot create" in capsys.readouterr().err
