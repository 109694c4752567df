"""One stage-label rule (``agent.trace.model``): what the hint parser, the trace reader and the
client accept, the engine's stage slots keep whole (issue 17: 33–64-character labels were cut to
32 by ``StageSlots``, so every chunk took a new slot and evicted another stage's baselines)."""

from __future__ import annotations

import numpy as np
import pytest
import synth
from conftest import run_engine

from agent.engine import Engine, rack_info
from agent.stages import client
from agent.stages.hints import HintError, check_label
from agent.trace.model import STAGE_LABEL_MAX_CHARS, TraceChunk, is_stage_label
from agent.trace.reader import TraceFormatError, open_trace

LONG = "pretrain_phase_two_" + "x" * 30  # 49 characters: accepted by every part, kept whole


def _relabel(chunk: TraceChunk, label: str) -> TraceChunk:
    stage = np.where(chunk.stage == "forward_backward", label, chunk.stage).astype(object)
    return TraceChunk(ts=chunk.ts, numeric=chunk.numeric, stage=stage, job=chunk.job)


def test_a_long_label_keeps_one_slot_and_its_baseline_across_chunks() -> None:
    chunks = [_relabel(c, LONG) for c in synth.chunks(0.25, seed=3, chunk_rows=400)]
    eng = Engine(None, rack_info(synth.meta()))
    run_engine(chunks, engine=eng, finish=False)
    names = [eng.slots.name(i) for i in range(len(eng.slots.names))]
    assert names.count(LONG) == 1, names  # one slot, named in full
    assert not [n for n in names if n.startswith("pretrain") and n != LONG], names
    slot = names.index(LONG)
    assert eng.baselines.stats[slot, 0] > 10  # its baseline kept learning: never evicted and reset


@pytest.mark.parametrize("length", [1, 32, 33, STAGE_LABEL_MAX_CHARS, STAGE_LABEL_MAX_CHARS + 1, 200])
def test_every_part_applies_the_same_length_rule(length: int, tmp_path) -> None:  # type: ignore[no-untyped-def]
    label = "a" * length
    ok = length <= STAGE_LABEL_MAX_CHARS
    assert is_stage_label(label) is ok
    assert bool(client._LABEL.match(label)) is ok  # the stdlib-only copy of the rule
    if ok:
        assert check_label(label) == label
    else:
        with pytest.raises(HintError):
            check_label(label)
    trace = tmp_path / "t.csv"
    trace.write_text(f"ts,stage\n1750000000,{label}\n1750000001,idle\n")
    if ok:
        (chunk,) = list(open_trace(trace))
        assert chunk.stage[0] == label
    else:
        with pytest.raises(TraceFormatError, match=r"line 2: bad stage label.*at most 64"):
            list(open_trace(trace))


@pytest.mark.parametrize("label", ["Idle", "_x", "9a", "a-b", "a\n", "é", ""])
def test_every_part_refuses_the_same_characters(label: str) -> None:
    assert not is_stage_label(label)
    assert not client._LABEL.match(label)
