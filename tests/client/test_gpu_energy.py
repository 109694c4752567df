"""The job's GPU energy from NVML's counters, faked at the ``pynvml`` boundary."""

from __future__ import annotations

from pathlib import Path

import pytest
from rackwatt_client import EnergyClient, StageClient

from tests.client.client_peers import FakeNvml


def _client(sock_dir: Path) -> EnergyClient:
    path = str(sock_dir / "no-agent.sock")
    return EnergyClient(socket_path=path, timeout_s=0.2, stage_client=StageClient(socket_path=path, job=""))


def test_the_window_is_the_counters_difference_in_joules(fake_nvml: FakeNvml, sock_dir: Path) -> None:
    client = _client(sock_dir)
    client.begin_window("step")
    fake_nvml.energy_mj[0] += 350_500  # 350.5 J on GPU 0
    fake_nvml.energy_mj[1] += 149_500
    m = client.end_window("step")
    assert m.gpu_energy_j == pytest.approx(500.0)
    assert "gpu_energy_j" not in m.unavailable
    assert m.facility_energy_j is None and "no-agent.sock" in m.unavailable["facility_energy_j"]
    client.begin_window("again")
    client.end_window("again")
    assert fake_nvml.inits == 1  # probed once, cached


def test_only_the_gpus_cuda_lets_this_process_use(
    fake_nvml: FakeNvml, sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    client = _client(sock_dir)
    client.begin_window("step")
    fake_nvml.energy_mj[0] += 10_000_000
    fake_nvml.energy_mj[1] += 2_000
    assert client.end_window("step").gpu_energy_j == pytest.approx(2.0)


def test_a_counter_going_backwards_is_none_never_negative(fake_nvml: FakeNvml, sock_dir: Path) -> None:
    client = _client(sock_dir)
    client.begin_window("step")
    fake_nvml.energy_mj[1] = 5  # driver reload
    m = client.end_window("step")
    assert m.gpu_energy_j is None and "GPU 1" in m.unavailable["gpu_energy_j"]
    assert "backwards" in m.unavailable["gpu_energy_j"]


def test_no_counter_and_no_library_say_why(
    fake_nvml: FakeNvml, sock_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_nvml.supported = False
    client = _client(sock_dir)
    client.begin_window("step")
    m = client.end_window("step")
    assert m.gpu_energy_j is None and "Not Supported" in m.unavailable["gpu_energy_j"]
    monkeypatch.setitem(__import__("sys").modules, "pynvml", None)
    bare = _client(sock_dir)
    bare.begin_window("step")
    m = bare.end_window("step")
    assert m.gpu_energy_j is None and "nvidia-ml-py" in m.unavailable["gpu_energy_j"]
    assert m.elapsed_s >= 0 and m.name == "step"
