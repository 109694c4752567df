"""The twin as real devices on loopback: two SNMP PDUs, a Modbus cooling unit, faked NVML.

``DemoRack`` serves the twin's values at the demo clock's time; they change once per simulated
second, so one snapshot per second is shared by every request (the SNMP and Modbus servers run on
the event loop, NVML calls come from the driver's worker thread: hence the lock). Inlet probes
have no wire protocol in rackwatt's drivers, so ``InletProbeDriver`` reads them in process.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack, suppress
from dataclasses import dataclass

from agent.config.model import ModbusRegister
from agent.sim import RackTwin, Scenario
from agent.sim.devices.fake_nvml import FakeNvml
from agent.sim.devices.modbus_server import CoolingUnitServer
from agent.sim.devices.snmp_agent import SimSnmpPdu
from drivers.base import PollResult

# The cooling unit is a Liebert iCOM unit (electrical power, cooling output, setpoint registers);
# its profile lacks the air temperatures and fan speed, which a site adds with
# [[crac.registers]] exactly like drivers/modbus_crac/sample.toml. Same registers on the server
# and in the config.
CRAC_PROFILE = "liebert_icom"
CRAC_EXTRA_REGISTERS: tuple[ModbusRegister, ...] = (
    ModbusRegister(address=2000, signal="supply_temp_c", table="input", type="s16", scale=0.1, unit="degC"),
    ModbusRegister(address=2001, signal="return_temp_c", table="input", type="s16", scale=0.1, unit="degC"),
    ModbusRegister(address=2002, signal="fan_pct", table="input", type="u16", scale=0.1, unit="%"),
)
PDU_VENDORS = {"a": "apc_rpdu2", "b": "raritan_pdu2"}  # feed → vendor profile served
PDU_OUTLETS = 24


@dataclass
class DevicePorts:
    pdu: dict[str, int]
    crac: int


class DemoRack:
    """The twin at the demo clock's time, as device values; start/stop the loopback devices."""

    def __init__(self, scenario: Scenario, clock: Callable[[], float]) -> None:
        self.scenario = scenario
        self.twin = RackTwin(scenario)
        self.clock = clock
        self._lock = threading.Lock()
        self._second = -1
        self._values: dict[str, dict[str, float]] = {}
        self._stage: tuple[str, str] = ("idle", "")
        self.ended = False  # the clock ran past the end of the scenario
        self.fake_nvml = FakeNvml(self.gpu_values, clock=clock)
        self.pdus: dict[str, SimSnmpPdu] = {}
        self.crac: CoolingUnitServer | None = None
        self._stack = ExitStack()

    @property
    def crac_id(self) -> str:
        return self.scenario.rack.cooling.crac_id

    # ---- values ----------------------------------------------------------------------------
    def snapshot(self) -> dict[str, dict[str, float]]:
        """Device → values at the clock's current simulated second (computed once per second)."""
        ts = self.clock()
        second = math.floor(ts)
        with self._lock:
            if second > self._second and not self.ended:
                try:
                    self.twin.advance_to(ts)
                except ValueError:  # past the scenario's end: hold the last values
                    self.ended = True
                else:
                    self._values = self.twin.device_values()
                    self._stage = self.twin.stage()
                    self._second = second
            return self._values

    def stage(self) -> tuple[str, str, float]:
        """(stage, job, work_rate) the training job is in now, as it would hint it."""
        values = self.snapshot()
        with self._lock:
            stage, job = self._stage
        return stage, job, values.get("job", {}).get("work_rate", math.nan)

    def gpu_values(self) -> dict[int, dict[str, float]]:
        values = self.snapshot()
        return {int(name.split(".")[1]): v for name, v in values.items() if name.startswith("gpu.")}

    def pdu_values(self, feed: str) -> Callable[[], dict[str, float]]:
        return lambda: self.snapshot().get(f"pdu.{feed}", {})

    def crac_values(self) -> dict[str, float]:
        return self.snapshot().get(f"crac.{self.crac_id}", {})

    def inlet_values(self) -> dict[str, float]:
        return self.snapshot().get("inlet", {})

    # ---- devices ---------------------------------------------------------------------------
    async def start(self, ports: DevicePorts, community: str) -> None:
        """Serve the PDUs (SNMP v2c) and the cooling unit (Modbus TCP) on 127.0.0.1; fake NVML."""
        try:
            for feed, port in ports.pdu.items():
                pdu = SimSnmpPdu(self.pdu_values(feed), port, vendor=PDU_VENDORS[feed], community=community,
                                 outlets=PDU_OUTLETS)
                await pdu.start()
                self.pdus[feed] = pdu
            self.crac = CoolingUnitServer(CRAC_PROFILE, self.crac_values, port=ports.crac,
                                          registers=CRAC_EXTRA_REGISTERS)
            await self.crac.start()
            self._stack.enter_context(self.fake_nvml.installed())
        except BaseException:
            await self.stop()
            raise

    async def stop(self) -> None:
        """Stop every device that was started (each independently)."""
        self._stack.close()
        for pdu in self.pdus.values():
            with suppress(Exception):  # stopping must go on with the others
                await pdu.stop()
        self.pdus.clear()
        if self.crac is not None:
            with suppress(Exception):
                await self.crac.stop()
            self.crac = None

    def trim_request_logs(self) -> None:
        """The fakes keep a log of requests for tests; keep it short in a long demo."""
        if self.crac is not None and len(self.crac.requests) > 1000:
            del self.crac.requests[:-100]


@dataclass
class InletProbeDriver:
    """Rack inlet probes (top, mid, bottom), read from the twin in process (no wire protocol)."""

    rack: DemoRack
    interval_s: float = 10.0
    device: str = "inlet"
    profile: str = "twin probes (in process)"

    async def poll(self) -> PollResult:
        started = time.monotonic()
        ts = self.rack.clock()
        values = self.rack.inlet_values()
        signals = {f"inlet.{name}": float(v) for name, v in values.items() if math.isfinite(v)}
        ok = bool(signals)
        elapsed_ms = (time.monotonic() - started) * 1000
        return PollResult(self.device, ts, signals, ok, elapsed_ms, profile=self.profile,
                          error=None if ok else "inlet: no probe values yet")

    async def close(self) -> None:
        return None
