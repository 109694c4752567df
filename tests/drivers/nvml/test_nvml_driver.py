"""NvmlGpuDriver against fake pynvml functions: values, energy counter resets, every error path."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pynvml
import pytest

from agent.config.model import NvmlSection
from agent.sim.devices.fake_nvml import DEFAULT_GPU, FakeNvml
from drivers.base import PollResult
from drivers.nvml_gpu.driver import NvmlGpuDriver


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def fake(clock: Clock) -> Iterator[FakeNvml]:
    gpus = {0: dict(DEFAULT_GPU), 1: dict(DEFAULT_GPU, power_w=300.0, util_pct=12.0)}
    nvml = FakeNvml(lambda: gpus, clock=clock)
    nvml.gpus = gpus  # type: ignore[attr-defined]
    with nvml.installed():
        yield nvml


def poll(driver: NvmlGpuDriver) -> PollResult:
    return asyncio.run(asyncio.wait_for(driver.poll(), 10))


def test_all_signals_of_all_gpus(fake: FakeNvml, clock: Clock) -> None:
    result = poll(NvmlGpuDriver(NvmlSection(), clock=clock))
    assert result.ok and result.error is None and result.device == "nvml"
    s = result.signals
    assert s["gpu.0.power_w"] == 650.0 and s["gpu.1.power_w"] == 300.0
    assert s["gpu.1.util_pct"] == 12.0 and s["gpu.0.mem_util_pct"] == 41.0
    assert s["gpu.0.temp_c"] == 63.0 and s["gpu.0.sm_clock_mhz"] == 1755.0
    assert s["gpu.0.power_limit_w"] == 700.0
    assert "gpu.0.energy_j" in s and not result.estimated
    assert "nvmlDeviceGetFieldValues" in fake.calls  # POWER_INSTANT preferred


def test_gpu_selection(fake: FakeNvml, clock: Clock) -> None:
    result = poll(NvmlGpuDriver(NvmlSection(gpus=(1,)), clock=clock))
    assert {name.split(".")[1] for name in result.signals} == {"1"}
    missing = poll(NvmlGpuDriver(NvmlSection(gpus=(0, 7)), clock=clock))
    assert not missing.ok and "gpu 7: not present (this host has 2 GPUs)" in (missing.error or "")
    assert "gpu.0.power_w" in missing.signals


def test_energy_counter_is_diffed_and_survives_a_reset(fake: FakeNvml, clock: Clock) -> None:
    driver = NvmlGpuDriver(NvmlSection(), clock=clock)
    first = poll(driver).signals["gpu.0.energy_j"]
    clock.now += 10
    second = poll(driver).signals["gpu.0.energy_j"]
    assert second - first == pytest.approx(6500.0)  # 650 W × 10 s
    clock.now += 10
    fake.reset_counter(0)  # driver reload: the device counter restarts from 0
    clock.now += 2
    third = poll(driver).signals["gpu.0.energy_j"]
    assert third - second == pytest.approx(1300.0)  # only the energy since the reset is added
    assert third > second


def test_absorbed_resets_are_reported_for_the_engine(fake: FakeNvml, clock: Clock) -> None:
    """The reset never reaches energy_j, so its count does: the engine's driver-reload evidence."""
    driver = NvmlGpuDriver(NvmlSection(), clock=clock)
    assert poll(driver).signals["gpu.0.energy_resets"] == 0.0
    clock.now += 10
    assert poll(driver).signals["gpu.0.energy_resets"] == 0.0
    clock.now += 10
    fake.reset_counter(0)
    clock.now += 2
    s = poll(driver).signals
    assert s["gpu.0.energy_resets"] == 1.0 and s["gpu.1.energy_resets"] == 0.0


def test_power_falls_back_to_power_usage_without_power_instant(fake: FakeNvml, clock: Clock) -> None:
    fake.unsupported.add("POWER_INSTANT")
    driver = NvmlGpuDriver(NvmlSection(), clock=clock)
    result = poll(driver)
    assert result.signals["gpu.0.power_w"] == 650.0
    calls_before = fake.calls.count("nvmlDeviceGetFieldValues")
    poll(driver)
    assert fake.calls.count("nvmlDeviceGetFieldValues") == calls_before  # probed once, then cached


def test_energy_is_integrated_and_flagged_without_a_counter(fake: FakeNvml, clock: Clock) -> None:
    fake.unsupported.add("nvmlDeviceGetTotalEnergyConsumption")
    driver = NvmlGpuDriver(NvmlSection(), clock=clock)
    first = poll(driver)
    clock.now += 1.0
    fake.gpus[0]["power_w"] = 450.0  # type: ignore[attr-defined]
    second = poll(driver)
    assert first.signals["gpu.0.energy_j"] == 0.0
    assert second.signals["gpu.0.energy_j"] == pytest.approx((650.0 + 450.0) / 2)  # trapezoid over 1 s
    assert "gpu.0.energy_j" in second.estimated and "gpu.0.power_w" not in second.estimated


def test_not_supported_signals_are_absent_without_an_error(fake: FakeNvml, clock: Clock) -> None:
    fake.unsupported |= {"nvmlDeviceGetClockInfo", "nvmlDeviceGetEnforcedPowerLimit"}
    result = poll(NvmlGpuDriver(NvmlSection(), clock=clock))
    assert result.ok and result.error is None
    assert "gpu.0.sm_clock_mhz" not in result.signals and "gpu.0.power_limit_w" not in result.signals
    assert result.signals["gpu.0.temp_c"] == 63.0


def test_other_call_errors_cost_only_that_signal(fake: FakeNvml, clock: Clock) -> None:
    fake.failures[(0, "nvmlDeviceGetTemperature")] = pynvml.NVML_ERROR_UNKNOWN
    result = poll(NvmlGpuDriver(NvmlSection(), clock=clock))
    assert result.ok
    assert "gpu.0.temp_c" not in result.signals and result.signals["gpu.1.temp_c"] == 63.0
    assert "gpu 0 temp_c" in (result.error or "") and "999" in (result.error or "")


def test_lost_gpu_is_a_clear_status_and_comes_back(fake: FakeNvml, clock: Clock) -> None:
    driver = NvmlGpuDriver(NvmlSection(), clock=clock)
    poll(driver)
    fake.lost.add(1)
    lost = poll(driver)
    assert not lost.ok
    assert "gpu 1: GPU is lost (NVML error 15" in (lost.error or "")
    assert not any(name.startswith("gpu.1.") for name in lost.signals)
    assert lost.signals["gpu.0.power_w"] == 650.0
    fake.lost.clear()
    back = poll(driver)
    assert back.ok and back.signals["gpu.1.power_w"] == 300.0


@pytest.mark.parametrize(
    ("code", "message"),
    [(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "nvml: NVML library not found (no NVIDIA driver?)"),
     (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "nvml: NVIDIA driver not loaded (NVML error 9)"),
     (pynvml.NVML_ERROR_NO_PERMISSION, "nvml: no permission to use NVML (NVML error 4)")],
)
def test_missing_library_or_driver_is_a_status_not_a_crash(
    fake: FakeNvml, clock: Clock, code: int, message: str
) -> None:
    fake.init_error = code
    driver = NvmlGpuDriver(NvmlSection(), clock=clock)
    result = poll(driver)
    assert not result.ok and result.signals == {} and result.error == message
    fake.init_error = None  # e.g. the driver was loaded later: the next poll initialises
    assert poll(driver).ok


def test_calls_run_off_the_event_loop(fake: FakeNvml, clock: Clock) -> None:
    threads: set[int] = set()
    original = fake.nvmlDeviceGetPowerUsage
    fake.unsupported.add("POWER_INSTANT")

    def spy(handle: object) -> int:
        threads.add(threading.get_ident())
        return original(handle)  # type: ignore[arg-type]

    pynvml.nvmlDeviceGetPowerUsage = spy  # restored by the fixture's patch on exit
    loop_thread = threading.get_ident()
    assert poll(NvmlGpuDriver(NvmlSection(), clock=clock)).ok
    assert threads and loop_thread not in threads


def test_close_shuts_nvml_down(fake: FakeNvml, clock: Clock) -> None:
    driver = NvmlGpuDriver(NvmlSection(), clock=clock)
    poll(driver)
    asyncio.run(driver.close())
    assert fake.calls[-1] == "nvmlShutdown" and not fake.initialised


def test_real_pynvml_without_a_driver_gives_the_library_message() -> None:
    """On a machine without NVIDIA's library the unpatched driver reports it (skipped where NVML works)."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        result = poll(NvmlGpuDriver(NvmlSection()))
        assert result.error == "nvml: NVML library not found (no NVIDIA driver?)"
        return
    except pynvml.NVMLError:
        pytest.skip("NVML library present but unusable here")
    pynvml.nvmlShutdown()
    pytest.skip("NVML works on this machine")


def test_a_hung_nvml_call_fails_the_poll_and_never_blocks(fake: FakeNvml, clock: Clock) -> None:
    release = threading.Event()
    original = fake.nvmlDeviceGetTemperature

    def stall(handle: object, sensor: int) -> int:
        release.wait(30)
        return original(handle, sensor)  # type: ignore[arg-type]

    pynvml.nvmlDeviceGetTemperature = stall  # restored by the fixture's patch on exit
    driver = NvmlGpuDriver(NvmlSection(interval_s=0.5), clock=clock)
    driver_deadline = driver.deadline_s

    async def body() -> tuple[PollResult, PollResult]:
        hung = await driver.poll()
        again = await driver.poll()
        return hung, again

    started = time.perf_counter()
    hung, again = asyncio.run(asyncio.wait_for(body(), 20))
    assert time.perf_counter() - started < driver_deadline + 1.5
    assert not hung.ok and hung.signals == {} and "within 2 s (driver hung?)" in (hung.error or "")
    assert not again.ok and "has not returned" in (again.error or "")
    release.set()
    deadline = time.monotonic() + 10
    while driver._lock.locked() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert poll(driver).ok


def test_counter_resets_are_reported_as_a_signal(fake: FakeNvml, clock: Clock) -> None:
    driver = NvmlGpuDriver(NvmlSection(), clock=clock)
    assert poll(driver).signals["gpu.0.energy_resets"] == 0.0
    clock.now += 10
    poll(driver)  # the counter stands at 6500 J
    fake.reset_counter(0)
    clock.now += 1  # back at 650 J: below the last reading, a reset
    after = poll(driver).signals
    assert after["gpu.0.energy_resets"] == 1.0 and after["gpu.1.energy_resets"] == 0.0


def test_energy_goes_on_from_the_counter_when_it_stops_answering(fake: FakeNvml, clock: Clock) -> None:
    """A counter that answered and then reports NOT_SUPPORTED: the integrated estimate continues
    from the counter's total (a drop to 0 J would read downstream as a counter reset)."""
    fake.gpus[0]["energy_j"] = 5.0e8  # type: ignore[attr-defined]  # a GPU's counter since boot
    driver = NvmlGpuDriver(NvmlSection(), clock=clock)
    counted = poll(driver).signals["gpu.0.energy_j"]
    assert counted == 5.0e8
    fake.unsupported.add("nvmlDeviceGetTotalEnergyConsumption")
    clock.now += 1.0
    switched = poll(driver)
    clock.now += 1.0
    integrated = poll(driver)
    assert switched.signals["gpu.0.energy_j"] == counted and "gpu.0.energy_j" in switched.estimated
    assert integrated.signals["gpu.0.energy_j"] == pytest.approx(counted + 650.0)  # 1 s at 650 W
