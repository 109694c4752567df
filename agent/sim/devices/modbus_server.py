"""A demo / test cooling unit: a pymodbus server on loopback serving one profile's register image.

``values_fn()`` (``{"supply_temp_c": 18.5, …}``; absent or None: the point's sentinel) is encoded
per the profile when each request is answered; any other address answers exception 2, like a real
unit. ``requests`` records every request (how tests prove the driver only reads). Faults:
``busy_next`` (exception 6 for the next N requests), ``exceptions`` (signal → code), ``omit``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pymodbus.framer import FramerType
from pymodbus.pdu import ExceptionResponse, ModbusPDU
from pymodbus.server import ModbusTcpServer
from pymodbus.simulator import DataType, SimData, SimDevice

from agent.config.model import ModbusRegister
from drivers.modbus_crac.decode import encode_value
from drivers.modbus_crac.profiles import Point, Profile, load_profile, merged_points

ValuesFn = Callable[[], Mapping[str, float | None]]


@dataclass(frozen=True)
class Request:
    function_code: int
    address: int | None
    count: int | None


@dataclass
class CoolingUnitServer:
    """Serve ``profile`` on ``host:port`` until ``stop()``; use as ``async with``."""

    profile: str | Profile
    values_fn: ValuesFn
    port: int
    host: str = "127.0.0.1"
    device_id: int = 1
    framer: str = "socket"  # socket | rtu (an RTU-over-TCP gateway)
    registers: tuple[ModbusRegister, ...] = ()  # extra / overriding points, as in [[crac.registers]]
    omit: Iterable[str] = ()
    exceptions: dict[str, int] = field(default_factory=dict)
    busy_next: int = 0
    requests: list[Request] = field(default_factory=list)

    def __post_init__(self) -> None:
        profile = load_profile(self.profile) if isinstance(self.profile, str) else self.profile
        omitted = set(self.omit)
        self.points: tuple[Point, ...] = tuple(
            p for p in merged_points(profile, self.registers, "demo server") if p.signal not in omitted
        )
        self._pending: dict[int, ModbusPDU] = {}
        self._server: ModbusTcpServer | None = None

    @property
    def function_codes(self) -> list[int]:
        return [request.function_code for request in self.requests]

    async def start(self) -> CoolingUnitServer:
        self._server = ModbusTcpServer(
            self._device(),
            framer=FramerType.RTU if self.framer == "rtu" else FramerType.SOCKET,
            address=(self.host, self.port),
            trace_pdu=self._trace_pdu,
        )
        await self._server.serve_forever(background=True)
        return self

    async def stop(self) -> None:
        if self._server is not None:
            await self._server.shutdown()  # type: ignore[no-untyped-call,unused-ignore]  # pymodbus: untyped
            self._server = None

    async def __aenter__(self) -> CoolingUnitServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- register image ------------------------------------------------------------------------
    def _device(self) -> SimDevice:
        """A datastore holding exactly the profile's registers (zeros; real values are set per reply)."""
        def table(name: str) -> list[SimData]:
            found = [SimData(p.address, values=[0] * p.width, datatype=DataType.REGISTERS)
                     for p in self.points if p.table == name]
            # a datastore table may not be empty: park one register at the top of the address space
            return found or [SimData(65535, values=[0], datatype=DataType.REGISTERS)]

        bits = [SimData(0, count=1, values=False, datatype=DataType.BITS)]
        return SimDevice(id=self.device_id, simdata=(bits, bits, table("holding"), table("input")))

    def image(self, function_code: int, address: int, count: int) -> list[int]:
        """The registers ``address .. address+count-1`` of the table read by ``function_code``, now."""
        table = "holding" if function_code == 3 else "input"
        values = self.values_fn()
        words = [0] * count
        for point in self.points:
            if point.table != table or not address <= point.address <= address + count - point.width:
                continue
            value = values.get(point.signal)
            try:
                encoded = encode_value(point, value)
            except (ValueError, OverflowError):
                encoded = encode_value(point, None)
            offset = point.address - address
            words[offset : offset + point.width] = encoded
        return words

    # -- request hook --------------------------------------------------------------------------
    def _trace_pdu(self, sending: bool, pdu: ModbusPDU) -> ModbusPDU:
        if not sending:
            self.requests.append(
                Request(pdu.function_code, getattr(pdu, "address", None), getattr(pdu, "count", None))
            )
            self._pending[pdu.transaction_id] = pdu
            return pdu
        request = self._pending.pop(pdu.transaction_id, None)
        if request is None or pdu.isError():
            return pdu
        code = self._injected_exception(request)
        if code is not None:
            reply = ExceptionResponse(request.function_code, exception_code=code)
            reply.transaction_id, reply.dev_id = pdu.transaction_id, pdu.dev_id
            return reply
        if request.function_code in (3, 4):
            pdu.registers = self.image(request.function_code, request.address, request.count)
        return pdu

    def _injected_exception(self, request: Any) -> int | None:
        if self.busy_next > 0:
            self.busy_next -= 1
            return 6
        table = {3: "holding", 4: "input"}.get(request.function_code)
        start, end = request.address, request.address + request.count
        for point in self.points:
            touched = start < point.address + point.width and point.address < end
            if point.signal in self.exceptions and point.table == table and touched:
                return self.exceptions[point.signal]
        return None


# -- standalone demo unit: python -m agent.sim.devices.modbus_server --profile liebert_crv --port 15020 --
DEMO_VALUES = {  # plausible mid-load values by signal suffix; each swings ±5 % over a minute
    "power_w": 6200.0, "cooling_w": 21000.0, "cooling_demand_w": 22000.0, "supply_temp_c": 18.5,
    "return_temp_c": 29.0, "setpoint_c": 22.0, "supply_setpoint_c": 18.0, "rack_inlet_temp_c": 21.5,
    "remote_temp_c": 23.0, "fan_pct": 62.0, "compressor_pct": 45.0, "compressor2_pct": 0.0,
    "cooling_pct": 55.0, "return_rh_pct": 42.0,
}


def demo_values(now_s: float) -> dict[str, float]:
    import math

    swing = 1.0 + 0.05 * math.sin(2 * math.pi * now_s / 60.0)
    return {name: value * swing for name, value in DEMO_VALUES.items()}


def main(argv: list[str] | None = None) -> int:
    import argparse
    import time

    parser = argparse.ArgumentParser(description="Serve a demo cooling unit on loopback until Ctrl-C.")
    parser.add_argument("--profile", default="liebert_crv")
    parser.add_argument("--port", type=int, default=15020)
    parser.add_argument("--framer", choices=("socket", "rtu"), default="socket")
    args = parser.parse_args(argv)

    async def serve() -> None:
        server = CoolingUnitServer(args.profile, lambda: demo_values(time.time()), port=args.port,
                                   framer=args.framer)
        async with server:
            print(f"{args.profile} on 127.0.0.1:{args.port} ({args.framer}); Ctrl-C stops", flush=True)
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
