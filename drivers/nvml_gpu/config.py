"""``[nvml]``: the local GPUs read through NVML — their configuration shape and value rules.

The driver room owns its configuration; ``agent.config`` only assembles it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.config.checks import positive
from agent.config.convert import MISSING, Context, Spec, convert_value, show
from agent.config.toml_lines import KeyPath


@dataclass(frozen=True)
class NvmlSection:
    enabled: bool = True
    gpus: tuple[int, ...] | None = None  # None → all GPUs
    interval_s: float = 1.0


def _gpus(ctx: Context, path: KeyPath, value: Any) -> Any:
    """``nvml.gpus``: ``"all"`` or an array of distinct GPU indexes."""
    if value == "all":
        return None
    converted = convert_value(ctx, path, value, tuple[int, ...], Spec())
    if converted is MISSING:
        return MISSING
    if any(i < 0 for i in converted) or len(set(converted)) != len(converted):
        ctx.error(path, f'must be "all" or an array of distinct GPU indexes >= 0, got {show(value)}')
        return MISSING
    return converted


NVML = Spec(checks={"interval_s": [positive]}, converters={"gpus": _gpus})
