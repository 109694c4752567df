"""The twin's traces are a function of the scenario: a refactor must not change one byte.

Each case writes a short trace (and its truth) and compares its SHA-256 with
``golden_trace_hashes.json``. A change meant to alter the twin's output regenerates that file
(``RACKWATT_REGOLD=1 pytest tests/sim/test_trace_golden.py``) and says why in its commit.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from agent.sim import (
    FAMILIES,
    FaultSpec,
    RackTwin,
    columns,
    decimals,
    make_scenario,
    random_scenario,
    scenario_truth,
    simulate,
    trace_meta,
)
from agent.sim.scenarios import Scenario
from agent.trace.writer import TraceWriter

GOLDEN = Path(__file__).with_name("golden_trace_hashes.json")
DAYS = 0.03  # 43 min of 1-s rows: every stage, sampling rate and glitch path runs, in well under a second


def _cases() -> dict[str, Scenario]:
    cases: dict[str, Scenario] = {
        name: make_scenario(name, days=DAYS, seed=3, gpus=4)
        for name in ("steady", "mixed", "fault_cooling", "lag_steps")
    }
    cases["hotspot_at_start"] = make_scenario(
        "steady", days=DAYS, seed=5, gpus=4, fault=FaultSpec("hotspot", start_h=0.1)
    )
    for family in FAMILIES:
        cases[f"random_{family}"] = random_scenario(10003, family, days=DAYS)
    return cases


def _stable(value: object) -> object:
    """Floats at 9 significant digits: numpy's transcendental functions differ in the last bit
    between CPUs (their SIMD paths), and full-precision values made the hashes machine-specific."""
    if isinstance(value, float):
        return float(f"{value:.9g}")
    if isinstance(value, dict):
        return {k: _stable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_stable(v) for v in value]
    return value


def _digest(sc: Scenario, path: Path) -> str:
    with TraceWriter(path, trace_meta(sc), columns(sc), decimals(sc)) as writer:
        for chunk in simulate(sc):
            writer.write(chunk)
    h = hashlib.sha256(path.read_bytes())
    h.update(json.dumps(_stable(scenario_truth(sc)), sort_keys=True, default=str).encode())
    twin = RackTwin(sc)  # the stepping API the fake devices read
    for t in range(0, int(DAYS * 86400), 397):
        twin.advance_to(sc.start_ts + t)
        values = _stable([twin.device_values(), twin.stage()])
        h.update(json.dumps(values, sort_keys=True, default=str).encode())
    return h.hexdigest()


def test_every_case_writes_the_trace_it_always_wrote(tmp_path: Path) -> None:
    got = {name: _digest(sc, tmp_path / f"{name}.csv") for name, sc in _cases().items()}
    if os.environ.get("RACKWATT_REGOLD") == "1":
        GOLDEN.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        pytest.skip("golden hashes regenerated")
    want = json.loads(GOLDEN.read_text())
    changed = sorted(name for name in want.keys() | got.keys() if got.get(name) != want.get(name))
    assert not changed, f"traces changed (or cases added/removed) for: {changed}"
