"""A Hugging Face ``transformers`` Trainer callback: stage hints and one energy window per epoch.

Usage::

    from hf_trainer_callback import RackwattCallback
    trainer = Trainer(model=model, args=args, train_dataset=ds, callbacks=[RackwattCallback()])
    trainer.train()

Written against ``TrainerCallback``'s documented events (``on_train_begin``, ``on_epoch_begin``,
``on_step_begin``, ``on_pre_optimizer_step`` (transformers >= 4.43), ``on_step_end``,
``on_evaluate``, ``on_save``, ``on_epoch_end``, ``on_train_end``; each called as
``(args, state, control, **kwargs)``). Trainer decides to evaluate or save in ``on_step_end`` and
does it right after, so the stage is marked there (``on_evaluate`` and ``on_save`` come after the
work). It imports transformers only if it is there, so the file can be read and tested without it.
"""

from __future__ import annotations

import logging
from typing import Any

from rackwatt_client import EnergyClient, Measurement, get_energy_client, mark

try:
    from transformers import TrainerCallback  # type: ignore[import-not-found]
except ImportError:  # the callback's logic does not depend on the base class
    TrainerCallback = object

log = logging.getLogger("rackwatt.hf")
SETTLE_S = 90.0  # the rack agent accounts a window's end about a minute later (docs/client.md)


class RackwattCallback(TrainerCallback):  # type: ignore[misc,valid-type]
    """Marks stages from the Trainer's events; measures each epoch; settles them at the end."""

    def __init__(self, client: EnergyClient | None = None) -> None:
        self.client = client or get_energy_client()
        self.measurements: list[Measurement] = []
        self._epoch: str | None = None

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        mark("data_load")

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._epoch = f"epoch_{int(state.epoch or 0)}"
        self.client.begin_window(self._epoch)

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        mark("forward_backward")

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        mark("grad_sync")

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if control.should_evaluate:  # Trainer evaluates, then saves, right after this event
            mark("eval")
        elif control.should_save:
            mark("checkpoint")
        else:
            mark("data_load")  # the loader fetches the next batch until the next step_begin

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        mark("checkpoint" if control.should_save else "data_load")  # evaluation is over

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        mark("data_load")  # the checkpoint is written

    def on_epoch_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._epoch is not None:
            self.measurements.append(self.client.end_window(self._epoch))
            self._epoch = None

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        mark("idle")
        self.measurements = [
            self.client.refresh(m, wait_s=SETTLE_S) if m.pending else m for m in self.measurements
        ]
        for m in self.measurements:
            log.info("rackwatt %s: facility %s J, GPU %s J", m.name, m.facility_energy_j, m.gpu_energy_j)
