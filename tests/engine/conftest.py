"""Engine test helpers: run the engine over chunks and collect its records."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synth

from agent.engine import Engine, rack_info


def run_engine(
    chunks: list[Any], engine: Engine | None = None, finish: bool = True
) -> tuple[Engine, list[dict]]:
    eng = engine or Engine(None, rack_info(synth.meta()), site="st", rack_name="rt")
    out: list[dict] = []
    for c in chunks:
        out += eng.process(c)
    if finish:
        out += eng.finish()
    return eng, out


@pytest.fixture(scope="session")
def synth_8h() -> list[Any]:
    return synth.chunks(8 / 24, seed=5, chunk_rows=2000)


@pytest.fixture(scope="session")
def synth_8h_run(synth_8h: list[Any]) -> tuple[Engine, list[dict]]:
    return run_engine(synth_8h)
