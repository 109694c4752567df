"""A PyTorch Lightning callback: stage hints and one energy window per training epoch.

Usage::

    from lightning_callback import RackwattCallback
    trainer = lightning.Trainer(callbacks=[RackwattCallback()])
    trainer.fit(model, datamodule)

Written against ``lightning.pytorch.Callback``'s documented hooks: ``on_train_start``,
``on_train_epoch_start``, ``on_train_batch_start``, ``on_before_optimizer_step``,
``on_train_batch_end``, ``on_validation_epoch_start``, ``on_validation_epoch_end``,
``on_save_checkpoint``, ``on_train_epoch_end``, ``on_train_end``. It imports Lightning only if it
is there, so the file can be read and tested without it.
"""

from __future__ import annotations

import logging
from typing import Any

from rackwatt_client import EnergyClient, Measurement, get_energy_client, mark

try:
    from lightning.pytorch import Callback  # type: ignore[import-not-found]
except ImportError:
    try:
        from pytorch_lightning import Callback  # type: ignore[import-not-found]
    except ImportError:  # the callback's logic does not depend on the base class
        Callback = object

log = logging.getLogger("rackwatt.lightning")
SETTLE_S = 90.0  # the rack agent accounts a window's end about a minute later (docs/client.md)


class RackwattCallback(Callback):  # type: ignore[misc,valid-type]
    """Marks stages from Lightning's hooks; measures each training epoch; settles them at the end."""

    def __init__(self, client: EnergyClient | None = None) -> None:
        self.client = client or get_energy_client()
        self.measurements: list[Measurement] = []
        self._epoch: str | None = None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        mark("data_load")

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._epoch = f"epoch_{int(trainer.current_epoch)}"
        self.client.begin_window(self._epoch)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        mark("forward_backward")

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        mark("grad_sync")

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        mark("data_load")  # the loader fetches the next batch until the next batch_start

    def on_validation_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        mark("eval")

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        mark("data_load")

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        mark("checkpoint")

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._epoch is not None:
            self.measurements.append(self.client.end_window(self._epoch))
            self._epoch = None

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        mark("idle")
        self.measurements = [
            self.client.refresh(m, wait_s=SETTLE_S) if m.pending else m for m in self.measurements
        ]
        for m in self.measurements:
            log.info("rackwatt %s: facility %s J, GPU %s J", m.name, m.facility_energy_j, m.gpu_energy_j)
