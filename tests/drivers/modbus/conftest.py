"""Fixtures for the Modbus cooling-unit tests: a loopback pymodbus server per test, always stopped."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)


def run(coro_fn: Callable[[], Awaitable[T]], timeout_s: float = 30.0) -> T:
    """Run one async test body with a hard bound."""

    async def bounded() -> Any:
        return await asyncio.wait_for(coro_fn(), timeout_s)

    return asyncio.run(bounded())
