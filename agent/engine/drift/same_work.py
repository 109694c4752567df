"""Is the work after a job change the same as before it? (``SameWorkCheck``, part of the change-point judge)

Why: a long training run restarts under new job ids (node failure, preemption, resume from a
checkpoint); re-learning at each would teach the baselines any fault that starts near a restart
(a driver update in the maintenance window) as "the new job's profile". Issue 4: a workload
change is a new job type, stage mix or per-stage GPU profile; a restart is none of these.

The new job's typical work rate in the old job's main rated stage is compared with the old one's
(or, where the new job never runs that stage, in the first other working stage both ran: an
inference job after a training run reports its rate in eval): within ``tuning.SAME_WORK_RATE_FRAC``
it is the same work (nothing re-learns); otherwise, or with no comparable rate within
``tuning.DECIDE_WITHIN_S``, a workload change. The work rate decides, not
GPU power: a bad driver moves the power by ~10 % but not the throughput, while two models'
throughputs differ by far more than 15 %. A job without a work rate (most) is judged by its GPU
signature instead, as an unlabelled rack's resumed work is: GPU power and memory utilisation,
each within ``tuning.SAME_WORK_POWER_FRAC``; moved in any stage the new work fills, it is new work,
kept only in the previous work's main stage, the same. New work that fills a working stage the
previous work did not run, before anything comparable decided, is a new stage mix: new work
(``new_stage_name``). While the check runs (a few minutes) the GPU and IT sides neither learn nor
are judged (unlabelled resumed work: see ``ChangePointJudge.holds``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from agent.engine.drift import tuning as T
from agent.engine.drift.attribution import Attribution
from agent.engine.drift.context import STAGE_SLOTS, WAITING_STAGES, SignalContext, stage_slot
from agent.engine.drift.estimators import ew_alpha, fields_state, finite_or_none, load_fields, number_or_nan

SAME, DIFFERENT = "same", "different"
SIGNATURE = ("gpu_power", "gpu_memory_util")  # an unlabelled job's signature per stage
POWER, MEMORY = 0, 1
IDLE_SLOT = stage_slot("idle")  # idle power says nothing about the work
# Stages whose GPU signature is the job's own: not idle, and not a waiting stage (a data-load bin's
# power depends on how much training it holds, a checkpoint's on how much it writes).
WORK_SLOTS = np.array([s != IDLE_SLOT and name not in WAITING_STAGES for s, name in enumerate(STAGE_SLOTS)])


@dataclass
class WorkVerdict:
    """The outcome of one check: the job change it judged and how the rates compared."""

    kind: str  # SAME | DIFFERENT
    since_ts: float  # the job change
    ts: float  # when it was decided
    previous_job: str
    rate_ratio: float  # new / previous typical work rate (NaN when no rate came)
    by_power: bool = False  # judged by GPU signature: ``rate_ratio`` is a power ratio
    memory_ratio: float = math.nan  # by power: new / previous GPU memory utilisation (NaN: not reported)
    labelled: bool = True  # a job id announced the change (False: an unlabelled rack's resumed work)
    new_stage: str = ""  # decided by a working stage the previous work never ran (its name)
    main_stage: str = ""  # by power: the previous work's main stage (the only one "same" is decided in)

    @property
    def guessed(self) -> bool:
        """The job change itself was inferred from telemetry (an unlabelled rack's resumed work)."""
        return self.by_power and not self.labelled

    @property
    def moved_key(self) -> str:
        return "gpu_power_moved_pct" if self.by_power else "work_rate_moved_pct"


class SameWorkCheck:
    """One pending check at a time; ``start`` at a job change, ``decide`` every bin after it."""

    def __init__(self, bin_s: float = 60.0) -> None:
        self.since_ts = math.nan  # the job change being checked (NaN: none pending)
        self.slot = -1  # the previous work's main stage slot: its main rated one, or by signature its
        # most time (where "same" is decided)
        self.prev_rate = math.nan  # the previous job's typical rate there
        # ... and its typical rate in every stage it ran with a settled rate (NaN elsewhere): a job of
        # another kind may never run the main one (an inference job reports its rate in eval)
        self.prev_rates = np.full(len(STAGE_SLOTS), math.nan)
        self.previous_job = ""
        self.last: WorkVerdict | None = None  # the last verdict (its "same" is named in onsets)
        # Without labels or work rates: the ``SIGNATURE`` per stage in log-% (one fraction judges
        # both), the level before and the median of each stage's first bins after the change.
        n, f = len(STAGE_SLOTS), len(SIGNATURE)
        self.by_power = False
        self.labelled = False  # a by-power check opened by a job id (a job without a work rate)
        self.prev_levels = np.full((f, n), math.nan)
        self.first = np.full((f, n, T.RATE_FIRST_BINS), math.nan)
        self.first_n = np.zeros(n)
        # The work just before: each stage's signature over FOLLOW_HALFLIFE_S (a job's own level, not
        # the rack's day-long mix of jobs) and its bins (comparable from RATE_FIRST_BINS on).
        self._recent_halflife = T.bins(T.FOLLOW_HALFLIFE_S, bin_s)
        self.recent = np.full((f, n), math.nan)
        self.recent_n = np.zeros((f, n))
        # When the running job's id appeared, and when each stage's signature last moved: a labelled
        # change compares only stages the previous job itself ran.
        self.job_ts = -math.inf
        self.seen_ts = np.full(n, -math.inf)
        # The working stages the previous work ran, and the running work's bins per stage since it
        # began (the last job change): new work that fills a working stage the previous one never ran
        # is a new stage mix, and at the next change they name the work's own main stage.
        self.prev_ran = np.zeros(n, dtype=bool)
        self.since_n = np.zeros(n)

    @property
    def pending(self) -> bool:
        return math.isfinite(self.since_ts)

    def new_stage_name(self) -> str:
        """The working stage the new work filled that the previous work never ran (``RATE_FIRST_BINS``
        bins, as many as a comparison needs; "" if none): a new stage mix is a workload change by
        definition (issue 4), decided then rather than at the ``DECIDE_WITHIN_S`` timeout, after most
        of a churning rack's jobs have ended (an inference job after a training run: the rates or
        signatures of its eval bins have nothing of the previous job's to be compared with)."""
        filled = np.flatnonzero((self.since_n >= T.RATE_FIRST_BINS) & WORK_SLOTS & ~self.prev_ran)
        return STAGE_SLOTS[int(filled[0])] if filled.size else ""

    def _previous_main(self, candidates: np.ndarray, ctx: SignalContext | None) -> int:
        """The previous work's main stage among ``candidates`` (call before ``since_n`` restarts):
        where that work itself spent most bins since it began; where it ran too few to tell
        (``RATE_FIRST_BINS``), where the rack spent most time over the day (``ctx``; without it,
        most recent bins). Why its own: on a rack that mostly serves inference, the day's main
        stage is eval, and an inference job after a training run, judged there, was the same work
        (development churn seed 4, a one-off diagnostic)."""
        own = np.where(candidates, self.since_n, 0.0)
        if own.sum() >= T.RATE_FIRST_BINS:
            time_in = own
        else:
            time_in = ctx.mix.long_run if ctx is not None else self.recent_n[POWER]
        return int(np.argmax(np.where(candidates, time_in, -1.0)))

    def start(self, ts: float, ctx: SignalContext, previous_job: str) -> bool:
        """Open a check for a job change at ``ts`` (call before the context restarts its rates);
        False when the previous job left no settled work rate to compare with (re-learn now).
        A second job change while one is pending keeps comparing with the job before both."""
        previous_since, self.job_ts = self.job_ts, ts
        if self.pending:
            self._restart(ts)
            opened = True
        else:
            self.prev_ran[:] = WORK_SLOTS & np.isfinite(self.seen_ts) & (self.seen_ts >= previous_since)
            rated = rated_slots(ctx)
            opened = (self._start_by_rate(ts, ctx, rated, previous_job, previous_since) if rated.any()
                      else self._start_by_signature(ts, ctx, previous_job, previous_since))
        self.since_n[:] = 0.0  # the new work's bins count from here (its predecessor's were read)
        return opened

    def _restart(self, ts: float) -> None:
        """A further change while one is pending: the newest work is judged against the work before
        both."""
        self.since_ts = ts
        if self.by_power:
            self.first[:], self.first_n[:] = math.nan, 0.0

    def _start_by_rate(self, ts: float, ctx: SignalContext, rated: np.ndarray, previous_job: str,
                       previous_since: float) -> bool:
        """A job change with work rates to compare: the previous job's typical rate in its main rated
        stage and in every working stage it ran with a settled rate."""
        slot = self._previous_main(rated, ctx)
        self.since_ts, self.slot = ts, slot
        self.prev_rate = ctx.typical_rate(slot)
        self.prev_rates[:] = [ctx.typical_rate(s) if ctx.rates.settled(s) and WORK_SLOTS[s]
                              and self.seen_ts[s] >= previous_since else math.nan
                              for s in range(len(STAGE_SLOTS))]
        self.prev_rates[slot] = self.prev_rate
        self.previous_job = previous_job
        return True

    def _start_by_signature(self, ts: float, ctx: SignalContext, previous_job: str,
                            previous_since: float) -> bool:
        """A job change announced by its id, with no work rate to compare: compare the GPU signature
        in each working stage the previous job ran (since ``previous_since``, its id's appearance),
        the new job judged in the first of them it fills; where it ran none, in its main stage
        (``_previous_main`` among those with a known signature; idle says nothing). False when none
        is known (re-learn now).

        Why every working stage: a job of another kind may never run the previous one's main stage
        (an inference job after a training run), and the check then decided only when it timed out,
        an hour on (``DECIDE_WITHIN_S``), after most jobs of a churning rack had ended."""
        ready = self.recent_n[POWER] >= T.RATE_FIRST_BINS
        ready[IDLE_SLOT] = False
        if not ready.any():
            return False
        own = ready & self.prev_ran
        main = self._previous_main(own if own.any() else ready, ctx)
        slots = np.flatnonzero(own) if own.any() else [main]
        levels = np.full_like(self.recent, math.nan)
        for slot in slots:
            known = self.recent_n[:, slot] >= T.RATE_FIRST_BINS
            levels[:, slot] = np.where(known, self.recent[:, slot], math.nan)
        self._open_by_power(ts, levels, labelled=True, previous_job=previous_job)
        self.slot = main
        return True

    def start_by_power(self, ts: float, ctx: SignalContext | None = None) -> bool:
        """Open a check for an unlabelled rack's GPUs resuming work after idling, against the work just
        before the idle; False when no stage's level is known yet (nothing happens). Its main stage is
        the one the work before ran most (``_previous_main``)."""
        if self.pending and not self.by_power:
            return False  # a labelled job's check goes on
        if self.pending:  # resumed again before deciding: judge the newest work
            self._restart(ts)
            opened = True
        else:
            opened = self._open_resumed(ts, ctx)
        self.since_n[:] = 0.0  # the resumed work's bins count from here (the work before's were read)
        return opened

    def _open_resumed(self, ts: float, ctx: SignalContext | None) -> bool:
        """Compare resumed work with every stage the rack ran lately; False when none is known."""
        ready = self.recent_n >= T.RATE_FIRST_BINS
        ready[:, IDLE_SLOT] = False
        if not ready[POWER].any():
            return False
        self.prev_ran[:] = WORK_SLOTS & ready[POWER]  # the work before: every stage the rack ran lately
        main = self._previous_main(ready[POWER], ctx)
        self._open_by_power(ts, np.where(ready, self.recent, math.nan), labelled=False, previous_job="")
        self.slot = main
        return True

    def _open_by_power(self, ts: float, levels: np.ndarray, labelled: bool, previous_job: str) -> None:
        """Open a by-signature check at ``ts`` comparing the first bins after it with ``levels``."""
        self.since_ts, self.by_power, self.labelled, self.previous_job = ts, True, labelled, previous_job
        self.prev_levels[:] = levels
        self.first[:], self.first_n[:] = math.nan, 0.0

    def observe(self, slot: int, gpu_w: float, mem_util_pct: float = math.nan, ts: float = math.nan) -> None:
        """A bin's GPU power and memory utilisation in ``slot`` at ``ts``, over that stage's own
        seconds (``ComponentSample.stage_gpu_w``): the recent work's signature, and the first bins
        after a change by power."""
        if not (math.isfinite(gpu_w) and gpu_w > 0):
            return
        if math.isfinite(ts):
            self.seen_ts[slot] = ts
        self.since_n[slot] += 1.0
        memory_known = math.isfinite(mem_util_pct) and mem_util_pct > 0
        memory = 100.0 * math.log(mem_util_pct) if memory_known else math.nan
        levels = (100.0 * math.log(gpu_w / 1000.0), memory)
        for f, level in enumerate(levels):
            if math.isfinite(level):
                n = self.recent_n[f, slot]
                alpha = ew_alpha(n, self._recent_halflife)
                old = self.recent[f, slot]
                self.recent[f, slot] = level if n == 0 else old + alpha * (level - old)
                self.recent_n[f, slot] = n + 1.0
        i = int(self.first_n[slot])
        known = math.isfinite(self.prev_levels[POWER, slot])
        if self.pending and self.by_power and known and i < self.first.shape[2]:
            self.first[:, slot, i] = levels
            self.first_n[slot] = i + 1

    def decide(self, ts: float, ctx: SignalContext) -> WorkVerdict | None:
        """The verdict once the new job's rate in the compared stage has settled (or the check
        timed out); None while still waiting or when nothing is pending."""
        if not self.pending:
            return None
        if self.by_power:
            return self._decide_by_power(ts)
        ratio = math.nan
        # the main stage first, else the first other stage the previous job ran whose rate settled
        order = [self.slot, *(s for s in range(len(STAGE_SLOTS)) if s != self.slot)]
        compared = [s for s in order if math.isfinite(self.prev_rates[s]) and self.prev_rates[s] > 0
                    and ctx.rates.settled(s) and ctx.typical_rate(s) > 0]
        new_stage = "" if compared else self.new_stage_name()
        if compared:
            ratio = ctx.typical_rate(compared[0]) / self.prev_rates[compared[0]]
            kind = SAME if abs(ratio - 1.0) <= T.SAME_WORK_RATE_FRAC else DIFFERENT
        elif new_stage or ts - self.since_ts > T.DECIDE_WITHIN_S:
            kind = DIFFERENT
        else:
            return None
        self.last = WorkVerdict(kind, self.since_ts, ts, self.previous_job, ratio, new_stage=new_stage)
        self.since_ts = math.nan
        return self.last

    def _decide_by_power(self, ts: float) -> WorkVerdict | None:
        """Different work once GPU power or memory utilisation moved by more than
        ``SAME_WORK_POWER_FRAC`` in a stage the new work filled (a driver update moves the power 4–6 %,
        not the memory traffic), or once it filled a working stage the work before never ran; the same
        work only once the previous work's main stage (``slot``) kept its signature: an inference job
        after a training run evaluates at the training run's own eval power, and judged on eval alone
        it was the same work (most unlabelled job changes a churning rack left unflagged on the
        development seeds). Nothing decided within ``DECIDE_WITHIN_S``: a new job id is a new job,
        and so is resumed work that ran some working stage but never returned to the main one;
        resumed work that ran nothing comparable is the same. Same resumed work is not named."""
        full = np.flatnonzero(self.first_n >= self.first.shape[2])  # stages the new work filled
        ratios = [math.nan] * len(SIGNATURE)
        kind = ""
        for s in sorted(full, key=lambda slot: slot != self.slot):  # the main stage first
            here = [math.nan] * len(SIGNATURE)
            for f in range(len(SIGNATURE)):
                after = self.first[f, s][np.isfinite(self.first[f, s])]
                if after.size and math.isfinite(self.prev_levels[f, s]):
                    here[f] = math.exp((float(np.median(after)) - float(self.prev_levels[f, s])) / 100.0)
            if any(math.isfinite(r) and abs(r - 1.0) > T.SAME_WORK_POWER_FRAC for r in here):
                kind, ratios = DIFFERENT, here
                break
            if s == self.slot or self.slot < 0:
                kind, ratios = SAME, here
                break
        new_stage = "" if kind else self.new_stage_name()
        if new_stage:
            kind = DIFFERENT
        elif not kind and ts - self.since_ts > T.DECIDE_WITHIN_S:
            kind = DIFFERENT if self.labelled or (full.size and WORK_SLOTS[full].any()) else SAME
        elif not kind:
            return None
        main = STAGE_SLOTS[self.slot] if 0 <= self.slot < len(STAGE_SLOTS) else ""
        verdict = WorkVerdict(kind, self.since_ts, ts, self.previous_job, ratios[POWER], by_power=True,
                              memory_ratio=ratios[MEMORY], labelled=self.labelled, new_stage=new_stage,
                              main_stage=main)
        self.since_ts, self.by_power, self.labelled, self.slot = math.nan, False, False, -1
        if kind == DIFFERENT or verdict.labelled:
            self.last = verdict
        return verdict

    def cancel(self) -> None:
        self.since_ts = math.nan
        self.by_power = self.labelled = False

    def job_seen(self, ts: float) -> None:
        """A job id appeared that no check judges (a re-learn was under way): the next change
        compares only the stages this job runs from ``ts``, and this job's bins count from here."""
        self.job_ts = ts
        self.since_n[:] = 0.0

    def recent_restart(self, ts: float, within_s: float) -> WorkVerdict | None:
        """The last verdict when it was a same-kind restart within ``within_s`` before ``ts``."""
        last = self.last
        if last is None or last.kind != SAME or not 0.0 <= ts - last.since_ts <= within_s:
            return None
        return last

    # ------------------------------------------------------------------------------ state
    def state(self) -> dict[str, object]:
        last = self.last
        return {
            "since_ts": finite_or_none(self.since_ts),
            "slot": self.slot,
            "prev_rate": finite_or_none(self.prev_rate),
            "prev_rates": [finite_or_none(float(v)) for v in self.prev_rates],
            "previous_job": self.previous_job[:200],
            "labelled": self.labelled,
            "job_ts": finite_or_none(self.job_ts),
            "seen_ts": [finite_or_none(float(v)) for v in self.seen_ts],
            **fields_state(self, _MIX_FIELDS),
            **fields_state(self, _POWER_FIELDS),
            "last": None if last is None else {
                "kind": last.kind, "since_ts": last.since_ts, "ts": last.ts,
                "previous_job": last.previous_job[:200], "rate_ratio": finite_or_none(last.rate_ratio),
                "by_power": last.by_power},
        }

    def restore(self, data: dict[str, object]) -> None:
        """Load ``state()`` output; anything malformed leaves no check pending (a job change then
        simply re-learns, the behaviour before this check existed)."""
        self.since_ts, self.slot, self.prev_rate = math.nan, -1, math.nan
        self.previous_job, self.last = "", None
        self.by_power = False
        slot = data.get("slot")
        since, rate = number_or_nan(data.get("since_ts")), number_or_nan(data.get("prev_rate"))
        if isinstance(slot, int) and 0 <= slot < len(STAGE_SLOTS) and math.isfinite(rate) and rate > 0:
            self.since_ts, self.slot, self.prev_rate = since, slot, rate
        # (a state from before them: the main stage alone, as before)
        rates = data.get("prev_rates")
        self.prev_rates[:] = math.nan
        if isinstance(rates, list) and len(rates) == self.prev_rates.size:
            self.prev_rates[:] = [number_or_nan(v) for v in rates]
        if 0 <= self.slot < self.prev_rates.size:
            self.prev_rates[self.slot] = self.prev_rate
            self.previous_job = str(data.get("previous_job") or "")
        try:
            load_fields(self, data, _POWER_FIELDS, "drift same-work check")
        except ValueError:  # a state from before the memory signature: it is re-learned within ½ h
            self.by_power = False
            self.prev_levels[:] = self.first[:] = self.recent[:] = math.nan
            self.first_n[:] = self.recent_n[:] = 0.0
        if self.by_power and math.isfinite(since):
            self.since_ts = since
            self.previous_job = str(data.get("previous_job") or "")
        self.by_power = self.by_power and self.pending
        if self.by_power and isinstance(slot, int) and 0 <= slot < len(STAGE_SLOTS):
            self.slot = slot  # the previous work's main stage
        self.labelled = self.by_power and data.get("labelled") is True
        # (a state from before them: every stage counts as the previous job's, as before)
        self.job_ts = number_or_nan(data.get("job_ts"))
        self.job_ts = self.job_ts if math.isfinite(self.job_ts) else -math.inf
        seen = data.get("seen_ts")
        self.seen_ts[:] = -math.inf
        if isinstance(seen, list) and len(seen) == self.seen_ts.size:
            self.seen_ts[:] = [v if isinstance(v, (int, float)) and not isinstance(v, bool) else -math.inf
                               for v in seen]
        try:
            load_fields(self, data, _MIX_FIELDS, "drift same-work check")
        except ValueError:  # a state from before them: nothing counts as a new stage until the next change
            self.prev_ran[:], self.since_n[:] = True, 0.0
        last = data.get("last")
        if isinstance(last, dict) and last.get("kind") in (SAME, DIFFERENT):
            self.last = WorkVerdict(
                str(last["kind"]), number_or_nan(last.get("since_ts")), number_or_nan(last.get("ts")),
                str(last.get("previous_job") or ""), number_or_nan(last.get("rate_ratio")),
                by_power=last.get("by_power") is True)


_MIX_FIELDS = ("prev_ran", "since_n")  # the stages the previous work ran, the running work's bins per stage
_POWER_FIELDS = ("by_power", "prev_levels", "first", "first_n", "recent", "recent_n")


def rated_slots(ctx: SignalContext) -> np.ndarray:
    """The stage slots whose typical work rate is settled and positive: where two jobs' throughputs
    can be compared."""
    return np.array([ctx.rates.settled(s) and ctx.typical_rate(s) > 0 for s in range(len(STAGE_SLOTS))])


def name_restart(verdict: Attribution, restart: WorkVerdict, job: str, ts: float) -> Attribution:
    """Say that the shift came soon after a restart judged to be the same kind of job: if the
    operator knows the new job is a different model, accepting it makes it the job's normal."""
    hours = (ts - restart.since_ts) / 3600.0
    moved = f"{'GPU power' if restart.by_power else 'work rate'} {100.0 * (restart.rate_ratio - 1.0):+.1f} %"
    text = (f"{verdict.explanation.rstrip('.')}. Job {job!r} started {hours:.1f} h before and runs like "
            f"{restart.previous_job!r} ({moved}), so it is "
            "judged against the same baseline; if it is a different model, accept this as its normal.")
    return Attribution(verdict.cause, text)


def restart_evidence(restart: WorkVerdict, job: str) -> dict[str, object]:
    return {"signal": "job", "from": restart.previous_job, "to": job, "since": round(restart.since_ts, 1),
            restart.moved_key: round(100.0 * (restart.rate_ratio - 1.0), 1), "role": "context",
            "meaning": "a restart of the same kind of job: judged against the previous job's baseline"}


