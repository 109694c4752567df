"""A hung cooling unit for the Modbus driver's timeout tests."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass


@dataclass
class SilentTcpServer:
    """Accepts TCP connections on loopback, reads what is sent, never answers: a hung unit."""

    port: int
    host: str = "127.0.0.1"
    received_bytes: int = 0

    async def start(self) -> SilentTcpServer:
        self._server = await asyncio.start_server(self._swallow, self.host, self.port)
        self._writers: set[asyncio.StreamWriter] = set()
        return self

    async def _swallow(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        with contextlib.suppress(ConnectionError, asyncio.CancelledError):
            while data := await reader.read(1024):
                self.received_bytes += len(data)
        self._writers.discard(writer)
        writer.close()

    async def stop(self) -> None:
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    async def __aenter__(self) -> SilentTcpServer:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
