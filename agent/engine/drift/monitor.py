"""``DriftMonitor``: per-component residual detectors → drift events, held and re-learning sets.

Per bin the engine calls ``observe(sample)`` and reads ``held`` (must not learn now) and
``relearn`` (re-learn fast). ``accept(...)`` takes a new normal; an incident unacknowledged for
``accept_after_h`` is accepted automatically. Lag is not drift: the cooling residual against the
engine's lag model skips ``transient`` bins; the others compare quantities that move together
within a bin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from agent.config.model import EngineSection
from agent.engine.components import COMPONENTS, LEARNED, ComponentSample, residuals
from agent.engine.drift import tuning as T
from agent.engine.drift.attribution import CAUSES, attribute, costs, saving
from agent.engine.drift.changepoint import ChangePointJudge
from agent.engine.drift.channel import (
    ACTIVE,
    SUSPECTED,
    ChannelParams,
    ResidualChannel,
    Transition,
    params_for,
)
from agent.engine.drift.context import STAGE_SLOTS, WHOLE_BIN, SignalContext, stage_slot
from agent.engine.drift.cooling_model import RESTART_WARM_S, CoolingUnitModel
from agent.engine.drift.estimators import finite_or_none, number_or_nan
from agent.engine.drift.events import drift_event, evidence_for
from agent.engine.drift.input_step import MeasuredShift
from agent.engine.drift.same_work import SAME, WorkVerdict
from agent.engine.drift.threshold import threshold_for_target

STATE_VERSION = 2  # 2: channels and context persist their estimators (estimators.py)
RE_WARM_VERSIONS = frozenset({1})  # layouts that no longer map: the monitor re-warms (about a day)
MAX_PENDING = 8  # events kept for the next observe() when an accept happened while stopped
# One channel per component (agent/engine/components.py), and the GPUs at rest: idle power is the
# hardware's (leakage, clocks, driver), no job sets it, so unlike the per-stage GPU level it is kept
# across job changes: the one GPU level a churning rack holds long enough to show ageing or a driver
# that draws more.
CHANNELS: tuple[str, ...] = (*COMPONENTS, "gpu_idle")
LEARNING_COMPONENTS: tuple[str, ...] = LEARNED
# Which engine components must stop learning while a channel is suspected or active.
HOLDS: dict[str, frozenset[str]] = {
    "it": frozenset({"it"}),
    "cooling": frozenset({"cooling"}),
    "gpu": frozenset({"gpu"}),
    "thermal": frozenset({"it"}),  # server fans fighting a hot spot show up on the IT side
    "gpu_idle": frozenset(),  # the job's GPU model learns on: its own channel judges the job's level
}
WORKLOAD_COMPONENTS: tuple[str, ...] = ("gpu", "it")  # what a new job changes: GPU and server load
# Components whose re-learn is paced by how far their model is behind (``catch_up``): only those whose
# detector judges its own per-stage level (GPU). Pacing IT, judged on the model's residual, let the
# model keep adapting after its detector re-centred (fixed twin bench, plateau: a false power_chain
# onset; dev seed 2 churn: P95 2.75 % against 2.67 %).
PACED_COMPONENTS = frozenset({"gpu"})
# Components a new job changes in part only: the engine measures the job's own level from the change
# (``work_changed_ts``, model.JobLevel) instead of forgetting fast; the IT side's GPU curve (PSUs,
# fans) is the rack's, not the job's. Their detectors still re-centre for the bounded period.
LEVEL_COMPONENTS = frozenset({"it"})
CAUSE_COMPONENTS: dict[str, tuple[str, ...]] = {
    "cooling": ("cooling",),
    "power_chain": ("it",),
    "thermal": ("thermal", "it"),
    "gpu_hardware": ("gpu", "gpu_idle"),
    "workload": ("gpu",),
    "unknown": CHANNELS,
}


@dataclass
class Incident:
    """One confirmed deviation, named by its cause; the channels that carry it."""

    cause: str
    stage: str
    onset_ts: float
    since_ts: float
    deviation: float
    component: str
    channels: set[str] = field(default_factory=set)
    job: str = ""


def channel_params(config: EngineSection, bin_s: float) -> dict[str, ChannelParams]:
    """Per-channel tuning (cooling as without outdoor air), thresholds from the false-alarm target."""
    block_s = T.block_bins(bin_s) * bin_s
    detectors = 2 * len(CHANNELS)  # two-sided CUSUMs
    h = threshold_for_target(config.false_alarms_per_30d, block_s, detectors, T.CUSUM_K, T.FALSE_ALARM_MARGIN)
    return {name: params_for(name, h, bin_s, len(STAGE_SLOTS), drivers_measured=False) for name in CHANNELS}


class DriftMonitor:
    """Sustained-deviation detection and cause attribution over ``ComponentSample`` bins."""

    def __init__(self, config: EngineSection | None = None, bin_s: float = 60.0) -> None:
        self.config = config or EngineSection()
        self.bin_s = bin_s
        self._params = channel_params(self.config, bin_s)
        self._rest_settle_bins = T.whole_bins(T.LOAD_SETTLE_S, bin_s)
        # Once the unit reports its outdoor air, a slow cooling level: a creeping coil or COP loss
        # accumulates in the CUSUM instead of being followed as weather.
        h, slots = self._params["cooling"].threshold_h, len(STAGE_SLOTS)
        self._cooling_explained_params = params_for("cooling", h, bin_s, slots, drivers_measured=True)
        self._reset()

    def _reset(self) -> None:
        self.channels = {name: ResidualChannel(name, params) for name, params in self._params.items()}
        self.context = SignalContext(self.bin_s)
        self.cooling_model = CoolingUnitModel(self.bin_s)
        self.changes = ChangePointJudge(self.bin_s)
        self._input_shift: MeasuredShift | None = None
        self.incidents: dict[str, Incident] = {}
        self._relearn_until: dict[str, float] = {}
        self._workload_until = math.nan
        self.work_changed_ts = math.nan  # the last new-work change point: the job's levels are its own
        self.job_started_ts = math.nan  # a new job whose kind is still being judged (NaN: none)
        self._last_ts = math.nan
        self._last_gpu_w = math.nan  # (not saved: a restart only judges one more bin)
        self._it_skip = 0
        self._pending: list[dict[str, object]] = []  # events made while stopped (offline accept)
        self.adopted: dict[str, int] = {}  # per channel: saving shifts adopted without an event
        # A GPU onset whose verdict must first hold (``Attribution.persist_s``, set only for GPU
        # verdicts): judged again then.
        self._unproven: Transition | None = None

    # ------------------------------------------------------------------------------ reading
    @property
    def held(self) -> frozenset[str]:
        """Engine components that must not learn now (suspected or active deviation)."""
        out: set[str] = set()
        for name, channel in self.channels.items():
            if channel.held:
                out |= HOLDS[name]
        if self.changes.holds:  # a new job of unknown work: neither its nor a fault's level is learned
            out |= set(WORKLOAD_COMPONENTS)
        return frozenset(out & set(LEARNING_COMPONENTS))

    @property
    def work_change(self) -> tuple[float, float, float]:
        """(last new-work change point, end of its re-learn, start of a job whose kind is being judged)
        for the engine's job level (model.JobLevel)."""
        return self.work_changed_ts, self.work_changed_ts + T.RELEARN_S, self.job_started_ts

    @property
    def faulted(self) -> frozenset[str]:
        """Engine components that carry a confirmed fault (not a suspicion, not a job change)."""
        return self._components_with_incidents() & frozenset(LEARNING_COMPONENTS)

    @property
    def relearn(self) -> frozenset[str]:
        """Engine components to re-learn fast now (new workload, accepted new normal): within their
        bounded re-learn and, if paced, only while their model is behind by more than its noise."""
        ts = self._last_ts
        out = frozenset(c for c, until in self._relearn_until.items()
                        if math.isfinite(ts) and ts < until
                        and (c not in PACED_COMPONENTS or self.changes.catch_up.behind(c)))
        return out - {"gpu"} if self.changes.resets.blocks_relearn else out  # a reset is judged

    @property
    def relearn_halflife_h(self) -> dict[str, float]:
        """Per paced component in ``relearn``: the forgetting half-life (h) for how far it is behind."""
        out = {c: self.changes.catch_up.halflife_s(c) / 3600.0 for c in self.relearn & PACED_COMPONENTS}
        return {c: h for c, h in out.items() if math.isfinite(h)}

    def status(self) -> dict[str, object]:
        """Compact per-channel view for summaries and debugging."""
        return {
            name: {"mode": ch.mode, "cusum": round(ch.cusum, 2), "scale": ch.scale,
                   "adopted": self.adopted.get(name, 0)}
            for name, ch in self.channels.items()
        }

    # ------------------------------------------------------------------------------ updating
    def observe(self, sample: ComponentSample) -> list[dict[str, object]]:
        """Absorb one bin; returns the report events it caused (usually none)."""
        ts = float(sample.ts)
        self._last_ts = ts
        events, self._pending = self._pending, []
        frozen = any(ch.held for ch in self.channels.values())
        if self.context.update(sample, frozen):
            events += self._job_changed(sample)
        elif self.context.resumed:
            self.changes.work.start_by_power(ts, self.context)
            self.job_started_ts = ts  # (unlabelled) perhaps a new job: judged by its GPU power next
        events += self._judge_job_change(sample)
        if math.isfinite(self._workload_until):
            if ts >= self._workload_until:
                events += self._end_workload(sample)
            else:
                self.context.resync()  # while re-learning, "usual" is whatever the new job does
        in_workload = math.isfinite(self._workload_until) and ts < self._workload_until
        settled = not any(ts < until for until in self._relearn_until.values()) and not self.changes.holds
        self.changes.before_bin(sample, self.channels["gpu"], self.channels["gpu_idle"], in_workload, settled)
        slot = stage_slot(sample.stage)
        residuals = self._residuals(sample)
        for name, residual in residuals.items():
            # The unit model is not per stage, nor is rest: one location (slot 0) for their residuals.
            where = 0 if name == "gpu_idle" or (name == "cooling" and self.cooling_model.source) else slot
            tr = self.channels[name].add(residual, where, ts)
            if tr is not None and tr.kind == "onset":
                events += self._onset(name, tr, sample)
            elif tr is not None and tr.kind == "cleared":
                events += self._channel_cleared(name, tr, sample)
        events += self._judge_unproven(sample)
        rest_min_effect = self.channels["gpu_idle"].params.min_effect
        rest_shift = self.changes.rest.update(residuals.get("gpu_idle", math.nan), ts, rest_min_effect)
        if rest_shift is not None:
            events += self._rest_onset(rest_shift, sample)
        shift, self._input_shift = self._input_shift, None
        if shift is not None:
            events += self._input_onset(shift, sample)
        events += self._auto_accept(ts)
        return events

    def _input_onset(self, shift: MeasuredShift, sample: ComponentSample) -> list[dict[str, object]]:
        """A setpoint move with the matching cooling-power change (its explanation names the move)."""
        text = self.changes.input.explanation(shift.deviation_pct, float(sample.ts))
        return self._measured_onset("cooling", "cooling", shift, text, sample)

    def _rest_onset(self, shift: MeasuredShift, sample: ComponentSample) -> list[dict[str, object]]:
        """A driver reload with a clear step of the GPUs' power at rest (its explanation names it)."""
        text = self.changes.rest.explanation(shift, int(self.changes.resets.counters))
        return self._measured_onset("gpu_idle", "gpu_hardware", shift, text, sample)

    def _measured_onset(
        self, name: str, cause: str, shift: MeasuredShift, text: str, sample: ComponentSample
    ) -> list[dict[str, object]]:
        """A clear step at a measured change point: a ``cause`` onset on channel ``name``, judged
        against the level before the change and below the channel's false-alarm threshold (the cause
        is measured, not guessed). A saving is a new normal; a shift the channel or another onset
        found already is not reported twice (its explanation names the change point too)."""
        channel = self.channels[name]
        if channel.mode == ACTIVE or cause in self.incidents:
            return []
        if not costs(cause, shift.deviation_pct):
            return self._adopt(name, float(sample.ts))
        tr = channel.force_onset(float(sample.ts), shift.deviation_pct, shift.since_ts, shift.before_pct, 0)
        self.incidents[cause] = Incident(cause, sample.stage, tr.ts, tr.since_ts, tr.deviation, name, {name},
                                         self.context.job)
        evidence = self._evidence(name, cause, tr)
        return [drift_event(tr.ts, "onset", cause, sample.stage, round(tr.deviation, 2), name,
                            tr.since_ts, evidence, text)]

    def _evidence(self, name: str, cause: str, tr: Transition) -> list[dict[str, object]]:
        """An onset's evidence: the residuals and context that moved, then the change points behind
        it (a change point's own item, such as a setpoint move, replaces the context's)."""
        points = self.changes.evidence(cause, tr.ts, self.context.job)
        named = {item.get("signal") for item in points}
        evidence = evidence_for(name, tr, self.channels, self.context)
        return [e for e in evidence if e.get("signal") not in named] + points

    def _residuals(self, sample: ComponentSample) -> dict[str, float]:
        """This bin's residual per channel (NaN: no evidence). Cooling uses the unit's own model when
        the unit reports its load or fan speed, else the engine's lag model (``transient`` bins skipped)."""
        out = residuals(sample)
        out["gpu"] = self._gpu_residual(sample)
        out["gpu_idle"] = self._rest_residual(sample)
        # The unit model learns only from calm data: never from a shift being accumulated.
        cooling = self.channels["cooling"]
        learn = not cooling.held and cooling.cusum < T.CALM_FRAC * cooling.params.threshold_h
        learn = learn and not self.changes.input.pending  # never absorb a setpoint move being judged
        unit = self.cooling_model.residual_pct(
            sample.cooling_measured_w, sample.cooling_load_w, sample.fan_pct, sample.ts, learn,
            outdoor_c=float(sample.outdoor_c))
        self._follow_cooling_model(float(sample.ts))
        judged = unit if self.cooling_model.source else math.nan
        self._input_shift = self.changes.input.update(float(sample.setpoint_c), judged, float(sample.ts))
        if self.cooling_model.source:
            out["cooling"] = unit
        elif sample.transient:
            out["cooling"] = math.nan
        if self.changes.holds:  # judged once the new job's work is known (same baseline or re-learn)
            out["gpu"] = out["it"] = math.nan
        if self._after_load_step(float(sample.gpu_w)):
            out["it"] = math.nan
        return out

    def _after_load_step(self, gpu_w: float) -> bool:
        """True for the bin of a large GPU load step and the next: the server fans follow the GPUs'
        heat over minutes, so for a moment the PDU draws what the IT model does not expect (on the
        twin, +2 to +4 % in the first idle bin after a job is killed mid-step). That is lag, not
        drift; the IT model's own lag term covers the slower part."""
        last, self._last_gpu_w = self._last_gpu_w, gpu_w
        stepped = math.isfinite(last) and last > 0 and abs(gpu_w / last - 1.0) > T.IT_LOAD_STEP_FRAC
        if stepped and math.isfinite(gpu_w):
            self._it_skip = T.whole_bins(T.LOAD_SETTLE_S, self.bin_s)
        if self._it_skip > 0:
            self._it_skip -= 1
            return True
        return False

    def _cooling_params(self) -> ChannelParams:
        explained = self.cooling_model.weather_known
        return self._cooling_explained_params if explained else self._params["cooling"]

    def _follow_cooling_model(self, ts: float) -> None:
        """The unit model gained (or lost) an input: a change point with a measured cause; the channel
        takes the tuning of its new residual and re-centres until the restarted model settles."""
        channel = self.channels["cooling"]
        wanted = self._cooling_params()
        if channel.params is not wanted:
            channel.params = wanted
            channel.start_grace(ts + RESTART_WARM_S + T.COOLING_SETTLE_S)

    def _gpu_residual(self, sample: ComponentSample) -> float:
        """The bin's main stage's own GPU power (over its seconds only: a bin shared with other
        stages mixes their levels) in log-% against the channel's per-stage level (not the engine's
        work-rate model, whose wobble is no evidence). With a work rate, only bins at the stage's
        usual rate, and only stages that do work (rate > 0): a waiting stage's rate says nothing of
        its load. Without one, every stage (a training run that checkpoints every step or two is
        mostly checkpoint bins)."""
        watts = sample.stage_gpu_w
        if not (math.isfinite(watts) and watts > 0):
            return math.nan
        value = 100.0 * math.log(watts / 1000.0)
        if not self.context.rated:
            return value  # no work rate at all: the stage's own GPU power is all there is
        rate = sample.work_rate
        slot = stage_slot(sample.stage)
        # The rate most bins run at, not a mean: a mean sat ~2 % under full-rate bins (stall-shortened
        # bins pull it down) and the 3 % gate then dropped many of them.
        usual = self.context.typical_rate(slot)
        if not (math.isfinite(rate) and rate > 0 and math.isfinite(usual) and usual > 0):
            return math.nan
        if not self.context.rates.settled(slot):
            return math.nan  # a new job's first bins in this stage: its usual rate is not known yet
        if abs(rate / usual - 1.0) > T.RATE_BAND_FRAC:
            return math.nan
        return value

    def _rest_residual(self, sample: ComponentSample) -> float:
        """One GPU's power at rest in log-%: bins wholly idle once the last load has settled
        (``LOAD_SETTLE_S``: die temperature and leakage follow the heat), whatever job ran before."""
        settled = self.context.idle_bins > self._rest_settle_bins
        if sample.stage != "idle" or sample.stage_share < WHOLE_BIN or not settled:
            return math.nan
        watts = sample.gpu_mean_w
        return 100.0 * math.log(watts) if math.isfinite(watts) and watts > 0 else math.nan

    def _onset(self, name: str, tr: Transition, sample: ComponentSample) -> list[dict[str, object]]:
        if name == "it" and self._it_follows_gpu_incident(tr.deviation):
            self.incidents["gpu_hardware"].channels.add("it")  # cleared or accepted with it
            return []
        gpu_known = math.isfinite(sample.gpu_w)
        verdict = attribute(name, tr.deviation, self.channels, self.context, tr.ts, gpu_known, tr.since_ts)
        verdict = self.changes.revise(name, verdict, tr.deviation, tr.ts, self.context.job)
        if not costs(verdict.cause, tr.deviation):
            verdict = saving(name, tr.deviation)
            if not verdict.cause:
                return self._adopt(name, tr.ts)
        incident = self.incidents.get(verdict.cause)
        if incident is not None:
            if verdict.cause == "workload":
                self._begin_relearn(tr.ts)  # still changing: keep re-learning
            else:
                incident.channels.add(name)
            return []
        if tr.ts - tr.since_ts < verdict.persist_s and self.channels[name].mode == ACTIVE:
            self._unproven = tr  # held (the channel stays ACTIVE) but not reported yet
            return []
        incident = Incident(verdict.cause, sample.stage, tr.ts, tr.since_ts, tr.deviation, name, {name},
                            self.context.job)
        self.incidents[verdict.cause] = incident
        evidence = self._evidence(name, verdict.cause, tr)
        if verdict.cause == "workload":
            self._begin_relearn(tr.ts)
            incident.channels.clear()  # re-learning, not a deviation to clear or accept
        pct = _pct(name, tr, self.channels, stage_slot(sample.stage))
        return [drift_event(tr.ts, "onset", verdict.cause, sample.stage, pct,
                            name, tr.since_ts, evidence, verdict.explanation)]

    def _judge_unproven(self, sample: ComponentSample) -> list[dict[str, object]]:
        """An onset waiting to hold (``_unproven``): dropped once its channel leaves ACTIVE (the step
        went back, or a change point re-centred it), judged again, as it is now, once it held."""
        tr = self._unproven
        if tr is None:
            return []
        channel = self.channels["gpu"]
        if channel.mode != ACTIVE:
            self._unproven = None
            return []
        ts = float(sample.ts)
        if ts - tr.since_ts < T.SHOW_S:
            return []
        self._unproven = None
        now = Transition("onset", ts, channel.active_deviation, tr.z, tr.since_ts)
        if now.deviation * tr.deviation <= 0 or abs(now.deviation) < abs(tr.deviation) / 2:
            channel.clear(ts)  # back below half its onset: it did not hold (and no other verdict)
            return []
        return self._onset("gpu", now, sample)

    def _adopt(self, name: str, ts: float) -> list[dict[str, object]]:
        """A shift that saves energy on a fault channel: no event; the channel re-centres on the new
        level at once (its stage slots re-warm from their next bins), counted in ``status``."""
        self.channels[name].start_grace(ts + self.channels[name].params.block_bins * self.bin_s)
        self.adopted[name] = self.adopted.get(name, 0) + 1
        return []

    def _it_follows_gpu_incident(self, deviation: float) -> bool:
        """While the GPUs draw more than before (an active ``gpu_hardware`` incident), the IT model
        predicts PDU power for GPU loads it never learned: an IT shift no larger than the GPU's is
        that extrapolation, part of the GPU incident, not a second fault in the power chain."""
        incident = self.incidents.get("gpu_hardware")
        gpu = self.channels["gpu"]
        if incident is None or "gpu" not in incident.channels or gpu.mode != ACTIVE:
            return False
        return abs(deviation) <= max(abs(gpu.active_deviation), abs(incident.deviation))

    def _channel_cleared(self, name: str, tr: Transition, sample: ComponentSample) -> list[dict[str, object]]:
        for cause, incident in list(self.incidents.items()):
            if name not in incident.channels:
                continue
            incident.channels.discard(name)
            if incident.channels:
                continue
            del self.incidents[cause]
            text = f"The {cause.replace('_', ' ')} deviation on {name} ended."
            return [drift_event(tr.ts, "cleared", cause, incident.stage or sample.stage, None, name,
                                incident.since_ts, [], text, extra={"onset_ts": incident.onset_ts})]
        return []

    # ------------------------------------------------------------------------------ workload
    def _begin_relearn(
        self, ts: float, job_change_ts: float = math.nan, guessed: bool = False
    ) -> tuple[str, ...]:
        """A new workload: the GPU and IT baselines re-learn fast and their detectors re-centre.

        A component with a confirmed fault keeps it (a new job does not mend a PSU; re-learning
        would teach the baseline the fault), and so does an IT deviation already building before
        the job changed. ``job_change_ts``: the job change this follows once its kind check decided
        (NaN: a workload shift found by attribution). ``guessed``: new work found from the GPUs alone
        (an unlabelled rack): the IT detector re-centres too (the nodes' own load is the job's: a
        CPU-offload job moved PDU power 10 % on the twin) but the IT model keeps its job level (a guess
        from the GPUs does not say the nodes' load changed; restarting it at every guess cost churning
        racks 0.4–1 % of healthy-window P95). Returns the components whose baselines re-learn."""
        at_job_change = math.isfinite(job_change_ts)
        faulty = self._components_with_incidents()
        it = self.channels["it"]
        # A deviation building before the job, large enough to become a fault: judge it on. (A long
        # suspicion of a tenth of a percent in idle bins, too small to confirm, is not one.)
        if it.mode == SUSPECTED and abs(it.recent_deviation()) >= T.BUILDING_FRAC * it.params.min_effect:
            faulty |= {"it"}
        components = tuple(c for c in WORKLOAD_COMPONENTS if c not in faulty)
        if "gpu" in components and not at_job_change:  # before the grace wipes it: the old job's level
            self.changes.resets.on_workload_start(ts, self.channels["gpu"], self.context)
        self._start_relearn(tuple(c for c in components if c not in LEVEL_COMPONENTS), ts)
        if any(c in LEVEL_COMPONENTS for c in components) and not guessed:
            self.work_changed_ts = job_change_ts if at_job_change else ts
        for name in components:
            self.channels[name].start_grace(ts + T.RELEARN_S)
        self._workload_until = ts + T.RELEARN_S
        self.context.workload_ts = job_change_ts if at_job_change else ts
        self.context.resync()
        if not at_job_change:  # (at a job change the rates restarted then: they now are the new job's)
            self.context.restart_rates()
        return tuple(c for c in components if not (guessed and c in LEVEL_COMPONENTS))

    def _components_with_incidents(self) -> frozenset[str]:
        """Engine components held by a confirmed deviation other than a workload change."""
        out: set[str] = set()
        for cause, incident in self.incidents.items():
            if cause != "workload":
                for name in incident.channels:
                    out |= HOLDS[name] | {name}
        return frozenset(out)

    def _job_changed(self, sample: ComponentSample) -> list[dict[str, object]]:
        """A new job id. It is a workload change at once when a re-learn is already under way or
        the previous job left no work rate to compare with; otherwise the kind check decides
        within minutes whether it is a restart of the same work (``changepoint``)."""
        ts = float(sample.ts)
        self.job_started_ts = ts  # its kind is judged next: the previous job's levels may not be its
        relearning = math.isfinite(self._workload_until) and ts < self._workload_until
        checking = self.changes.job_changed(ts, self.channels["gpu"], self.context, relearning)
        self.context.restart_rates()  # the new job's typical rates come from its own first bins
        return [] if checking else self._workload_change(sample, ts)

    def _judge_job_change(self, sample: ComponentSample) -> list[dict[str, object]]:
        """Once the new job's kind is known: a same-kind restart keeps every baseline (only the
        work-rate reference moves to the new run); a different kind re-learns."""
        verdict = self.changes.work.decide(float(sample.ts), self.context)
        if verdict is None:
            return []
        if verdict.kind == SAME:
            self.job_started_ts = math.nan  # the same work: the previous run's levels are its own
            self.context.rebase_work_rates()
            return []
        return self._workload_change(sample, verdict.since_ts, verdict)

    def _workload_change(
        self, sample: ComponentSample, job_change_ts: float, verdict: WorkVerdict | None = None
    ) -> list[dict[str, object]]:
        ts = float(sample.ts)
        guessed = verdict is not None and verdict.guessed
        relearned = self._begin_relearn(ts, job_change_ts, guessed)
        had = self.incidents.get("workload")
        self.incidents["workload"] = Incident("workload", sample.stage, ts, job_change_ts, 0.0, "gpu", set(),
                                              sample.job)
        ratios = () if verdict is None or not verdict.by_power else (
            ("power", verdict.rate_ratio), ("memory use", verdict.memory_ratio))
        moved = [f"{name} {100.0 * (r - 1.0):+.0f} %" for name, r in ratios if math.isfinite(r)]
        previous = verdict.previous_job if verdict is not None else self.context.previous_job
        new_stage, main = ("", "") if verdict is None else (
            verdict.new_stage.replace("_", " "), verdict.main_stage.replace("_", " "))
        if guessed:
            if new_stage:
                how = f"in a stage the work before did not run ({new_stage})"
            elif moved:
                how = f"with a different signature in their main stage ({', '.join(moved)})"
            else:
                how = f"and did not return to the main stage of the work before ({main}) within the hour"
            text = (f"The GPUs resumed work after idling {how}: a new job (found from telemetry; the rack "
                    "reports no job labels)")
        else:
            text = f"New job {sample.job!r} replaced " + (
                "the previous one" if previous else "work that reported no job id")
            if new_stage:
                text += f" and runs a stage the previous job did not ({new_stage})"
            elif moved:
                text += f" with a different GPU signature in its main stage ({', '.join(moved)})"
            elif verdict is not None and math.isfinite(verdict.rate_ratio):
                text += f" and runs at a {100.0 * (verdict.rate_ratio - 1.0):+.0f} % work rate"
        text += ": its GPU profile is re-learned (not a fault)."
        kept = sorted(cause for cause in self.incidents if cause != "workload")
        if kept:
            text += f" Still active, not re-learned: {', '.join(c.replace('_', ' ') for c in kept)}."
        extra = {"job": sample.job, "relearn": list(relearned), "relearn_until": ts + T.RELEARN_S}
        if had is not None:
            extra["previous_job"] = had.job
        job_item: dict[str, object] = {"signal": "job", "from": previous, "to": sample.job,
                                       "since": job_change_ts}
        if verdict is not None and math.isfinite(verdict.rate_ratio):
            job_item[verdict.moved_key] = round(100.0 * (verdict.rate_ratio - 1.0), 1)
        if verdict is not None and verdict.new_stage:
            job_item["new_stage"] = verdict.new_stage
        if verdict is not None and math.isfinite(verdict.memory_ratio):
            job_item["gpu_memory_util_moved_pct"] = round(100.0 * (verdict.memory_ratio - 1.0), 1)
        reload = self.changes.reset_at_change(job_change_ts)  # a counter reset at the change
        return [drift_event(ts, "onset", "workload", sample.stage, None, "gpu", job_change_ts,
                            [job_item, *reload], text, extra=extra)]

    def _end_workload(self, sample: ComponentSample) -> list[dict[str, object]]:
        self._workload_until = math.nan
        incident = self.incidents.pop("workload", None)
        self.context.resync()
        if incident is None:
            return []
        text = f"Baseline re-learned for job {incident.job!r}." if incident.job else "Baseline re-learned."
        note, evidence = self.changes.relearn_note(incident.since_ts, float(sample.ts))
        text += note
        return [drift_event(float(sample.ts), "cleared", "workload", sample.stage, None, "gpu",
                            incident.since_ts, evidence, text, extra={"onset_ts": incident.onset_ts})]

    def _start_relearn(self, components: tuple[str, ...], ts: float) -> None:
        for comp in components:
            if comp in LEARNING_COMPONENTS:
                self._relearn_until[comp] = max(self._relearn_until.get(comp, -math.inf), ts + T.RELEARN_S)

    # ------------------------------------------------------------------------------ accepting
    def accept(
        self, cause_or_component: str | None, ts: float, by: str = "operator"
    ) -> list[dict[str, object]]:
        """Accept the current deviation(s) as the new normal: ``all`` (or None), a cause or a component;
        each accepted incident gets a ``cleared`` event with ``detail.accepted``."""
        key = "all" if cause_or_component is None else cause_or_component.strip().lower()
        if key not in ("all", *CAUSES, *CHANNELS):
            raise ValueError(
                f"accept: unknown cause or component {cause_or_component!r}; expected all, "
                f"one of {', '.join(CAUSES)} or one of {', '.join(CHANNELS)}"
            )
        events: list[dict[str, object]] = []
        for cause, incident in list(self.incidents.items()):
            if key not in ("all", cause) and key not in incident.channels:
                continue
            if cause == "workload" and not incident.channels:
                continue  # a job change needs no acceptance: it is re-learned anyway
            del self.incidents[cause]
            self._grace(set(incident.channels), ts)
            if by == "auto":  # only when accept_after_h is set
                who = f"automatically after {self.config.accept_after_h:g} h"
            else:  # an operator: the CLI's "operator" or the name an MQTT command carries
                who = "by the operator" if by == "operator" else f"by {by}"
            what = cause.replace("_", " ")
            text = f"The {what} deviation was accepted as the new normal ({who}); re-learning."
            events.append(drift_event(ts, "cleared", cause, incident.stage, None, incident.component,
                                      incident.since_ts, [], text,
                                      extra={"accepted": True, "accepted_by": by,
                                             "onset_ts": incident.onset_ts}))
        # Suspicions on a named component (or all) are released too.
        for name, channel in self.channels.items():
            named = key in ("all", name) or name in CAUSE_COMPONENTS.get(key, ())
            if channel.mode == SUSPECTED and named:
                self._grace({name}, ts)
        if events:
            self.context.resync()
        return events

    def _grace(self, names: set[str], ts: float) -> None:
        components: set[str] = set()
        for name in names:
            self.channels[name].start_grace(ts + T.ACCEPT_GRACE_S)
            components |= HOLDS[name]
        self._start_relearn(tuple(sorted(components)), ts)

    def _auto_accept(self, ts: float) -> list[dict[str, object]]:
        after_h = self.config.accept_after_h
        if after_h is None:
            return []
        events: list[dict[str, object]] = []
        for cause, incident in list(self.incidents.items()):
            if cause != "workload" and ts - incident.onset_ts >= after_h * 3600.0:
                events += self.accept(cause, ts, by="auto")
        return events

    # ------------------------------------------------------------------------------ state
    def save_state(self) -> dict[str, object]:
        """JSON-safe, fixed-size state (a few floats per channel and stage slot, ≤ 6 incidents)."""
        return {
            "version": STATE_VERSION,
            "channels": {name: ch.state() for name, ch in self.channels.items()},
            "context": self.context.state(),
            "cooling_model": self.cooling_model.state(),
            "changes": self.changes.state(),
            "incidents": [
                {"cause": i.cause, "stage": i.stage[:64], "onset_ts": i.onset_ts, "since_ts": i.since_ts,
                 "deviation": i.deviation, "component": i.component, "channels": sorted(i.channels),
                 "job": i.job[:200]}
                for i in self.incidents.values()
            ],
            "relearn_until": dict(self._relearn_until),
            "workload_until": finite_or_none(self._workload_until),
            "work_changed_ts": finite_or_none(self.work_changed_ts),
            "job_started_ts": finite_or_none(self.job_started_ts),
            "last_ts": finite_or_none(self._last_ts),
            "pending_events": self._pending[-MAX_PENDING:],
            "unproven": [finite_or_none(v) for v in _unproven_fields(self._unproven)],  # (fixed size)
        }

    def load_state(self, state: dict[str, object]) -> None:
        """Restore ``save_state()`` output; a wrong version or shape raises ``ValueError`` (a state
        of a version in ``RE_WARM_VERSIONS`` is accepted and the monitor starts afresh)."""
        if isinstance(state, dict) and state.get("version") in RE_WARM_VERSIONS:
            self._reset()
            return
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            found = state.get("version") if isinstance(state, dict) else "?"
            raise ValueError(f"drift state: version {found} is not {STATE_VERSION}")
        self._reset()
        try:
            channels = state["channels"]
            assert isinstance(channels, dict)
            for name, ch in self.channels.items():
                if name in channels:  # (a channel this build added starts afresh)
                    ch.restore(channels[name])
            for key, part in (("context", self.context), ("cooling_model", self.cooling_model),
                              ("changes", self.changes)):
                value = state[key]
                assert isinstance(value, dict)
                part.restore(value)
            self.channels["cooling"].params = self._cooling_params()
            incidents = state.get("incidents") or []
            assert isinstance(incidents, list)
            for item in incidents:
                if item["cause"] not in CAUSES:
                    raise ValueError(f"unknown cause {item['cause']!r}")
                self.incidents[item["cause"]] = Incident(
                    item["cause"], str(item["stage"]), float(item["onset_ts"]), float(item["since_ts"]),
                    float(item["deviation"]), str(item["component"]), set(item["channels"]), str(item["job"]))
            relearn = state.get("relearn_until") or {}
            assert isinstance(relearn, dict)
            self._relearn_until = {str(k): float(v) for k, v in relearn.items() if k in LEARNING_COMPONENTS}
            self._workload_until = number_or_nan(state.get("workload_until"))
            self.work_changed_ts = number_or_nan(state.get("work_changed_ts"))
            self.job_started_ts = number_or_nan(state.get("job_started_ts"))
            self._last_ts = number_or_nan(state.get("last_ts"))
            pending = state.get("pending_events") or []
            assert isinstance(pending, list)
            self._pending = [e for e in pending if isinstance(e, dict)][-MAX_PENDING:]
            unproven = state.get("unproven") or [None] * 4  # (absent in older states: none waiting)
            assert isinstance(unproven, list) and len(unproven) == 4
            ts, dev, z, since = (number_or_nan(v) for v in unproven)
            if math.isfinite(ts):
                self._unproven = Transition("onset", ts, dev, z, since)
        except (KeyError, TypeError, AssertionError, ValueError) as exc:
            self._reset()
            raise ValueError(f"drift state: malformed ({exc})") from exc

    def accept_offline(self, cause_or_component: str | None, ts: float) -> list[dict[str, object]]:
        """``accept`` while the agent is stopped: the events are also kept (bounded) and returned
        by the next ``observe`` so the report and MQTT still say what happened."""
        events = self.accept(cause_or_component, ts)
        self._pending = (self._pending + events)[-MAX_PENDING:]
        return events


def _unproven_fields(tr: Transition | None) -> tuple[float, float, float, float]:
    """An onset waiting to hold as four numbers (NaN when none waits)."""
    if tr is None:
        return (math.nan,) * 4
    return tr.ts, tr.deviation, tr.z, tr.since_ts


def _pct(name: str, tr: Transition, channels: dict[str, ResidualChannel], slot: int) -> float:
    """deviation_pct of an onset: % of the expectation; for the inlet spread, % of its usual level."""
    if name != "thermal":
        return round(tr.deviation, 2)
    usual = max(abs(channels["thermal"].location(slot)), 1.0)
    return round(100.0 * tr.deviation / usual, 2)

