"""``ShadowFits``: the regressions a held component would have learned, kept beside the held ones.

While the drift monitor holds a component, the model skips its bins; a suspicion that never
confirms then froze the baseline for hours (issue 16 item 4). So at a hold's start the component's
regressions are copied and the copy learns every bin. When the hold clears, the copy is adopted if
no fault was confirmed during it (a drift ``onset`` whose cause is a fault, seen in ``note_events``),
else discarded: the reference for a confirmed fault is the model from before its start.
Fixed memory: one copy of each regression (``response.EWLS``) and two flags per component.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from agent.engine.components import LEARNED
from agent.engine.response import EWLS

NOT_A_FAULT = frozenset({"workload"})  # report-format.md: "informational, not a fault"


class ShadowFits:
    """Per learned component (``LEARNED``): a shadow copy of its regressions (``fits``) while held."""

    def __init__(self, fits: Mapping[str, list[EWLS]]) -> None:
        self.fits = fits
        self.copies: dict[str, list[EWLS]] = {c: [_blank_like(r) for r in regs] for c, regs in fits.items()}
        self.active = dict.fromkeys(LEARNED, False)
        self.confirmed = dict.fromkeys(LEARNED, False)
        self.adopted = 0  # holds that cleared without a confirmed fault (their shadow was taken)
        self.discarded = 0  # holds with a confirmed fault (the pre-fault model was kept)

    def note_events(self, events: Iterable[Mapping[str, Any]], held: frozenset[str]) -> None:
        """A fault onset while components are held confirms their suspicion."""
        if any(ev.get("state") == "onset" and ev.get("cause") not in NOT_A_FAULT for ev in events):
            for c in held & self.confirmed.keys():
                self.confirmed[c] = True

    def start(self, component: str) -> None:
        """The hold of ``component`` begins: its shadow starts from the held model as it is now."""
        if self.active[component]:
            return
        for dst, src in zip(self.copies[component], self.fits[component], strict=True):
            _copy_into(dst, src)
        self.active[component] = True
        self.confirmed[component] = False

    def learning(self, component: str) -> list[EWLS] | None:
        """The shadow regressions that learn the held bins now (None: no shadow for it)."""
        return self.copies[component] if self.active[component] and not self.confirmed[component] else None

    def end(self, component: str) -> None:
        """The hold of ``component`` cleared: adopt its shadow, or keep the pre-fault model."""
        if not self.active[component]:
            return
        if self.confirmed[component]:
            self.discarded += 1
        else:
            for dst, src in zip(self.fits[component], self.copies[component], strict=True):
                _copy_into(dst, src)
            self.adopted += 1
        self.active[component] = False
        self.confirmed[component] = False

    def state_arrays(self) -> dict[str, np.ndarray]:
        out = {
            "shadow_flags": np.array(
                [float(self.active[c]) for c in LEARNED] + [float(self.confirmed[c]) for c in LEARNED]
                + [float(self.adopted), float(self.discarded)]
            )
        }
        for c, regs in self.copies.items():
            for i, r in enumerate(regs):
                out.update(r.state_arrays(f"shadow_{c}{i}"))
        return out

    def load_arrays(self, a: dict[str, np.ndarray]) -> None:
        """The inverse of ``state_arrays``; a state saved before shadows existed starts with none."""
        if "shadow_flags" not in a:
            return
        f = a["shadow_flags"]
        k = len(LEARNED)
        for i, c in enumerate(LEARNED):
            self.active[c], self.confirmed[c] = bool(f[i]), bool(f[k + i])
        self.adopted, self.discarded = int(f[2 * k]), int(f[2 * k + 1])
        for c, regs in self.copies.items():
            for i, r in enumerate(regs):
                r.load_arrays(f"shadow_{c}{i}", a)


def _blank_like(r: EWLS) -> EWLS:
    return EWLS(r.theta.shape[0], r.theta.shape[1], r.ridge.copy())


def _copy_into(dst: EWLS, src: EWLS) -> None:
    dst.R[...] = src.R
    dst.r[...] = src.r
    dst.theta[...] = src.theta
    dst.weight[...] = src.weight
