"""What the values of a restored engine state may be, checked before any of them is used.

The state file's checksum proves the bytes are the ones written, not that a build (or a hand, or
a fuzzer) wrote sensible ones: an index outside its table or a count of 1e18 would crash the first
tick after a restore, or ask numpy for exabytes. Each check raises ``StateError`` naming the
value, so the caller starts fresh with one clear message instead.
"""

from __future__ import annotations

import math

import numpy as np

from agent.engine.row_times import TS_FLOOR_S
from agent.engine.state import StateError

# Largest magnitude a float in a state may hold. The largest accumulator the engine writes is a
# bin's GPU cube sum: (16 GPUs × 1500 W)^3 × a 900 s bin ≈ 1.2e16; 1e18 leaves room and still
# keeps every square and cube the engine takes of it finite.
MAX_MAGNITUDE = 1e18
MAX_TS_S = 1e11  # year 5138: beyond any wall clock (the live bound is checked when rows arrive)
NEVER_MARKED = frozenset({"last_ts"})  # arrays where -inf means "never" (a signal not sampled yet)


def check_magnitudes(arrays: dict[str, np.ndarray]) -> None:
    """No float in any array is infinite or beyond ``MAX_MAGNITUDE`` (NaN means unknown: allowed;
    -inf where ``NEVER_MARKED`` says it means "never")."""
    for name, arr in arrays.items():
        if arr.dtype.kind != "f" or not arr.size:
            continue
        with np.errstate(invalid="ignore"):
            bad = np.abs(arr) > MAX_MAGNITUDE
            if name in NEVER_MARKED:
                bad &= arr != -np.inf
        if bad.any():
            value = arr.reshape(-1)[int(np.argmax(bad.reshape(-1)))]
            raise StateError(f"state array {name}: {value!r} is out of range")


def index(value: float, low: int, high: int, what: str) -> int:
    """An integer ``low <= value < high`` stored as a float."""
    if not (math.isfinite(value) and value == math.floor(value) and low <= value < high):
        raise StateError(f"state {what} = {value!r}: must be an integer in [{low}, {high})")
    return int(value)


def scale(value: float, what: str) -> float:
    """A normaliser: > 0, or NaN before it is fixed (a 0 would divide every later value by zero)."""
    if not (math.isnan(value) or value > 0):
        raise StateError(f"state {what} = {value!r}: must be > 0")
    return value


def timestamp(value: float, what: str) -> float:
    """A row time (NaN: none yet) no clock that was ever set could not have shown."""
    if math.isnan(value):
        return value
    if not TS_FLOOR_S <= value <= MAX_TS_S:
        raise StateError(f"state {what} = {value!r}: not a time (seconds since 1970, after {TS_FLOOR_S:.0f})")
    return value

