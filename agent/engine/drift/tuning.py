"""Every threshold of the drift detector, in one table (mirrored in docs/drift-playbook.md#tuning).

Why one table: a threshold next to its code is found by nobody who tunes (20 of them silently
assumed 60-s bins). Each number is in seconds (converted by ``bins(seconds, bin_s)``), in the
residual's unit (% of expected power, °C for the inlet spread), in σ or in the CUSUM threshold
``h`` (not tuned: it follows from the false-alarm target, ``threshold.py``), and names the principle
or bench run that set it ("twin bench": ``bench/drift.py``, fixed and ``--randomized`` dev seeds).
``NAMES`` are the tuned numbers (issue 16: ≤ 40); ``DERIVED`` names each use of a shared principle
under its code's name, defined from tuned numbers by formula only; ``FACTS`` are not thresholds
(time units, the daily cycle, device reading steps). Cooling-model priors are physics and stay
in ``cooling_model.py``.
"""

from __future__ import annotations

import math

HOUR_S = 3600.0  # s: the unit of the longer durations
DAY_S = 86400.0  # the daily cycle of weather and use: the one period every rack has

# --- measured facts (not tuned: the devices' own, with their source) ----------------------------
READING_STEP_C = 0.1  # °C: rack inlet probes and a cooling unit's setpoint read in tenths of a
# degree (shared/devices/PROTOCOLS.md §2: rPDU2SensorTempHumidityStatusTempC in tenths of °C;
# shared/devices/MODBUS-NOTES.md: setpoints at scale 10)
FACTS: tuple[str, ...] = ("HOUR_S", "DAY_S", "READING_STEP_C")

# --- the residual detector (channel.py) --------------------------------------------------------
CUSUM_K = 1.0  # σ: reference value; a CUSUM detects shifts of ≈ 2k σ fastest (Page): 2 σ of block noise
Z_CLIP = 6.0  # σ of what it is judged against: one bin or block adds at most this (a glitch cannot
# confirm a shift alone)
BLOCK_S = 180.0  # bins averaged into blocks of 3 min: the residual's minute-scale wobble averages out
DETECT_AFTER_S = 6480.0  # 36 blocks of learning before detection starts (block noise then known to ±13 %)
SHOW_S = HOUR_S  # a new level shows itself within an hour: a stage, a job's work rate, a step
NOISE_HALFLIFE_S = 2.0 * DAY_S  # noise is learned over two days: slower than the level it scales
FOLLOW_HALFLIFE_S = 1800.0  # a new normal (grace) or a new job's work rate is followed within ½ h
AFTERMATH_S = 3.0 * HOUR_S  # a change point's open questions are settled within 3 h (a suspicion
# that never confirms, a shift that may still be the new job's, a step judged against "before")
SLOW_S = 6.0 * HOUR_S  # the slowest change told from a new normal: a 6-h ramp (held, delayed, pending)
MAX_RHO = 0.6  # block autocorrelation counted up to this (VIF ≤ 4): a long stretch cannot mute it
MIN_BLOCK_SCALE = 0.2  # σ: floor of the block z scale (a calm week must not make it hair-trigger)
MIN_EVIDENCE_S = 900.0  # a confirmed shift's evidence spans ≥ 15 min: no blips (twin bench)
SUSPECT_FRAC = 0.4  # × h: learning stops once the CUSUM is this far (a fault must not be learned)
CALM_FRAC = 0.15  # × h: noise learns only below this (never from a shift in the making)
CLEAR_FRAC = 0.6  # × h: a reverse CUSUM ("back below half the onset") this far clears an onset
MOVING_FRAC = 0.25  # × h: a CUSUM this far is "moving with" another residual (evidence, attribution)
FALSE_ALARM_MARGIN = 20.0  # ARL0 × this: residual blocks are not Gaussian nor independent (twin bench)

# The smallest shift worth an alarm, and the floor of a bin's noise (the readings' resolution).
MIN_EFFECT_PCT = 1.5  # %: ½ of the 3 % target (IT and GPU power)
BLIND_COOLING_MIN_EFFECT_PCT = 2.5  # %: cooling power with the weather unexplained
WEATHER_COOLING_MIN_EFFECT_PCT = 2.0  # %: the weather no longer hides 2 % (twin bench, cooling ramps)
POWER_RESOLUTION_PCT = 0.2  # %: a PDU's (and a unit's) power reading resolution
MOVED_STEPS = 2.0  # reading steps: a temperature moved by two of its steps moved (one step is
# rounding): the setpoint changed (SETPOINT_MOVED_C), the inlet spread shifted (SPREAD_EFFECT_C)

# The cooling unit without an outdoor temperature: its efficiency wanders with the weather, so
# its level follows a local trend and each bin is judged against the level an hour before.
BLIND_COOLING_LEVEL_HALFLIFE_S = 2.0 * HOUR_S  # the blind cooling level follows the weather's drift
UNIT_WEATHER_HALFLIFE_S = 3.0 * DAY_S  # the unit model's fit once the outdoor temperature explains weather

# --- the monitor (monitor.py) ------------------------------------------------------------------
RELEARN_S = 2.0 * HOUR_S  # the longest re-learn: a model still behind after 2 h is judged anyway
IT_LOAD_STEP_FRAC = 0.3  # GPU power moved this much since the last bin: a load step …
LOAD_SETTLE_S = 120.0  # … after which server fans and GPU dies settle for 2 min: not judged on the
# IT side nor as GPU power at rest (the fans and leakage follow the heat; on the IT side a
# block's 3 min gave the fixed twin bench's 3 % power-chain step a thermal name)
RATE_BAND_FRAC = 0.03  # a job's work rate wobbles ≤ 3 % bin to bin: within it, "the usual rate"
BUILDING_FRAC = 0.5  # × min effect: an IT suspicion this large before a job change is judged on

# --- the signal context (context.py) -----------------------------------------------------------
RATE_REACQUIRE_FRAC = 0.6  # this share of recent bins off the typical rate: a new rate (new job)
RATE_FIRST_BINS = 5  # a fresh typical rate is the median of a stage's first 5 bins (one may be cut)

# --- attribution (attribution.py, events.py) ---------------------------------------------------
INLET_MEAN_MOVED_C = 0.5  # °C: inlets warmer (not raised by the setpoint): the air changed
SPREAD_MOVED_C = 0.3  # °C: twice the inlet sensors' noise: a wider spread is a hot spot, a mean moved
MIX_MOVED = 0.3  # share of time: the stage mix changed
EXPLAINS_PCT = 1.0  # %: the smallest move of a measured cause that explains a residual's shift

# --- change points (changepoint.py and its parts) ----------------------------------------------
SAME_WORK_RATE_FRAC = 0.15  # typical rates within 15 %: the same work (two models differ by more)
SAME_WORK_POWER_FRAC = 0.08  # unlabelled: GPU level within 8 %: same work (a driver update adds 4–6 %)
SAME_RATE_FRAC = 0.10  # a stage's work rate within 10 % of another is that rate: the previous
# job's GPU level can stand for it (PINNED_RATE_FRAC), a bin below the stage's top by more was cut
# short by a stall (STALL_FRAC)
RESET_GROUP_S = 600.0  # counter resets within 10 min are one restart (several GPUs; at a job change)
INPUT_Z = 4.0  # σ of the mean: a measured cause needs no ARL margin, only a clear step

NAMES: tuple[str, ...] = tuple(
    name for name, value in list(globals().items())
    if name.isupper() and name not in FACTS and isinstance(value, (int, float, dict))
)

# ===================================================================== derived (no number of their own)
LEVEL_HALFLIFE_S = DAY_S  # "usual" is what the rack did over one daily cycle
HALF_CYCLE_S = DAY_S / 2.0  # half a daily cycle: "before" that the day's swing does not move
RELEASE_FRAC = CALM_FRAC  # × h: a suspicion that fell back to the calm level was noise
SHIFT_NOW_WEIGHT = 2.0 / (MIN_EVIDENCE_S / BLOCK_S + 1.0)  # per block: "the shift as it is now" is
# the EW mean over the shortest evidence span (an EW mean's span N has weight 2 / (N + 1))
CONTEXT_FAST_HALFLIFE_S = FOLLOW_HALFLIFE_S  # "now" of setpoint, inlets and fan: followed within ½ h
INPUT_SAMPLE_S = BLOCK_S  # one independent sample of the residual per block (its decorrelation time)
BLIND_COOLING_MAX_SUSPECT_S = SHOW_S  # the blind cooling channel judges against its level an hour
# before: a suspicion longer than that compares the shift with itself
WORK_RATE_MOVED_PCT = 100.0 * RATE_BAND_FRAC  # %: a rate beyond its bin-to-bin wobble moved
PINNED_RATE_FRAC = SAME_RATE_FRAC  # per stage: the previous job's GPU level can stand for it
STALL_FRAC = 1.0 - SAME_RATE_FRAC  # bins under this share of a stage's top rate were stall-shortened
SETPOINT_MOVED_C = MOVED_STEPS * READING_STEP_C  # °C: the setpoint changed
SPREAD_EFFECT_C = MOVED_STEPS * READING_STEP_C  # °C: the smallest inlet-spread shift worth an alarm
INPUT_START_C = READING_STEP_C / 2.0  # °C: the setpoint left its resting value (half a reading step:
# any change it can read)
INLET_RESOLUTION_C = READING_STEP_C / math.sqrt(12.0)  # °C: an inlet reading's rounding noise
# (uniform over one step: step / √12)
COOLING_RESOLUTION_PCT = math.sqrt(2.0) * POWER_RESOLUTION_PCT  # %: the cooling residual is a ratio
# of two readings (their rounding adds in quadrature)
STAGE_WARM_S = SHOW_S  # an hour of a stage (or work rate, or stage mix, or a cooling unit's load
# band) before it is judged
SAME_LOAD_FRAC = SAME_RATE_FRAC  # a cooling unit's load within 10 % of another: the same operating
# point of its part-load curve (cooling_model.py's load bands)
DECIDE_WITHIN_S = SHOW_S  # a new job shows a comparable rate within an hour, else it is new work
BLIND_COOLING_REFERENCE_DELAY_S = SHOW_S  # a step stays visible for an hour
UNIT_WARM_S = HALF_CYCLE_S  # half a day of learning before residuals: the outdoor term needs no full
# day to be seen; without it the channel judges each bin against its level an hour before
# (BLIND_COOLING_MAX_SUSPECT_S), so the daily terms need only hold over an hour. A day (as before)
# left faults of the first day learned as the unit's normal
BLIND_COOLING_TREND_HALFLIFE_S = HALF_CYCLE_S  # the blind cooling level's trend: half a daily cycle
CONTEXT_REF_HALFLIFE_S = HALF_CYCLE_S  # "before" of setpoint, inlets, fan, work rate
INPUT_AFTER_S = FOLLOW_HALFLIFE_S  # at least ½ h of the residual after a setpoint move
MAX_SUSPECT_S = AFTERMATH_S  # a suspicion that never confirms becomes the normal after this
JOB_RECENT_S = AFTERMATH_S  # a shift this soon after a job change can be the job's
RESET_JUDGE_S = AFTERMATH_S  # a GPU step at a counter reset is judged this long against "before"
MIX_FAST_HALFLIFE_S = AFTERMATH_S  # the recent stage mix
RESET_NAMED_S = AFTERMATH_S + SHOW_S  # a GPU onset this soon after a reset names it (judged, then an
# hour for an onset to confirm)
HELD_TREND_HALFLIFE_S = SLOW_S  # while held, the extrapolated trend fades out
WEATHER_COOLING_MAX_SUSPECT_S = SLOW_S  # a 6-h ramp may stay under 2 % for hours
UNIT_LEARN_DELAY_S = SLOW_S  # a bin is learned this much later: a creeping fault is not learned
UNIT_OUTDOOR_LOST_S = SLOW_S  # outdoor temperature missing this long: back to the daily terms
ACCEPT_GRACE_S = SLOW_S  # an accepted deviation re-centres this long
COOLING_SETTLE_S = SLOW_S  # a restarted cooling-unit model's residual level settles this long
INPUT_MAX_PENDING_S = SLOW_S  # a move whose effect never shows this long after the setpoint's
# last step away is the new normal (a slow ramp is judged while it goes on)
MIN_EFFECT = {"it": MIN_EFFECT_PCT, "gpu": MIN_EFFECT_PCT,  # per channel: the smallest shift alarmed
              "gpu_idle": MIN_EFFECT_PCT, "cooling": BLIND_COOLING_MIN_EFFECT_PCT, "thermal": SPREAD_EFFECT_C}
MIN_BIN_NOISE = {"it": POWER_RESOLUTION_PCT, "gpu": POWER_RESOLUTION_PCT,  # per channel: its resolution
                 "gpu_idle": POWER_RESOLUTION_PCT, "cooling": COOLING_RESOLUTION_PCT,
                 "thermal": INLET_RESOLUTION_C}
WITH_IT_GPU_PCT = EXPLAINS_PCT  # a GPU residual moving this much the same way explains an IT shift
INPUT_MIN_EFFECT_PCT = EXPLAINS_PCT  # the smallest cooling-power change reported with a setpoint move
EVIDENCE_MOVED = {"setpoint_c": SETPOINT_MOVED_C,  # context listed as evidence once it moved enough
                  "inlet_mean_c": SPREAD_MOVED_C, "inlet_spread_c": SPREAD_EFFECT_C,  # to matter
                  "fan_pct": EXPLAINS_PCT, "work_rate_pct": EXPLAINS_PCT, "stage_mix": MIX_MOVED}
BEHIND_Z = 2.0 * CUSUM_K  # σ: a model off by more is behind (catch_up.py): the shift a CUSUM detects
# fastest (Page's 2 k)

DERIVED: tuple[str, ...] = tuple(
    name for name, value in list(globals().items())
    if name.isupper() and name not in (*NAMES, *FACTS, "NAMES", "FACTS")
    and isinstance(value, (int, float, dict))
)


def bins(seconds: float, bin_s: float) -> float:
    """A duration as a number of drift bins of ``bin_s`` seconds (what the estimators count)."""
    if not bin_s > 0:
        raise ValueError(f"drift bin width must be > 0 s, got {bin_s}")
    return seconds / bin_s


def whole_bins(seconds: float, bin_s: float) -> int:
    """A duration as a whole number of bins, at least one."""
    return max(1, math.floor(bins(seconds, bin_s) + 0.5))


def block_bins(bin_s: float) -> int:
    """Bins per CUSUM block: the channels' block and the threshold's must be the same length."""
    return whole_bins(BLOCK_S, bin_s)
