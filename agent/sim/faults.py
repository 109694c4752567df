"""Injected faults with ground truth: what each one changes, when, and how hard.

A fault is a time envelope (0 → step or ramp to 1 → 0 after an optional end) times a magnitude,
applied by the physics to exactly the quantity its cause changes. ``cause`` uses the engine's
attribution names (DESIGN.md); ``component`` the ``agent.engine.components.COMPONENTS`` entry
whose residual moves.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, NamedTuple

import numpy as np


class FaultKind(NamedTuple):
    """What a kind of fault moves, in the engine's names, and its defaults."""

    cause: str
    component: str
    mechanism: str
    default_pct: float
    default_shape: str
    meaning: str  # what the magnitude measures


FAULT_KINDS: dict[str, FaultKind] = {
    "cooling": FaultKind("cooling", "cooling", "cop_degradation", 15.0, "gradual", "COP lowered by this %"),
    "setpoint": FaultKind("cooling", "cooling", "setpoint_change", 5.0, "step",
                          "supply setpoint lowered by this % of its °C"),
    "power_chain": FaultKind("power_chain", "it", "psu_loss", 2.0, "step",
                             "extra power-chain loss, % of node input"),
    "hotspot": FaultKind("thermal", "thermal", "inlet_recirculation", 25.0, "gradual",
                         "% of exhaust air recirculated into one inlet"),
    "gpu_ageing": FaultKind("gpu_hardware", "gpu", "gpu_ageing", 4.0, "gradual",
                            "% more GPU power for the same work"),
    "gpu_driver": FaultKind("gpu_hardware", "gpu", "driver_update", 3.0, "step",
                            "% more GPU power after a driver update"),
}
SHAPES = ("step", "gradual")
DEFAULT_TARGETS = {"power_chain": "b", "hotspot": "top"}


@dataclass(frozen=True)
class FaultSpec:
    """One fault: ``kind`` from FAULT_KINDS; times in hours from the trace start; ``magnitude_pct``/``shape``
    None take the kind's default; ``target`` names the feed (power_chain) or inlet position (hotspot)."""

    kind: str
    start_h: float = 24.0
    magnitude_pct: float | None = None
    shape: str | None = None
    ramp_h: float = 12.0
    end_h: float | None = None
    target: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"fault kind {self.kind!r}: expected one of {', '.join(FAULT_KINDS)}")
        if self.shape is not None and self.shape not in SHAPES:
            raise ValueError(f"fault shape {self.shape!r}: expected step or gradual")
        if self.magnitude_pct is not None and not 0.0 <= self.magnitude_pct <= 90.0:
            raise ValueError(f"fault magnitude {self.magnitude_pct}%: must be in [0, 90]")
        if self.start_h < 0 or self.ramp_h <= 0:
            raise ValueError(f"fault {self.kind}: start_h must be ≥ 0 and ramp_h > 0")
        if self.end_h is not None and self.end_h <= self.start_h:
            raise ValueError(f"fault {self.kind}: end_h must be after start_h")

    @property
    def magnitude(self) -> float:
        """Magnitude as a fraction (0.05 for 5 %)."""
        pct = FAULT_KINDS[self.kind].default_pct if self.magnitude_pct is None else self.magnitude_pct
        return pct / 100.0

    @property
    def resolved_shape(self) -> str:
        if self.kind == "gpu_driver":
            return "step"  # a driver update happens at one instant
        return self.shape or FAULT_KINDS[self.kind].default_shape

    @property
    def resolved_target(self) -> str | None:
        return self.target or DEFAULT_TARGETS.get(self.kind)

    def envelope(self, t_s: np.ndarray) -> np.ndarray:
        """0..1 strength at seconds-from-start ``t_s``."""
        start_s = self.start_h * 3600.0
        if self.resolved_shape == "step":
            env = (t_s >= start_s).astype(np.float64)
        else:
            env = np.clip((t_s - start_s) / (self.ramp_h * 3600.0), 0.0, 1.0)
        if self.end_h is not None:
            env = np.where(t_s >= self.end_h * 3600.0, 0.0, env)
        return env

    def truth(self, t0: float) -> dict[str, Any]:
        cause, component, mechanism, _, _, meaning = FAULT_KINDS[self.kind]
        gradual = self.resolved_shape == "gradual"
        return {
            "kind": self.kind, "cause": cause, "component": component, "mechanism": mechanism,
            "is_fault": True, "start_ts": t0 + self.start_h * 3600.0,
            "full_ts": t0 + self.start_h * 3600.0 + (self.ramp_h * 3600.0 if gradual else 0),
            "end_ts": None if self.end_h is None else t0 + self.end_h * 3600.0,
            "start_h": self.start_h, "magnitude_pct": round(self.magnitude * 100.0, 6),
            "magnitude_meaning": meaning, "shape": self.resolved_shape,
            "ramp_h": self.ramp_h if gradual else 0.0, "target": self.resolved_target,
        }


def with_overrides(
    fault: FaultSpec, magnitude_pct: float | None = None, shape: str | None = None,
    start_h: float | None = None,
) -> FaultSpec:
    """The same fault with command-line overrides applied (None keeps the value)."""
    changes: dict[str, Any] = {"magnitude_pct": magnitude_pct, "shape": shape, "start_h": start_h}
    return replace(fault, **{name: value for name, value in changes.items() if value is not None})


def driver_resets_s(faults: tuple[FaultSpec, ...]) -> list[int]:
    """Seconds from the start at which a driver update resets every GPU's energy counter."""
    return [round(f.start_h * 3600.0) for f in faults if f.kind == "gpu_driver"]


def combined(
    faults: tuple[FaultSpec, ...], kind: str, t_s: np.ndarray, target: str | None = None
) -> np.ndarray:
    """Sum of magnitude × envelope of every fault of ``kind`` (on ``target`` if given; 0 when none)."""
    total = np.zeros(t_s.shape)
    for fault in faults:
        if fault.kind == kind and (target is None or fault.resolved_target == target):
            total = total + fault.magnitude * fault.envelope(t_s)
    return total
