"""The inbound ``cmd/accept`` payload: an operator accepts an active deviation as the new normal.

``{"cause": "cooling", "by": "alice"}`` — ``cause`` is a drift cause or component name (see
docs/mqtt.md); ``by`` (optional) names who accepted, for the resulting event. Anything else is
rejected with a message saying what was wrong; the caller logs it and carries on.
"""

from __future__ import annotations

import json
import re

LABEL_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
MAX_BYTES = 1024
FIELDS = {"cause", "by", "ts"}


def parse_accept(data: bytes) -> tuple[str, str]:
    """``(cause, by)`` from a ``cmd/accept`` payload; raises ValueError naming the problem."""
    if len(data) > MAX_BYTES:
        raise ValueError(f"payload of {len(data)} bytes exceeds {MAX_BYTES}")
    try:
        obj = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # RecursionError: nested past the parser
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    unknown = set(obj) - FIELDS
    if unknown:
        raise ValueError(f"unknown field(s): {', '.join(sorted(unknown))[:100]}")
    cause = obj.get("cause")
    if not isinstance(cause, str) or not LABEL_RE.match(cause):
        raise ValueError(f"cause: expected a name like 'cooling', got {str(cause)[:40]!r}")
    by = obj.get("by", "operator")
    if not isinstance(by, str) or not 0 < len(by) <= 64 or not by.isprintable():
        raise ValueError("by: expected a short printable string")
    return cause, by
