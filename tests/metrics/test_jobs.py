"""JobEnergyLedger: energy deltas between summaries credited to the summary's job, ids bounded."""

from __future__ import annotations

import pytest

from agent.metrics.jobs import NO_JOB, JobEnergyLedger
from agent.trace.model import J_PER_KWH


def summary(job: str | None, **stages: tuple[float, float]) -> dict[str, object]:
    return {
        "job": job,
        "energy_kwh": {s: {"it": it, "cooling": c, "gpu": 0.0} for s, (it, c) in stages.items()},
    }


def test_each_window_is_credited_to_the_job_of_its_summary() -> None:
    ledger = JobEnergyLedger(max_jobs=4)
    ledger.start_from(summary("a", fb=(1.0, 0.5)))  # accounted before this process: nobody's here
    ledger.observe_summary(summary("a", fb=(3.0, 1.0)))
    ledger.observe_summary(summary("b", fb=(3.0, 1.0), ckpt=(0.5, 0.25)))
    ledger.observe_summary(summary(None, fb=(4.0, 1.5), ckpt=(0.5, 0.25)))
    totals = ledger.totals_j()
    assert totals["a"] == pytest.approx({"it": 2.0 * J_PER_KWH, "cooling": 0.5 * J_PER_KWH})
    assert totals["b"] == pytest.approx({"it": 0.5 * J_PER_KWH, "cooling": 0.25 * J_PER_KWH})
    assert totals[NO_JOB] == pytest.approx({"it": 1.0 * J_PER_KWH, "cooling": 0.5 * J_PER_KWH})


def test_a_stage_counter_that_went_down_was_reset_and_counts_in_full() -> None:
    ledger = JobEnergyLedger(max_jobs=2)
    ledger.start_from(summary("a", fb=(5.0, 2.0)))
    ledger.observe_summary(summary("a", fb=(0.5, 0.1)))  # the slot was reused for a new stage name
    assert ledger.totals_j()["a"] == pytest.approx(
        {"it": 0.5 * J_PER_KWH, "cooling": 0.1 * J_PER_KWH}
    )


def test_only_the_most_recently_seen_jobs_are_kept_and_nothing_is_folded() -> None:
    ledger = JobEnergyLedger(max_jobs=2)
    ledger.start_from(summary(None))
    kwh = 0.0
    for job in ("j1", "j2", "j1", "j3"):
        kwh += 1.0
        ledger.observe_summary(summary(job, fb=(kwh, 0.0)))
    totals = ledger.totals_j()
    assert list(totals) == ["j1", "j3"]  # j2 was seen least recently
    assert totals["j1"]["it"] == pytest.approx(2 * J_PER_KWH)
    assert totals["j3"]["it"] == pytest.approx(J_PER_KWH)


def test_without_a_reference_the_first_summary_only_sets_it() -> None:
    ledger = JobEnergyLedger(max_jobs=2)
    ledger.observe_summary(summary("a", fb=(9.0, 1.0)))
    assert ledger.totals_j() == {}


def test_max_jobs_below_one_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="max_jobs"):
        JobEnergyLedger(0)
