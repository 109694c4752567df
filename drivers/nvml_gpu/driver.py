"""``NvmlGpuDriver``: the host's GPUs through NVML, as one device ``nvml`` with ``gpu.<i>.*`` signals.

Capabilities are probed once per GPU and cached: POWER_INSTANT else GetPowerUsage; the energy
counter made reset-safe, else integrated power flagged estimated (README.md says what each error
does). All NVML calls run in a daemon worker thread with a deadline: a GPU in a bad state can stall
NVML for seconds or forever, and must never block the event loop or the process's exit.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from drivers.base import PollResult
from drivers.counters import EnergyTotal, PowerIntegral
from drivers.nvml_gpu import nvml_calls as nvml
from drivers.nvml_gpu.config import NvmlSection
from drivers.nvml_gpu.nvml_calls import NvmlFailure

log = logging.getLogger(__name__)

INIT_MESSAGES = {
    nvml.LIBRARY_NOT_FOUND: "NVML library not found (no NVIDIA driver?)",
    nvml.DRIVER_NOT_LOADED: "NVIDIA driver not loaded (NVML error 9)",
    nvml.NO_PERMISSION: "no permission to use NVML (NVML error 4)",
}
UNSUPPORTED = frozenset({nvml.NOT_SUPPORTED, nvml.FUNCTION_NOT_FOUND})
T = TypeVar("T")


def in_daemon_thread(fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """Run a blocking call in a daemon thread: unlike ``asyncio.to_thread``, a call that never
    returns cannot hold up ``asyncio.run``'s executor shutdown or the interpreter's exit."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if future.done():  # the caller gave up (deadline) meanwhile
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)  # type: ignore[arg-type]

    def target() -> None:
        try:
            result, error = fn(*args), None
        except BaseException as exc:
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # a closed loop: nobody is waiting any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=target, name="rackwatt-nvml", daemon=True).start()
    return future


class GpuLost(Exception):
    """The GPU fell off the bus (NVML error 15): it needs a reset or a reboot."""


@dataclass
class GpuState:
    """What this driver learned and keeps about one GPU between polls."""

    index: int
    integral: PowerIntegral  # where there is no energy counter (monotonic s)
    handle: Any = None
    counter: EnergyTotal = field(default_factory=EnergyTotal)
    energy_from_counter: bool | None = None  # None: not probed yet
    power_instant: bool | None = None
    unsupported: set[str] = field(default_factory=set)


class NvmlGpuDriver:
    """All (or the configured) GPUs of this host; ``poll`` never raises."""

    def __init__(self, cfg: NvmlSection, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.cfg = cfg
        self.device = "nvml"
        self.interval_s = cfg.interval_s
        self.max_gap_s = max(3 * cfg.interval_s, 5.0)  # longest gap power is integrated across
        self._clock = clock
        self._initialised = False
        self._gpus: dict[int, GpuState] = {}
        self._lock = threading.Lock()  # NVML calls of one driver never overlap

    @property
    def deadline_s(self) -> float:
        """Whole-poll bound; healthy NVML answers in well under 10 ms per GPU."""
        return max(2.0, 0.8 * self.interval_s)

    async def poll(self) -> PollResult:
        ts = time.time()
        started = time.perf_counter()
        signals: dict[str, float] = {}
        estimated: set[str] = set()
        try:
            if self._lock.locked():
                ok, problems = False, ["the previous NVML call has not returned (driver hung?)"]
            else:
                work = in_daemon_thread(self._poll_blocking, signals, estimated)
                ok, problems = await asyncio.wait_for(work, self.deadline_s)
        except TimeoutError:
            signals, estimated = {}, set()  # the stalled thread may still write into the old ones
            ok, problems = False, [f"no answer from NVML within {self.deadline_s:g} s (driver hung?)"]
        except Exception as exc:  # never raise: the other devices' polls go on
            log.exception("nvml: unexpected error")
            ok, problems = False, [f"unexpected {type(exc).__name__}: {exc}"]
        return PollResult(
            device=self.device,
            ts=ts,
            signals=signals,
            ok=ok,
            elapsed_ms=(time.perf_counter() - started) * 1000.0,
            profile="nvml",
            error="nvml: " + "; ".join(problems) if problems else None,
            estimated=frozenset(estimated),
        )

    async def close(self) -> None:
        if self._lock.locked():  # a hung call holds NVML: leave it to the process exit
            return
        try:
            await asyncio.wait_for(in_daemon_thread(self._shutdown), self.deadline_s)
        except TimeoutError:
            log.warning("nvml: shutdown did not return within %g s", self.deadline_s)

    def _shutdown(self) -> None:
        with self._lock:
            if self._initialised:
                try:
                    nvml.shutdown()
                except NvmlFailure as exc:
                    log.debug("nvml: shutdown: %s", exc)
                self._initialised = False

    # -- blocking part (worker thread) ---------------------------------------------------------
    def _poll_blocking(self, signals: dict[str, float], estimated: set[str]) -> tuple[bool, list[str]]:
        with self._lock:
            if not self._initialised:
                try:
                    nvml.init()
                except NvmlFailure as exc:
                    return False, [INIT_MESSAGES.get(exc.code, f"cannot initialise NVML: {exc}")]
                self._initialised = True
            try:
                count = nvml.device_count()
            except NvmlFailure as exc:
                return False, [f"cannot count GPUs: {exc}"]
            indices = list(range(count)) if self.cfg.gpus is None else list(self.cfg.gpus)
            ok, problems = True, []
            for index in indices:
                if not 0 <= index < count:
                    ok = False
                    problems.append(f"gpu {index}: not present (this host has {count} GPUs)")
                    continue
                state = self._gpus.setdefault(index, GpuState(index, PowerIntegral(self.max_gap_s)))
                try:
                    values, soft_problems, guessed = self._read_gpu(state)
                except GpuLost as exc:
                    state.handle = None
                    state.integral.restart()
                    ok = False
                    problems.append(f"gpu {index}: {exc}")
                    continue
                prefix = f"gpu.{index}."
                signals.update({prefix + name: value for name, value in values.items()})
                estimated.update(prefix + name for name in guessed)
                problems.extend(f"gpu {index} {text}" for text in soft_problems)
            return ok, problems

    def _read_gpu(self, state: GpuState) -> tuple[dict[str, float], list[str], set[str]]:
        """This GPU's values now; raises ``GpuLost``. Returns (values, problems, estimated names)."""
        if state.handle is None:
            state.handle = self._checked(lambda: nvml.handle(state.index))
        gpu = state.handle
        values: dict[str, float] = {}
        problems: list[str] = []
        estimated: set[str] = set()

        def optional(name: str, read: Callable[[], Any]) -> Any:
            if name in state.unsupported:
                return None
            try:
                return self._checked(read)
            except NvmlFailure as exc:
                if exc.code in UNSUPPORTED:
                    log.info("nvml: gpu %d: %s not supported; signal absent", state.index, name)
                    state.unsupported.add(name)
                else:
                    problems.append(f"{name}: {exc}")
                return None

        now = self._clock()
        power_w = self._power_w(state, optional)
        if power_w is not None:
            values["power_w"] = power_w
        energy_j, energy_estimated = self._energy_j(state, optional, now, power_w)
        if energy_j is not None:
            values["energy_j"] = energy_j
            if energy_estimated:
                estimated.add("energy_j")
            else:  # energy_j is reset-safe, so the reset itself is reported (a driver reload: drift)
                values["energy_resets"] = float(state.counter.delta.resets)
        rates = optional("util_pct", lambda: nvml.utilization_pct(gpu))
        if rates is not None:
            values["util_pct"], values["mem_util_pct"] = rates
        for name, read in (
            ("temp_c", nvml.temperature_c),
            ("sm_clock_mhz", nvml.sm_clock_mhz),
            ("power_limit_w", nvml.power_limit_w),
        ):
            value = optional(name, functools.partial(read, gpu))
            if value is not None:
                values[name] = value
        return values, problems, estimated

    def _power_w(self, state: GpuState, optional: Callable[[str, Callable[[], Any]], Any]) -> float | None:
        gpu = state.handle
        if state.power_instant is not False:
            try:
                power_w = float(self._checked(lambda: nvml.power_instant_w(gpu)))
                state.power_instant = True
                return power_w
            except NvmlFailure as exc:
                log.info("nvml: gpu %d: POWER_INSTANT unavailable (%s); using GetPowerUsage",
                         state.index, exc)
                state.power_instant = False
        power = optional("power_w", lambda: nvml.power_usage_w(gpu))
        return None if power is None else float(power)

    def _energy_j(
        self,
        state: GpuState,
        optional: Callable[[str, Callable[[], Any]], Any],
        now: float,
        power_w: float | None,
    ) -> tuple[float | None, bool]:
        """(reset-safe energy in J, estimated?) from the counter, else from integrated power."""
        if state.energy_from_counter is not False:
            gpu = state.handle
            raw_j = optional("energy_j", lambda: nvml.total_energy_j(gpu))
            if raw_j is not None:
                state.energy_from_counter = True
                energy_j, reset = state.counter.update(float(raw_j))
                if reset:
                    log.warning("nvml: gpu %d: energy counter went back (driver reload?); continuing",
                                state.index)
                return energy_j, False
            if "energy_j" not in state.unsupported:
                return None, False  # a transient error: try the counter again next poll
            state.energy_from_counter = False
            state.integral.total_j = state.counter.total  # go on from the counter's total, never back to 0
            log.info("nvml: gpu %d: no energy counter; integrating power (estimated)", state.index)
        if power_w is None:
            state.integral.restart()  # no power now: no estimate this poll, restart integration next
            return None, False
        return state.integral.add(now, power_w), True

    @staticmethod
    def _checked(read: Callable[[], Any]) -> Any:
        """Run one NVML read; a lost GPU becomes ``GpuLost`` whatever the call was."""
        try:
            return read()
        except NvmlFailure as exc:
            if exc.code == nvml.GPU_IS_LOST:
                raise GpuLost(
                    f"GPU is lost (NVML error 15 in {exc.call}): needs a GPU reset or reboot"
                ) from exc
            raise
