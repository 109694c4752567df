"""The docs/examples callbacks and loop, driven by stand-in trainers that call the frameworks'
documented method names in their order, against the agent's real listener and a filled ledger."""

from __future__ import annotations

import importlib.util
import threading
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import rackwatt_client.stage_hints
import rackwatt_client.window

from agent.engine.energy_ledger import EnergyLedger
from agent.engine.signals import N_FIELDS, F
from tests.client.client_peers import ListenerThread
from tests.conftest import REPO_ROOT

POWER_W = 30_000.0  # the rack's IT power in the filled ledger; cooling is a quarter of it
BIN_S = 5.0


def _example(name: str) -> Any:
    path = REPO_ROOT / "docs" / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"rackwatt_example_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _fill(led: EnergyLedger, t_from: float, t_to: float) -> None:
    start = np.arange(np.floor(t_from / BIN_S) * BIN_S, t_to, BIN_S)
    start = start[start >= (led.accounted_until or -np.inf)]
    sums = np.zeros((start.size, N_FIELDS))
    for name in ("pdu_s", "cool_s", "gpu_s"):
        sums[:, F[name]] = BIN_S
    sums[:, F["pdu_ws"]] = POWER_W * BIN_S
    sums[:, F["cool_ws"]] = 0.25 * POWER_W * BIN_S
    led.add(start, sums, [""] * start.size)


@pytest.fixture
def agent(sock_dir: Path, monkeypatch: pytest.MonkeyPatch, no_nvml: None) -> Any:
    """A listener over a ledger accounted up to a few seconds ago; the examples' default clients
    talk to it (module-level clients made fresh for each test)."""
    path = sock_dir / "stage.sock"
    monkeypatch.setenv("RACKWATT_STAGE_SOCKET", str(path))
    monkeypatch.delenv("RACKWATT_JOB", raising=False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setattr(rackwatt_client.stage_hints, "_default", None)
    monkeypatch.setattr(rackwatt_client.window, "_default", None)
    led = EnergyLedger(BIN_S)
    _fill(led, time.time() - 120, time.time() - 3)
    with ListenerThread(path, types.SimpleNamespace(ledger=led)) as listener:
        listener.ledger = led  # type: ignore[attr-defined]
        yield listener


def _account_soon(led: EnergyLedger) -> threading.Timer:
    """The agent accounts the windows' ends half a second later (as its bins close)."""
    timer = threading.Timer(0.5, lambda: _fill(led, time.time() - 5, time.time() + 2 * BIN_S))
    timer.start()
    return timer


def _check(measurements: list[Any], names: list[str], agent: Any) -> None:
    assert [m.name for m in measurements] == names
    for m in measurements:
        assert not m.pending, m.unavailable
        assert m.start_ts is not None and m.end_ts is not None
        span = m.end_ts - m.start_ts
        assert m.it_energy_j == pytest.approx(POWER_W * span, rel=1e-6, abs=1e-3)
        assert m.facility_energy_j == pytest.approx(1.25 * POWER_W * span, rel=1e-6, abs=1e-3)
        assert m.gpu_energy_j is None and "pynvml" in m.unavailable["gpu_energy_j"]
    deadline = time.monotonic() + 3
    while agent.timeline.current(time.time()).stage != "idle" and time.monotonic() < deadline:
        time.sleep(0.05)  # the stage client sends a held-back change within a quarter second
    assert agent.timeline.current(time.time()).stage == "idle"
    assert agent.intake.counters["accepted"] >= 2 and agent.intake.counters["queries"] >= 2 * len(names)


class _Loss:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def backward(self) -> None:
        self.log.append("backward")
        time.sleep(0.002)


def test_the_pytorch_loop(agent: Any) -> None:
    example = _example("pytorch_loop")
    log: list[str] = []
    optimizer = types.SimpleNamespace(step=lambda: log.append("step"), zero_grad=lambda: None)
    timer = _account_soon(agent.ledger)
    measurements = example.train(
        lambda batch: _Loss(log), range(5), optimizer, epochs=2, evaluate=lambda: log.append("eval")
    )
    timer.join()
    assert log.count("backward") == 10 and log.count("step") == 10 and log.count("eval") == 2
    _check(measurements, ["epoch_0", "epoch_1"], agent)
    line = example.describe(measurements[0])
    assert "facility" in line and "n/a (pynvml" in line


def _recording(module: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The stages the example marks, in order (the real ``mark`` still sends them)."""
    seen: list[str] = []
    real = module.mark

    def mark(name: str, job: str | None = None) -> None:
        seen.append(name)
        real(name, job)

    monkeypatch.setattr(module, "mark", mark)
    return seen


def test_the_hugging_face_trainer_callback(agent: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    example = _example("hf_trainer_callback")
    seen = _recording(example, monkeypatch)
    cb = example.RackwattCallback()
    args = types.SimpleNamespace()
    control = types.SimpleNamespace(should_evaluate=False, should_save=False)
    state = types.SimpleNamespace(epoch=0.0, global_step=0)
    cb.on_train_begin(args, state, control)  # the order Trainer's inner loop calls them in
    for epoch in range(3):
        state.epoch = float(epoch)
        cb.on_epoch_begin(args, state, control)
        for step in range(4):
            cb.on_step_begin(args, state, control)
            time.sleep(0.002)
            cb.on_pre_optimizer_step(args, state, control)
            state.global_step += 1
            last = step == 3  # DefaultFlowCallback asks for eval and save at the epoch's last step
            control.should_evaluate = control.should_save = last
            cb.on_step_end(args, state, control)
            if last:
                control.should_evaluate = False  # Trainer resets the flag, evaluates, then saves
                cb.on_evaluate(args, state, control, metrics={"eval_loss": 1.0})
                control.should_save = False
                cb.on_save(args, state, control)
        cb.on_epoch_end(args, state, control)
    timer = _account_soon(agent.ledger)
    cb.on_train_end(args, state, control)
    timer.join()
    _check(cb.measurements, ["epoch_0", "epoch_1", "epoch_2"], agent)
    one_step = ["forward_backward", "grad_sync", "data_load"]
    epoch_end = ["forward_backward", "grad_sync", "eval", "checkpoint", "data_load"]
    assert seen == ["data_load", *(one_step * 3 + epoch_end) * 3, "idle"], seen


def test_the_lightning_callback(agent: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    example = _example("lightning_callback")
    seen = _recording(example, monkeypatch)
    cb = example.RackwattCallback()
    trainer, module = types.SimpleNamespace(current_epoch=0), object()
    cb.on_train_start(trainer, module)  # Lightning's fit loop order
    for epoch in range(2):
        trainer.current_epoch = epoch
        cb.on_train_epoch_start(trainer, module)
        for i in range(3):
            cb.on_train_batch_start(trainer, module, [i], i)
            cb.on_before_optimizer_step(trainer, module, object())
            cb.on_train_batch_end(trainer, module, {"loss": 0.1}, [i], i)
        cb.on_validation_epoch_start(trainer, module)
        cb.on_validation_epoch_end(trainer, module)
        cb.on_save_checkpoint(trainer, module, {})
        cb.on_train_epoch_end(trainer, module)
    timer = _account_soon(agent.ledger)
    cb.on_train_end(trainer, module)
    timer.join()
    _check(cb.measurements, ["epoch_0", "epoch_1"], agent)
    batch = ["forward_backward", "grad_sync", "data_load"]
    epoch = [*batch * 3, "eval", "data_load", "checkpoint"]
    assert seen == ["data_load", *epoch * 2, "idle"], seen
