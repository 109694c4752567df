"""Client test helpers: a short socket directory (AF_UNIX paths are limited to 107 bytes), the
engine tests' synthetic rack, and a fake ``pynvml`` at the library boundary."""

from __future__ import annotations

import shutil
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rwcl"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


class FakeNvml(types.ModuleType):
    """The few pynvml calls the client makes; ``energy_mj`` per GPU is what the test sets."""

    class NVMLError(Exception):
        pass

    def __init__(self, energy_mj: list[int], supported: bool = True) -> None:
        super().__init__("pynvml")
        self.energy_mj = energy_mj
        self.supported = supported
        self.inits = 0

    def nvmlInit(self) -> None:
        self.inits += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.energy_mj)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: int) -> int:
        if not self.supported:
            raise FakeNvml.NVMLError("Not Supported")
        return self.energy_mj[handle]


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    fake = FakeNvml([1_000_000, 2_000_000])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return fake


@pytest.fixture
def no_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
