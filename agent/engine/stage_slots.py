"""Stage labels → fixed slots, the stage of each row (hint or inferred), and the segment timeline.

``N_SLOTS`` stage names: slot 0 is ``unknown``, the canonical stages follow, custom labels take
the rest (the least recently used evicted when all are taken; its owner resets its statistics).
A valid hint (``agent.trace.model.is_stage_label``) wins; other rows get the ``StageInferrer``'s
label (``StageSource`` is the one place that knows which inferrer is used).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from agent.stages.infer import StageInferrer
from agent.trace.model import CANONICAL_STAGES, STAGE_LABEL_MAX_CHARS, TraceChunk, is_stage_label

N_SLOTS = 16
UNKNOWN = "unknown"
NAME_WIDTH = STAGE_LABEL_MAX_CHARS  # a slot keeps every accepted label whole (never truncates)


class StageSlots:
    """Fixed table of stage names with LRU eviction of custom labels."""

    def __init__(self) -> None:
        self.names = np.full(N_SLOTS, "", dtype=f"<U{NAME_WIDTH}")
        self.names[: 1 + len(CANONICAL_STAGES)] = (UNKNOWN, *CANONICAL_STAGES)
        self.last_used = np.zeros(N_SLOTS)
        self.evicted: list[int] = []  # slots reset since the owner last looked (owner clears)
        self._index: dict[str, int] = {}
        self._reindex()

    def _reindex(self) -> None:
        self._index = {str(n): i for i, n in enumerate(self.names) if n}

    def slot(self, name: str, ts: float) -> int:
        if not name or not is_stage_label(name):  # callers pass valid labels; never store a cut one
            return 0
        i = self._index.get(name)
        if i is None:
            free = [j for j in range(1 + len(CANONICAL_STAGES), N_SLOTS) if not self.names[j]]
            if free:
                i = free[0]
            else:
                custom = np.arange(1 + len(CANONICAL_STAGES), N_SLOTS)
                i = int(custom[np.argmin(self.last_used[custom])])
                self.evicted.append(i)
            self.names[i] = name
            self._reindex()
        self.last_used[i] = ts
        return i

    def slots_of(self, labels: np.ndarray, ts: np.ndarray) -> np.ndarray:
        """Slot per row for an object array of labels ("" → unknown)."""
        last_ts = float(ts[-1]) if ts.size else 0.0
        return map_runs(labels, lambda u: self.slot(u, last_ts), np.int64)

    def name(self, i: int) -> str:
        return str(self.names[i]) or UNKNOWN

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {"slot_names": self.names, "slot_last_used": self.last_used}

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.names[...] = arrays["slot_names"]
        self.last_used[...] = arrays["slot_last_used"]
        self._reindex()


def map_runs(values: np.ndarray, fn: Callable[[str], Any], dtype: Any) -> np.ndarray:
    """``fn`` applied per row, computed once per run of equal values (labels come in long runs)."""
    n = values.shape[0]
    if not n:
        return np.zeros(0, dtype=dtype)
    starts = np.concatenate(([0], np.flatnonzero(values[1:] != values[:-1]) + 1))
    cache: dict[str, Any] = {}
    mapped = []
    for v in values[starts].tolist():
        key = "" if v is None else str(v)
        if key not in cache:
            cache[key] = fn(key)
        mapped.append(cache[key])
    lengths = np.diff(np.concatenate((starts, [n])))
    return np.repeat(np.array(mapped, dtype=dtype), lengths)


class StageSource:
    """Stage per row: the hint when valid, else the inferrer's label."""

    def __init__(self) -> None:
        self.malformed_hints = 0
        self.inferrer = StageInferrer()

    def infer_stages(self, chunk: TraceChunk) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(label per row, inferred per row, hinted per row)."""
        hints = chunk.stage  # malformed hints blanked and counted
        ok = map_runs(hints, lambda u: u == "" or is_stage_label(u), bool)
        if not ok.all():
            hints = np.where(ok, hints, "").astype(object)
            self.malformed_hints += int((~ok).sum())
        hinted = hints.astype(str) != ""
        labels, inferred = self.inferrer.infer_chunk(chunk, hints)
        return np.asarray(labels, dtype=object), np.asarray(inferred, dtype=bool) & ~hinted, hinted

    def state(self) -> dict[str, Any]:
        return {"malformed_hints": self.malformed_hints, "inferrer": self.inferrer.save_state()}

    def load(self, state: dict[str, Any]) -> None:
        self.malformed_hints = int(state.get("malformed_hints", 0))
        if state.get("inferrer"):
            self.inferrer.load_state(state["inferrer"])


class Segments:
    """Run-length stage timeline: closed segments are returned as report records."""

    def __init__(self) -> None:
        self.start = float("nan")
        self.key = -1  # slot * 2 + inferred

    def feed(self, ts: np.ndarray, slots: np.ndarray, inferred: np.ndarray,
             slots_tab: StageSlots) -> list[dict[str, Any]]:
        if not ts.size:
            return []
        keys = slots * 2 + inferred.astype(np.int64)
        out: list[dict[str, Any]] = []
        change = np.flatnonzero(keys[1:] != keys[:-1]) + 1
        if self.key < 0:
            self.start, self.key = float(ts[0]), int(keys[0])
        elif int(keys[0]) != self.key:
            change = np.concatenate(([0], change))
        for i in change:
            out.append(self._record(float(ts[i]), slots_tab))
            self.start, self.key = float(ts[i]), int(keys[i])
        return out

    def close(self, end_ts: float, slots_tab: StageSlots) -> list[dict[str, Any]]:
        if self.key < 0 or not end_ts > self.start:
            return []
        rec = self._record(end_ts, slots_tab)
        self.key = -1
        return [rec]

    def _record(self, end: float, slots_tab: StageSlots) -> dict[str, Any]:
        return {
            "type": "segment",
            "start": self.start,
            "end": end,
            "stage": slots_tab.name(self.key // 2),
            "source": "inferred" if self.key % 2 else "hint",
        }

    def state_arrays(self) -> dict[str, np.ndarray]:
        return {"seg": np.array([self.start, float(self.key)])}

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        self.start, self.key = float(arrays["seg"][0]), int(arrays["seg"][1])
