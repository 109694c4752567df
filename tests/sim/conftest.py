"""Shared helpers for the twin tests: simulated runs cached per session (they cost seconds)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from functools import lru_cache

import numpy as np
import pytest

from agent.sim import FaultSpec, make_scenario, simulate
from agent.sim.scenarios import Scenario


class Run:
    """A whole simulated trace in memory: numeric columns, stage and job labels."""

    def __init__(self, scenario: Scenario) -> None:
        chunks = list(simulate(scenario))
        self.scenario = scenario
        self.ts = np.concatenate([c.ts for c in chunks])
        self.t_s = self.ts - scenario.start_ts
        self.numeric = {k: np.concatenate([c.numeric[k] for c in chunks]) for k in chunks[0].numeric}
        self.stage = np.concatenate([c.stage for c in chunks])
        self.job = np.concatenate([c.job for c in chunks])

    def col(self, name: str) -> np.ndarray:
        return self.numeric[name]

    def gpu_total_w(self) -> np.ndarray:
        """Σ GPU power per row (NaN where any GPU was not sampled)."""
        return np.sum([self.col(f"gpu.{i}.power_w") for i in range(self.scenario.gpus)], axis=0)

    def clean_col(self, name: str) -> np.ndarray:
        return clean(self.col(name))

    @staticmethod
    def minute_median(values: np.ndarray) -> np.ndarray:
        return minute_median(values)


def clean(values: np.ndarray) -> np.ndarray:
    """Drop sentinel glitches (-1, 0xFFFF) and spikes (> 2.5× the median) — what hygiene would do."""
    out = values.astype(np.float64).copy()
    out[(out < 0) | (out >= 65535)] = np.nan
    med = np.nanmedian(out)
    if np.isfinite(med) and med > 0:
        out[out > 2.5 * med] = np.nan
    return out


def minute_median(values: np.ndarray) -> np.ndarray:
    """Median per whole minute of a 1-s series (NaN-aware), robust to glitches."""
    n = len(values) // 60 * 60
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN minutes stay NaN
        return np.nanmedian(values[:n].reshape(-1, 60), axis=1)


@lru_cache(maxsize=24)
def _cached(name: str, days: float, seed: int, hints: bool, fault: FaultSpec | None) -> Run:
    return Run(make_scenario(name, days=days, seed=seed, hints=hints, fault=fault))


@pytest.fixture(scope="session")
def simulated() -> Callable[..., Run]:
    """simulated(name, days, seed=1, hints=True, fault=None) → Run, cached across tests."""

    def get(name: str, days: float, seed: int = 1, hints: bool = True, fault: FaultSpec | None = None) -> Run:
        return _cached(name, days, seed, hints, fault)

    return get


@pytest.fixture(scope="session")
def run_of() -> Callable[[Scenario], Run]:
    """run_of(scenario) → Run, for scenarios with modified parameters (not cached)."""
    return Run
