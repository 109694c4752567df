"""Peers for the client tests: a fake ``pynvml`` at the library boundary, and the agent's real
hint listener answering queries on a thread of its own."""

from __future__ import annotations

import asyncio
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path


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


class ListenerThread:
    """The agent's real hint listener and intake, answering queries from ``engine``, on its own
    event loop in a thread (the client under test blocks on its reply)."""

    def __init__(self, socket_path: Path, engine: object, clock: Callable[[], float] = time.time) -> None:
        from agent.stages.energy_query import engine_answerer
        from agent.stages.intake import HintIntake
        from agent.stages.listener import HintListener
        from agent.stages.timeline import StageTimeline

        self.timeline = StageTimeline(ttl_s=600)
        self.intake = HintIntake(self.timeline, on_query=engine_answerer(lambda: engine, clock))
        self.listener = HintListener(self.intake, socket_path, None)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def __enter__(self) -> ListenerThread:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self.listener.start(), self._loop).result(5)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.listener.stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()
