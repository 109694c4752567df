"""Reading a payload (an MQTT summary, status or event, a report line, a hint): the object, its numbers.

A measurement is a finite int or float. JSON ``true`` is not 1 W, and NaN/±inf are never values,
so both read as None: "the agent does not know", which every reader already shows or exports as
unknown, never as 0. (A metric that deliberately exports a flag as 0/1 says so itself:
``FamilySet.flag``.) Not for validating input with an error to report: callers that must say why
a value was refused raise on None.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def json_object(data: bytes) -> dict[str, Any] | None:
    """``data`` decoded as a JSON object; None when it is not JSON (or nested past the parser's
    depth), or is JSON but not an object."""
    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return body if isinstance(body, dict) else None


def number(value: object) -> float | None:
    """``value`` as a float if it is a finite int or float (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        result = float(value)
    except OverflowError:  # a JSON integer of hundreds of digits
        return None
    return result if math.isfinite(result) else None


def total(*values: object) -> float | None:
    """The sum of ``values``; None when any of them is not a ``number`` (a part unknown)."""
    numbers = [number(v) for v in values]
    return None if None in numbers else sum((n for n in numbers if n is not None), 0.0)


def section(payload: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """The object under ``key``; an empty one when it is absent, null or not an object."""
    value = payload.get(key)
    return value if isinstance(value, Mapping) else {}
