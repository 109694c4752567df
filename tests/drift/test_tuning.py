"""One tuning table: tuning.py and the playbook list the same thresholds; no threshold assumes 60-s bins."""

from __future__ import annotations

import re

import pytest

from agent.engine.drift import DriftMonitor, tuning
from agent.engine.drift.cooling_model import CoolingUnitModel
from tests.conftest import REPO_ROOT


def _doc_names(part: int) -> list[str]:
    """Names in the playbook's tuning section: its tuned table (part 0), derived (1) or facts (2)."""
    text = (REPO_ROOT / "docs" / "drift-playbook.md").read_text()
    section = text.split("\n## tuning\n", 1)[1].split("\n## ", 1)[0]
    tuned, rest = section.split("\n### derived\n", 1)
    table = (tuned, *rest.split("\n### facts\n", 1))[part]
    return re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", table, flags=re.MULTILINE)


def test_the_playbook_tables_list_exactly_the_names_in_tuning_py() -> None:
    tuned, derived, facts = _doc_names(0), _doc_names(1), _doc_names(2)
    assert len(tuned + derived + facts) == len(set(tuned + derived + facts)), "a name is listed twice"
    assert set(tuned) == set(tuning.NAMES)
    assert set(derived) == set(tuning.DERIVED)
    assert set(facts) == set(tuning.FACTS)


# The constants a derived formula may hold: a formula's own, never a tuned choice.
FORMULA_CONSTANTS = {
    "BEHIND_Z": ["2.0"],  # Page: a CUSUM of reference k detects shifts of 2 k fastest
    "HALF_CYCLE_S": ["2.0"],  # half of the daily cycle
    "SHIFT_NOW_WEIGHT": ["2.0", "1.0"],  # an EW mean of span N has weight 2 / (N + 1)
    "WORK_RATE_MOVED_PCT": ["100.0"],  # a fraction in %
    "STALL_FRAC": ["1.0"],  # "within a fraction of the top" is "above 1 − that fraction of it"
    "INPUT_START_C": ["2.0"],  # half a reading step: any change a reading can show
    "INLET_RESOLUTION_C": ["12.0"],  # rounding noise, uniform over one step: step / √12
    "COOLING_RESOLUTION_PCT": ["2.0"],  # two readings' rounding in quadrature: √2
}


def test_derived_names_add_no_number() -> None:
    """A derived name's line in tuning.py reads tuned names and facts only (a literal number would
    be a tuned number in disguise), besides the constants of its formula (FORMULA_CONSTANTS)."""
    source = (REPO_ROOT / "agent" / "engine" / "drift" / "tuning.py").read_text()
    derived_part = source.split("# =====", 1)[1].split("\nDERIVED:", 1)[0]
    for line in derived_part.splitlines():  # (dict continuation lines are read too)
        code = line.split("#", 1)[0]
        numbers = re.findall(r"(?<![A-Z_\w])\d+(?:\.\d+)?", code.split("=", 1)[-1])
        name = code.split("=", 1)[0].strip() if "=" in code else ""
        assert numbers == FORMULA_CONSTANTS.get(name, []), f"a number in a derived definition: {line.strip()}"


def test_facts_are_no_thresholds_and_say_their_source() -> None:
    """A fact (not counted as tuned) is a unit or a device's own property, with its source."""
    assert set(tuning.FACTS) == {"HOUR_S", "DAY_S", "READING_STEP_C"}
    source = (REPO_ROOT / "agent" / "engine" / "drift" / "tuning.py").read_text()
    assert "PROTOCOLS.md" in source.split("READING_STEP_C = ", 1)[1].split("FACTS:", 1)[0]
    assert not set(tuning.FACTS) & (set(tuning.NAMES) | set(tuning.DERIVED))


def test_the_number_of_tuned_numbers_does_not_grow() -> None:
    count = sum(len(v) if isinstance(v, dict) else 1 for v in (getattr(tuning, n) for n in tuning.NAMES))
    assert count <= 40  # issue 16's target: ≤ 40; lower this as thresholds merge, never raise it


@pytest.mark.parametrize("bin_s", [30.0, 120.0])
def test_durations_are_the_same_seconds_at_any_bin_width(bin_s: float) -> None:
    """Every duration the detector counts in bins is converted from seconds with the bin width."""
    ref, other = DriftMonitor(bin_s=60.0), DriftMonitor(bin_s=bin_s)
    for name in ref.channels:
        a, b = ref.channels[name].params, other.channels[name].params
        assert a.slot_warm_bins * 60.0 == pytest.approx(b.slot_warm_bins * bin_s)
        assert a.loc_halflife_bins * 60.0 == pytest.approx(b.loc_halflife_bins * bin_s)
        assert a.bin_scale_halflife_bins * 60.0 == pytest.approx(b.bin_scale_halflife_bins * bin_s)
        assert a.grace_loc_halflife_bins * 60.0 == pytest.approx(b.grace_loc_halflife_bins * bin_s)
        block_a, block_b = a.block_bins * 60.0, b.block_bins * bin_s
        assert abs(block_a - block_b) <= bin_s / 2  # blocks are whole bins
        assert a.warm_blocks * block_a == pytest.approx(b.warm_blocks * block_b, rel=0.35)
        assert a.scale_halflife_blocks * block_a == pytest.approx(b.scale_halflife_blocks * block_b)
    a_ctx, b_ctx = ref.context.levels["setpoint_c"], other.context.levels["setpoint_c"]
    assert a_ctx.ref_halflife * 60.0 == pytest.approx(b_ctx.ref_halflife * bin_s)
    assert ref.context.warm_bins * 60.0 == pytest.approx(other.context.warm_bins * bin_s)
    unit_a, unit_b = CoolingUnitModel(60.0), CoolingUnitModel(bin_s)
    assert unit_a.learn_delay * 60.0 == pytest.approx(unit_b.learn_delay * bin_s)
    assert unit_a.warm_bins * 60.0 == pytest.approx(unit_b.warm_bins * bin_s)


def test_a_bad_bin_width_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="bin width"):
        tuning.bins(60.0, 0.0)
