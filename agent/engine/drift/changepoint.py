"""The change-point judge: everything that moves a residual and is *not* a fault.

A job change, a restart of the same job, a GPU stack restart (counters reset) and a measured
setpoint step all move a residual at a known moment for a known reason. The monitor asks its
parts: whether to hold (``holds``), same work or new work (``job_changed``, ``work.decide``), how far
the model is behind (``catch_up``: a re-learn runs only while it is behind), and a measured step
judged against "before" (``resets``, ``input``, ``rest``: GPU power at rest across a reload).
Onsets soon after a change point name it (``revise``, ``evidence``). (A cooling model gaining or
losing an input: monitor._follow_cooling_model.)
"""

from __future__ import annotations

from agent.engine.components import ComponentSample
from agent.engine.drift import tuning as T
from agent.engine.drift.attribution import Attribution
from agent.engine.drift.catch_up import ModelCatchUp
from agent.engine.drift.channel import ResidualChannel
from agent.engine.drift.context import SignalContext, stage_slot
from agent.engine.drift.counter_reset import CounterResetPoint
from agent.engine.drift.input_step import InputStep
from agent.engine.drift.reset_rest import RestAfterReset
from agent.engine.drift.same_work import SameWorkCheck, name_restart, restart_evidence

# Onsets of these causes soon after a same-work restart name it: a fault that starts at a restart
# (a PSU failing on the power-up) is judged against the previous run's baseline, and says so.
RESTART_NAMED_CAUSES = frozenset({"gpu_hardware", "power_chain"})


class ChangePointJudge:
    """One object the monitor asks about non-fault change points; see the module docstring."""

    def __init__(self, bin_s: float = 60.0) -> None:
        self.work = SameWorkCheck(bin_s)
        self.resets = CounterResetPoint(bin_s)
        self.input = InputStep(bin_s)
        self.rest = RestAfterReset(bin_s)
        self.catch_up = ModelCatchUp(bin_s)

    @property
    def holds(self) -> bool:
        """A new job's work is being judged: the GPU and IT sides neither learn nor are judged.
        (Not for a check by GPU power on an unlabelled rack: most of those are the same work after
        an idle gap, and the detectors go on as if no check ran; new work re-centres them anyway.)"""
        return self.work.pending and (not self.work.by_power or self.work.labelled)

    def before_bin(self, sample: ComponentSample, gpu: ResidualChannel, rest: ResidualChannel,
                   in_workload: bool, settled: bool = True) -> None:
        """Absorb one bin before the channels see its residuals (counter resets, work rates);
        ``rest``: the GPUs' power-at-rest channel, whose level a reload is judged against;
        ``settled`` False within a bounded re-learn (the model's usual error is not learned then)."""
        if sample.gpu_counter_resets > 0:
            self.rest.on_reset(float(sample.ts), rest)
        self.resets.update(sample, gpu, in_workload)
        self.catch_up.update(sample, settled)
        # the stage's own seconds: a bin that training shares with a stall mixes both signatures
        self.work.observe(stage_slot(sample.stage), float(sample.stage_gpu_w),
                          float(sample.stage_mem_util_pct), float(sample.ts))

    def job_changed(self, ts: float, gpu: ResidualChannel, ctx: SignalContext, relearning: bool) -> bool:
        """A new job id at ``ts``; True while the judge decides whether it is the same work (the
        caller holds), False when it is new work now (re-learning already, or nothing to compare)."""
        if not self.work.pending:  # the previous job's GPU levels and rates, before anything moves
            self.resets.on_workload_start(ts, gpu, ctx)
        checking = not relearning and self.work.start(ts, ctx, ctx.previous_job)
        if relearning:
            self.work.cancel()
            self.work.job_seen(ts)
        return checking

    def revise(self, name: str, verdict: Attribution, deviation: float, ts: float, job: str) -> Attribution:
        """Name a change point in an onset's verdict: a counter reset for a GPU shift, a setpoint
        move for a cooling shift, a same-work restart for a shift of a cause a restart can hide."""
        verdict = self.resets.revise(name, verdict, deviation, ts)
        if name == "cooling" and verdict.cause == "cooling" and self.input.moving:
            verdict = Attribution("cooling", self.input.explanation(deviation))
        restart = self.work.recent_restart(ts, T.JOB_RECENT_S)
        if restart is not None and verdict.cause in RESTART_NAMED_CAUSES:
            verdict = name_restart(verdict, restart, job, ts)
        return verdict

    def evidence(self, cause: str, ts: float, job: str) -> list[dict[str, object]]:
        """Change points behind an onset of ``cause`` at ``ts``, as evidence items."""
        items = self.resets.evidence(ts) if cause == "gpu_hardware" else []
        if cause == "cooling" and self.input.moving:
            items.append(self.input.move_evidence())
        restart = self.work.recent_restart(ts, T.JOB_RECENT_S)
        if restart is not None and cause in RESTART_NAMED_CAUSES:
            items.append(restart_evidence(restart, job))
        return items

    def reset_at_change(self, job_change_ts: float) -> list[dict[str, object]]:
        """A counter reset at the job change itself, as evidence for the workload event."""
        return self.resets.evidence(job_change_ts, within_s=T.RESET_GROUP_S)

    def relearn_note(self, since_ts: float, ts: float) -> tuple[str, list[dict[str, object]]]:
        """What a finished re-learn should say about a counter reset during it (text, evidence)."""
        evidence = self.resets.evidence(ts)
        if not evidence or self.resets.reload_ts < since_ts - T.RESET_GROUP_S:
            return "", []
        if self.resets.pinned_from:
            return (" The GPU driver reloaded during the re-learn; the GPUs were judged against their level "
                    "before it."), evidence
        return " The GPU driver reloaded during the re-learn: the new profile includes it.", evidence

    def state(self) -> dict[str, object]:
        return {"work": self.work.state(), "resets": self.resets.state(), "input": self.input.state(),
                "catch_up": self.catch_up.state(), "rest": self.rest.state()}

    def restore(self, data: dict[str, object]) -> None:
        for key, part in (("work", self.work), ("resets", self.resets), ("input", self.input)):
            value = data.get(key)
            if not isinstance(value, dict):
                raise ValueError(f"drift change points: {key} missing")
            part.restore(value)
        catch_up = data.get("catch_up")  # (a state from before it: the lag re-learns from the next bins)
        if isinstance(catch_up, dict):
            self.catch_up.restore(catch_up)
        rest = data.get("rest")  # (a state from before it: no reload being judged)
        if isinstance(rest, dict):
            self.rest.restore(rest)
