"""Property test of the stage-hint parser (``agent.stages.hints.parse_datagram``): any datagram from any
local process gives a Hint, a Command or a HintError with a known reason, never another exception,
within 2 s and 200 MB per case (issue 18's bound for untrusted input)."""

from __future__ import annotations

import json
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.stages.hints import DROP_REASONS, Command, Hint, HintError, parse_datagram
from tests.conftest import peak_rss, start_peak_rss

NOW = 1_764_400_000.0
CASE_SECONDS = 2.0
CASE_BYTES = 200 << 20
VALID = [
    {"stage": "checkpoint", "job": "llama-70b-r3", "work_rate": 1834.5, "ts": NOW - 1},
    {"stage": "forward"},
    {"command": "accept", "cause": "cooling", "ts": NOW},
    {"command": "accept"},
]
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.integers(min_value=10**300, max_value=10**400),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)


def _check(data: bytes) -> None:
    baseline = start_peak_rss()
    started = time.perf_counter()
    try:
        message = parse_datagram(data, "fuzz", now=NOW)
    except HintError as exc:
        assert exc.reason in DROP_REASONS and str(exc)
    else:
        assert isinstance(message, Hint | Command)
    assert time.perf_counter() - started < CASE_SECONDS
    assert peak_rss() - baseline < CASE_BYTES


BOUNDED = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings(BOUNDED, max_examples=300)
@given(
    base=st.sampled_from(VALID),
    key=st.sampled_from(["stage", "job", "work_rate", "ts", "command", "cause", "x"]),
    value=JSON_VALUES,
)
def test_valid_datagram_with_one_field_replaced(base: dict[str, object], key: str, value: object) -> None:
    _check(json.dumps({**base, key: value}).encode())


@settings(BOUNDED, max_examples=200)
@given(st.binary(max_size=1100))
def test_arbitrary_bytes(data: bytes) -> None:
    _check(data)


@settings(BOUNDED, max_examples=50)
@given(depth=st.integers(1, 600), opener=st.sampled_from(["[", '{"a":']))
def test_deep_nesting(depth: int, opener: str) -> None:
    _check((opener * depth).encode())
