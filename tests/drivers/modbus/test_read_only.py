"""Proof that no write request ever leaves the Modbus driver.

1. Every request the driver sent, over every profile and every fault path, is recorded by the
   server: only read function codes (3, 4) appear.
2. The choke point refuses write function codes before sending anything.
3. The source: only ``readonly.py`` holds a pymodbus client, and no module names a write method.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from agent.config.model import CracConfig
from agent.sim.devices.modbus_server import CoolingUnitServer
from drivers.modbus_crac.driver import CracModbusDriver
from drivers.modbus_crac.profiles import available_profiles
from drivers.modbus_crac.readonly import ReadOnlyModbus, WriteRefused
from tests.conftest import REPO_ROOT, free_port
from tests.drivers.modbus.conftest import run

READ_CODES = {1, 2, 3, 4}
WRITE_CODES = [5, 6, 15, 16, 22, 23]  # write coil(s)/register(s), mask write, read/write multiple
DRIVER_DIR = REPO_ROOT / "drivers" / "modbus_crac"

FAULTS: list[dict[str, object]] = [
    {},
    {"busy_next": 3},
    {"omit": {"power_w", "setpoint_c", "fan_pct"}},
    {"exceptions": {"cooling_w": 4, "supply_temp_c": 4, "compressor_pct": 3}},
]


@pytest.mark.parametrize("fault", FAULTS, ids=["clean", "busy", "absent", "exceptions"])
def test_only_read_function_codes_reach_the_unit(fault: dict[str, object]) -> None:
    async def body() -> list[int]:
        codes: list[int] = []
        for profile in available_profiles():
            if profile == "generic":
                continue
            for framer in ("socket", "rtu"):
                port = free_port()
                async with CoolingUnitServer(profile, lambda: {}, port=port, framer=framer,
                                             **fault) as server:  # type: ignore[arg-type]
                    driver = CracModbusDriver(
                        CracConfig(id="u", host="127.0.0.1", port=port, profile=profile, framer=framer,
                                   timeout_s=1.0, retries=0, rated_fan_power_w=500.0),
                        reprobe_after_polls=1, busy_retry_s=0.01)
                    for _ in range(3):
                        await driver.poll()
                    await driver.close()
                codes += server.function_codes
        return codes

    codes = run(body, timeout_s=60)
    assert codes, "the server recorded no request at all"
    assert set(codes) <= READ_CODES, f"non-read function codes sent: {sorted(set(codes) - READ_CODES)}"


@pytest.mark.parametrize("function_code", WRITE_CODES)
def test_the_choke_point_refuses_writes_before_sending(function_code: int) -> None:
    async def body() -> CoolingUnitServer:
        port = free_port()
        async with CoolingUnitServer("liebert_crv", lambda: {"fan_pct": 50.0}, port=port) as server:
            modbus = ReadOnlyModbus("127.0.0.1", port, framer="socket", timeout_s=1.0, retries=0)
            assert await modbus.connect()
            with pytest.raises(WriteRefused, match=f"function code {function_code} is not a read"):
                await modbus.read(function_code, 450, 1, device_id=1)
            reply = await modbus.read(4, 450, 1, device_id=1)  # the same client still reads
            assert reply.values == [50]
            modbus.close()
        return server

    server = run(body)
    assert server.function_codes == [4]


def _modules() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text(encoding="utf-8"))) for path in sorted(DRIVER_DIR.glob("*.py"))]


def test_only_the_choke_point_imports_a_pymodbus_client() -> None:
    importers = set()
    for path, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pymodbus.client"):
                importers.add(path.name)
            if isinstance(node, ast.Import) and any(a.name.startswith("pymodbus.client") for a in node.names):
                importers.add(path.name)
    assert importers == {"readonly.py"}


def test_no_module_names_a_write_method() -> None:
    offenders = []
    for path, tree in _modules():
        for node in ast.walk(tree):
            name = getattr(node, "attr", None) or getattr(node, "id", None) or ""
            if not isinstance(name, str):
                continue
            holds_client = name in {"execute", "_client"} and path.name != "readonly.py"
            if name.startswith(("write_", "readwrite_", "mask_write")) or holds_client:
                offenders.append(f"{path.name}:{getattr(node, 'lineno', '?')} {name}")
    assert offenders == []
