"""In-memory shapes of a trace (``docs/spec/trace-format.md``): metadata and column chunks.

A trace is read and written in chunks of rows so nothing ever needs the whole file in memory.
Numeric columns are float64 arrays where NaN means "not sampled at this row" (never zero).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

CANONICAL_STAGES: tuple[str, ...] = (
    "idle", "data_load", "forward_backward", "grad_sync", "checkpoint", "eval"
)
TEXT_COLUMNS: tuple[str, ...] = ("stage", "job")
J_PER_KWH = 3.6e6  # energy columns and payloads are in kWh; NVML, Prometheus and Sparkplug count J

# The stage-label rule, owned here and used by the trace reader, the hint parser and the engine's
# stage slots (the stdlib-only ``agent.stages.client`` keeps a copy; a test holds them equal).
# 64 characters: the limit the hint protocol publishes (agent/schemas/hint.schema.json) and what a
# slot stores whole, so a label is either refused everywhere or kept exactly everywhere.
STAGE_LABEL_MAX_CHARS = 64
STAGE_LABEL_RULE = f"match [a-z][a-z0-9_]*, at most {STAGE_LABEL_MAX_CHARS} characters"
_STAGE_LABEL_RE = re.compile(rf"[a-z][a-z0-9_]{{0,{STAGE_LABEL_MAX_CHARS - 1}}}")


def is_stage_label(label: object) -> bool:
    """True for a label every part of the agent accepts and keeps whole."""
    return isinstance(label, str) and _STAGE_LABEL_RE.fullmatch(label) is not None


@dataclass
class TraceMeta:
    """The ``# key=value`` lines before the header."""

    rack: str = "rack"
    site: str = "site"
    crac_shares: dict[str, float] = field(default_factory=dict)  # crac id → share (default 1.0)
    interval_s: float | None = None
    extra: dict[str, str] = field(default_factory=dict)  # any other metadata, kept verbatim

    def crac_share(self, crac_id: str) -> float:
        return self.crac_shares.get(crac_id, 1.0)


@dataclass
class TraceChunk:
    """Consecutive rows of a trace: ``numeric`` column name → float64 array of len(ts); ``stage`` and
    ``job`` object arrays of ``str`` (``""``: no label); ``first_line``: file line of the first row, 0 if
    unknown."""

    ts: np.ndarray
    numeric: dict[str, np.ndarray]
    stage: np.ndarray
    job: np.ndarray
    first_line: int = 0

    def __len__(self) -> int:
        return int(self.ts.shape[0])

    def take(self, rows: slice | np.ndarray) -> TraceChunk:
        """The selected rows: a slice, a boolean mask or increasing indices. ``first_line`` follows
        a slice's start; after a mask or indices it stays the first row's line as it was."""
        first = self.first_line
        if isinstance(rows, slice) and first:
            first += rows.indices(len(self))[0]
        return TraceChunk(
            ts=self.ts[rows],
            numeric={name: values[rows] for name, values in self.numeric.items()},
            stage=self.stage[rows],
            job=self.job[rows],
            first_line=first,
        )

    @staticmethod
    def concat(chunks: list[TraceChunk]) -> TraceChunk:
        """All rows of ``chunks`` in order; a column missing from a chunk is NaN there (first-seen order)."""
        names: dict[str, None] = {}
        for chunk in chunks:
            names.update(dict.fromkeys(chunk.numeric))
        return TraceChunk(
            ts=np.concatenate([c.ts for c in chunks]),
            numeric={name: np.concatenate([c.column(name) for c in chunks]) for name in names},
            stage=np.concatenate([c.stage for c in chunks]),
            job=np.concatenate([c.job for c in chunks]),
            first_line=chunks[0].first_line if chunks else 0,
        )

    def column(self, name: str) -> np.ndarray:
        """A numeric column, or all-NaN when the trace does not have it."""
        found = self.numeric.get(name)
        return found if found is not None else np.full(len(self), np.nan)

    def columns_matching(self, prefix: str, suffix: str) -> dict[str, np.ndarray]:
        """Numeric columns named ``<prefix><x><suffix>``, e.g. ("gpu.", ".power_w") → {"0": …, "1": …}."""
        found: dict[str, np.ndarray] = {}
        for name, values in self.numeric.items():
            if name.startswith(prefix) and name.endswith(suffix) and len(name) > len(prefix) + len(suffix):
                found[name[len(prefix) : len(name) - len(suffix)]] = values
        return found
