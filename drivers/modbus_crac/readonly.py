"""The one place the Modbus driver talks to a unit: read function codes only.

The agent must never change a cooling unit (DESIGN.md). ``ReadOnlyModbus`` owns the pymodbus client
and exposes only ``read``; any function code but 1-4 raises ``WriteRefused`` before a byte is sent.
No other module here holds the client (a test checks the source).
"""

from __future__ import annotations

from dataclasses import dataclass

from pymodbus.client import AsyncModbusTcpClient
from pymodbus.framer import FramerType

# function code → (client method, most items one request may ask for)
READ_FUNCTIONS: dict[int, tuple[str, int]] = {
    1: ("read_coils", 2000), 2: ("read_discrete_inputs", 2000),
    3: ("read_holding_registers", 125), 4: ("read_input_registers", 125),
}
FRAMERS = {"socket": FramerType.SOCKET, "rtu": FramerType.RTU}


class WriteRefused(PermissionError):
    """A request that is not a read reached the choke point; it was not sent."""


@dataclass(frozen=True)
class ReadReply:
    """Registers (or bits as 0/1) on success, else the unit's Modbus exception code."""

    values: list[int] | None
    exception_code: int | None = None


class ReadOnlyModbus:
    """A pymodbus TCP client (Modbus TCP, or RTU framing through a TCP gateway) that can only read."""

    def __init__(self, host: str, port: int, *, framer: str, timeout_s: float, retries: int) -> None:
        if framer not in FRAMERS:
            raise ValueError(f"framer must be one of {sorted(FRAMERS)}, got {framer!r}")
        # reconnect_delay=0: no background reconnect task; the driver reconnects at its next poll.
        self._client = AsyncModbusTcpClient(
            host, port=port, framer=FRAMERS[framer], timeout=timeout_s, retries=retries, reconnect_delay=0
        )

    @property
    def connected(self) -> bool:
        return bool(self._client.connected)

    async def connect(self) -> bool:
        return bool(await self._client.connect())

    def close(self) -> None:
        self._client.close()

    async def read(self, function_code: int, address: int, count: int, device_id: int) -> ReadReply:
        """Send one read request; raises ``WriteRefused`` for anything but FC 1-4, sends nothing then."""
        if function_code not in READ_FUNCTIONS:
            raise WriteRefused(f"function code {function_code} is not a read; refused (read-only driver)")
        method_name, most = READ_FUNCTIONS[function_code]
        if not 1 <= count <= most:
            raise ValueError(f"count must be 1..{most} for function code {function_code}, got {count}")
        method = getattr(self._client, method_name)
        response = await method(address, count=count, device_id=device_id)
        if response.isError():
            return ReadReply(None, getattr(response, "exception_code", None))
        if function_code in (1, 2):
            return ReadReply([int(bit) for bit in response.bits[:count]])
        return ReadReply(list(response.registers))
