"""Baselines never go stale (agent/engine/shadow.py): a held component's shadow regressions learn
on, are adopted when the hold clears without a confirmed fault and discarded when one confirmed."""

from __future__ import annotations

import numpy as np

from agent.engine.response import EWLS
from agent.engine.shadow import ShadowFits


def _fits() -> dict[str, list[EWLS]]:
    return {"it": [EWLS(1, 2, np.full(2, 1e-6))], "cooling": [EWLS(3, 2, np.full(2, 1e-6))],
            "gpu": [EWLS(2, 2, np.full(2, 1e-6))]}


def _learn(reg: EWLS, level: float) -> None:
    X = np.stack([np.ones(20), np.linspace(0, 1, 20)], axis=1)[None]
    reg.update(X, level + 2.0 * X[..., 1], np.ones((1, 20)), 1.0)


def test_a_hold_that_clears_without_a_fault_adopts_what_the_shadow_learned() -> None:
    fits = _fits()
    main = fits["it"][0]
    _learn(main, 10.0)
    shadow = ShadowFits(fits)
    shadow.start("it")
    learning = shadow.learning("it")
    assert learning is not None
    _learn(learning[0], 12.0)  # the held bins: a new normal (a job change, a false suspicion)
    assert main.theta[0, 0] < 10.5  # the held model did not move
    shadow.note_events([{"type": "event", "state": "onset", "cause": "workload"}], frozenset({"it"}))
    shadow.end("it")
    assert main.theta[0, 0] > 10.5 and shadow.adopted == 1 and shadow.learning("it") is None


def test_a_confirmed_fault_keeps_the_model_from_before_its_start() -> None:
    fits = _fits()
    main = fits["cooling"][0]
    _learn(main, 5.0)
    before = main.theta.copy()
    shadow = ShadowFits(fits)
    shadow.start("cooling")
    shadow.note_events([{"type": "event", "state": "onset", "cause": "cooling"}], frozenset({"cooling"}))
    assert shadow.learning("cooling") is None  # a confirmed fault is not learned, not even in the shadow
    shadow.end("cooling")
    assert np.array_equal(main.theta, before) and shadow.discarded == 1


def test_shadow_state_round_trips_with_fixed_shapes() -> None:
    fits = _fits()
    a = ShadowFits(fits)
    a.start("gpu")
    learning = a.learning("gpu")
    assert learning is not None
    _learn(learning[0], 3.0)
    saved = {k: v.copy() for k, v in a.state_arrays().items()}
    b = ShadowFits(_fits())
    b.load_arrays(saved)
    assert b.active["gpu"] and not b.active["it"]
    for key, arr in b.state_arrays().items():
        assert np.array_equal(arr, saved[key]), key
    _learn(learning[0], 4.0)
    assert {k: v.shape for k, v in a.state_arrays().items()} == {k: v.shape for k, v in saved.items()}
