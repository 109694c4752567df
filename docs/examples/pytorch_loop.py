"""A plain PyTorch training loop with rackwatt stage hints and one energy window per epoch.

Run it as your own loop: only the ``rackwatt_client`` lines are new. Nothing here imports torch:
``model``, ``loader`` and ``optimizer`` are whatever your loop already has (anything with the
usual ``model(batch) -> loss``, ``loss.backward()``, ``optimizer.step()`` / ``zero_grad()``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rackwatt_client import Measurement, begin_window, end_window, get_energy_client, mark, stage

# The rack agent accounts the end of a window about a minute after it (its bins close after a
# look-ahead), so epochs are ended without waiting and completed once training is over.
SETTLE_S = 90.0


def train(
    model: Callable[[Any], Any],
    loader: Iterable[Any],
    optimizer: Any,
    epochs: int,
    evaluate: Callable[[], Any] | None = None,
    save: Callable[[int], Any] | None = None,
) -> list[Measurement]:
    """Train for ``epochs``; returns one Measurement per epoch (facility parts settled at the end)."""
    measurements = []
    for epoch in range(epochs):
        begin_window(f"epoch_{epoch}")
        mark("data_load")
        for batch in loader:
            with stage("forward_backward"):
                loss = model(batch)
                loss.backward()
            with stage("grad_sync"):  # the optimizer step is where DDP's all-reduce finishes
                optimizer.step()
                optimizer.zero_grad()
        if evaluate is not None:
            with stage("eval"):
                evaluate()
        if save is not None:
            with stage("checkpoint"):
                save(epoch)
        measurements.append(end_window(f"epoch_{epoch}"))
    mark("idle")
    client = get_energy_client()
    return [client.refresh(m, wait_s=SETTLE_S) if m.pending else m for m in measurements]


def describe(m: Measurement) -> str:
    """One log line: every figure, or why it is missing."""

    def kj(value: float | None, name: str) -> str:
        return f"{value / 1e3:.1f} kJ" if value is not None else f"n/a ({m.unavailable.get(name, '?')})"

    return (
        f"{m.name}: {m.elapsed_s:.1f} s, GPU {kj(m.gpu_energy_j, 'gpu_energy_j')}, "
        f"facility {kj(m.facility_energy_j, 'facility_energy_j')} "
        f"(IT {kj(m.it_energy_j, 'it_energy_j')}, cooling {kj(m.cooling_energy_j, 'cooling_energy_j')})"
    )
