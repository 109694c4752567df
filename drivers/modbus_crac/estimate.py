"""Electrical power of a cooling unit that reports none, from what it does report (PROTOCOLS.md §3.6).

    fans:        P_fan  = rated_fan_power_w × max((fan_pct/100)³, 0.10)      (0 when fan_pct = 0)
    compressor:  P_comp = rated_compressor_power_w × compressor_pct/100 if both are known,
                 else cooling_w / COP; none for chilled-water units

The exponent 3 is the fan affinity law (EC fans measure 2.5–3); the 10 % floor is the electronics
and bearing load of a running fan. COP 3.5 is the middle of the 3–4 full-load range for DX units;
part-load COP can be far higher (a real InRow DX: 10.8 kW cooling for 1.44 kW compressor), so the
compressor term errs high at part load. Without any term the signal stays missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from drivers.modbus_crac.config import COOLING_KINDS, CracConfig
from drivers.modbus_crac.profiles import ProfileError

FAN_EXPONENT = 3.0
FAN_FLOOR_FRACTION = 0.10


@dataclass(frozen=True)
class EstimateInputs:
    rated_fan_power_w: float | None
    rated_compressor_power_w: float | None
    cooling_kind: str  # dx | chilled_water | unknown
    cop: float


def estimate_inputs(cfg: CracConfig, cooling_kind: str, cop: float) -> EstimateInputs:
    """The unit's rated powers from its [[crac]] table, with the cooling kind and COP it has (the
    table's kind, else its profile's); one owner for both cooling-unit drivers."""
    if cooling_kind not in COOLING_KINDS:
        raise ProfileError(f"crac '{cfg.id}': cooling_kind must be one of {', '.join(COOLING_KINDS)}, "
                           f"got {cooling_kind!r}")
    return EstimateInputs(cfg.rated_fan_power_w, cfg.rated_compressor_power_w, cooling_kind, cop)


def fan_power_w(fan_pct: float, rated_w: float) -> float:
    if fan_pct <= 0:
        return 0.0
    fraction = min(fan_pct, 100.0) / 100.0
    return rated_w * max(fraction**FAN_EXPONENT, FAN_FLOOR_FRACTION)


def compressor_power_w(signals: Mapping[str, float], inputs: EstimateInputs) -> float | None:
    if inputs.cooling_kind == "chilled_water" or inputs.rated_compressor_power_w == 0:
        return None
    load_pct = signals.get("compressor_pct")
    if load_pct is not None and inputs.rated_compressor_power_w is not None:
        return inputs.rated_compressor_power_w * max(0.0, min(load_pct, 100.0)) / 100.0
    cooling_w = signals.get("cooling_w")
    if cooling_w is not None:
        return max(cooling_w, 0.0) / inputs.cop
    return None


def estimate_power_w(signals: Mapping[str, float], inputs: EstimateInputs) -> float | None:
    """Estimated electrical input power in W, or None when nothing measured supports one.

    ``signals`` are the unit's decoded values keyed by suffix ("fan_pct", "cooling_w", …).
    """
    terms: list[float] = []
    fan_pct = signals.get("fan_pct")
    if fan_pct is not None and inputs.rated_fan_power_w is not None:
        terms.append(fan_power_w(fan_pct, inputs.rated_fan_power_w))
    compressor = compressor_power_w(signals, inputs)
    if compressor is not None:
        terms.append(compressor)
    return sum(terms) if terms else None
