"""The shared cooling unit (crac 1): outdoor cycle, other racks' heat, lagged removal, COP.

Electrical power = heat removed / COP + fan power. Heat removed follows the heat load (this
rack's electrical power plus the other racks' heat) through a dead time and a first-order lag.
COP is a fraction of the Carnot COP between evaporator (supply air − approach) and condenser
(outdoor air + approach), so it follows the daily outdoor cycle and the setpoint, times a
part-load factor that peaks at ``part_load_best``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from agent.sim.lag import delay, first_order_lag
from agent.sim.params import CoolingParams

AIR_CP_J_PER_KG_K = 1005.0
KELVIN = 273.15


@dataclass(frozen=True)
class Environment:
    """Slow, seed-dependent but rack-independent conditions, as functions of absolute time."""

    cooling: CoolingParams
    phases: tuple[float, float, float]  # radians: other-racks (two periods), outdoor day-to-day
    swing_enabled: bool = True

    def outdoor_c(self, ts: np.ndarray) -> np.ndarray:
        c = self.cooling
        hour = (ts % 86400.0) / 3600.0
        daily = c.outdoor_daily_amp_c * np.cos(2 * math.pi * (hour - c.outdoor_peak_hour) / 24.0)
        drift = (
            1.5 * np.sin(2 * math.pi * ts / (4.1 * 86400.0) + self.phases[2]) if self.swing_enabled else 0.0
        )
        return c.outdoor_mean_c + daily + drift

    def other_racks_w(self, ts: np.ndarray) -> np.ndarray:
        c = self.cooling
        if not self.swing_enabled:
            return np.full(ts.shape, c.other_racks_w)
        wave = 0.6 * np.sin(2 * math.pi * ts / (6.3 * 3600.0) + self.phases[0]) + 0.4 * np.sin(
            2 * math.pi * ts / (26.0 * 3600.0) + self.phases[1]
        )
        return c.other_racks_w * (1.0 + c.other_swing * wave)


@dataclass
class CoolingState:
    removed_w: float  # heat being removed now (lag state)
    heat_history_w: np.ndarray  # last dead_s seconds of heat load (dead-time buffer)


def removal(c: CoolingParams, heat_w: np.ndarray, state: CoolingState) -> tuple[np.ndarray, CoolingState]:
    """Heat removed per second for heat load ``heat_w``: dead time, then first-order lag."""
    delayed, history = delay(heat_w, state.heat_history_w)
    removed = first_order_lag(delayed, c.tau_s, state.removed_w)
    return removed, CoolingState(float(removed[-1]), history)


def cop(
    c: CoolingParams, supply_c: np.ndarray, outdoor_c: np.ndarray, part_load: np.ndarray,
    degradation: np.ndarray,
) -> np.ndarray:
    """Coefficient of performance: Carnot fraction × part-load factor × (1 − degradation)."""
    t_evap = supply_c - c.evap_approach_k + KELVIN
    t_cond = outdoor_c + c.cond_approach_k + KELVIN
    carnot = t_evap / np.maximum(t_cond - t_evap, 5.0)
    pl = np.clip(part_load, 0.0, 1.2)
    part = 1.0 - c.part_load_penalty * ((pl - c.part_load_best) / c.part_load_best) ** 2
    cop: np.ndarray = c.carnot_fraction * carnot * np.clip(part, 0.3, 1.0) * (1.0 - degradation)
    return cop


def unit_signals(
    c: CoolingParams, removed_w: np.ndarray, supply_c: np.ndarray, setpoint_c: np.ndarray,
    outdoor_c: np.ndarray, degradation: np.ndarray,
) -> dict[str, np.ndarray]:
    """Clean cooling-unit signals for heat removal ``removed_w``."""
    plr = removed_w / c.capacity_w
    fan = np.clip(c.fan_min_pct + (100.0 - c.fan_min_pct) * plr, c.fan_min_pct, 100.0)  # tracks the heat
    cop_now = cop(c, supply_c, outdoor_c, plr, degradation)
    airflow = c.airflow_kg_s * fan / 100.0
    return {
        "power_w": removed_w / cop_now + c.fan_max_w * (fan / 100.0) ** 3,
        "supply_temp_c": supply_c,
        "return_temp_c": supply_c + removed_w / (airflow * AIR_CP_J_PER_KG_K),
        "setpoint_c": setpoint_c,
        "fan_pct": fan,
        "cooling_w": removed_w,
        "cop": cop_now,
        "outdoor_c": outdoor_c,
    }
