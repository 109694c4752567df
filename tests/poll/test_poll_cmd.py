"""``rackwatt poll --once`` end to end: a fresh interpreter, a Modbus unit on loopback, a dead PDU."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest

from agent.sim.devices.modbus_server import CoolingUnitServer
from tests.conftest import REPO_ROOT, free_port

pytestmark = pytest.mark.slow  # each test starts a Python process (and waits on an SNMP timeout)

logging.getLogger("pymodbus").setLevel(logging.CRITICAL)
CRV_VALUES = {"fan_pct": 64.0, "compressor_pct": 38.0, "remote_temp_c": 23.7}
# The cooling unit gets timeout_s = 3: pysnmp's first request blocks the shared event loop for up to
# ~1 s on a loaded 2-core machine (measured), which a 1 s Modbus timeout does not survive.


Unit = tuple[int, CoolingUnitServer]


class ThreadedUnit:
    """A CoolingUnitServer on its own event loop thread, so a subprocess can poll it."""

    def __init__(self, port: int) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server = CoolingUnitServer("liebert_crv", lambda: CRV_VALUES, port=port)

    def __enter__(self) -> CoolingUnitServer:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.server.start(), self.loop).result(timeout=10)
        return self.server

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture
def crac_port() -> Iterator[Unit]:
    port = free_port()
    with ThreadedUnit(port) as server:
        yield port, server


def write_config(tmp_path: Path, body: str) -> Path:
    community = tmp_path / "community"
    community.write_text("public\n")
    community.chmod(0o600)
    config = tmp_path / "agent.toml"
    config.write_text(
        '[agent]\nsite = "dc1"\nrack = "r07"\n\n'
        '[[pdu]]\nid = "a"\nhost = "127.0.0.1"\n'
        f'port = {free_port()}\n'  # nothing listens there (UDP): the PDU is unreachable
        f'version = "2c"\ncommunity_file = "{community}"\nprofile = "auto"\n'
        "timeout_s = 0.3\nretries = 0\n\n" + body
    )
    return config


def rackwatt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True, text=True, timeout=60,
                          cwd=REPO_ROOT)


def nvml_library_missing() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        return True
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return False


def test_json_with_a_live_unit_and_a_dead_pdu(tmp_path: Path, crac_port: Unit) -> None:
    port, server = crac_port
    config = write_config(tmp_path, f'[[crac]]\nid = "c1"\nhost = "127.0.0.1"\nport = {port}\n'
                                    'profile = "liebert_crv"\nrated_fan_power_w = 1000.0\ntimeout_s = 3.0\n\n'
                                    "[nvml]\nenabled = false\n")
    result = rackwatt("poll", "--config", str(config), "--once", "--json")
    assert result.returncode == 0, result.stderr  # one device answered
    report = json.loads(result.stdout)
    assert set(report) == {"signals", "devices"}
    assert report["signals"]["crac.c1.fan_pct"] == pytest.approx(64.0)
    assert report["signals"]["crac.c1.compressor_pct"] == pytest.approx(38.0)
    assert "crac.c1.power_w" in report["signals"]
    crac, pdu = report["devices"]["crac.c1"], report["devices"]["pdu.a"]
    assert crac["ok"] is True and crac["profile"] == "liebert_crv" and crac["error"] is None
    assert crac["estimated"] == ["crac.c1.power_w"] and crac["ms"] > 0
    assert pdu["ok"] is False and "pdu 'a' (127.0.0.1:" in pdu["error"]
    assert not any(name.startswith("pdu.a.") for name in report["signals"])
    assert set(server.function_codes) == {4}  # the command only read


def test_minimal_config_with_only_a_dead_pdu(tmp_path: Path) -> None:
    config = write_config(tmp_path, "")
    result = rackwatt("poll", "--config", str(config), "--once")
    assert result.returncode == 1  # every device failed
    lines = result.stdout.splitlines()
    pdu_line = next(i for i, line in enumerate(lines) if line.startswith("pdu.a"))
    assert "FAILED" in lines[pdu_line]
    assert "error: pdu 'a' (127.0.0.1:" in lines[pdu_line + 1]
    if nvml_library_missing():
        assert "nvml: NVML library not found (no NVIDIA driver?)" in result.stdout
    assert "Traceback" not in result.stderr


def test_text_output_lists_signals_with_units(tmp_path: Path, crac_port: Unit) -> None:
    port, _ = crac_port
    config = write_config(tmp_path, f'[[crac]]\nid = "c1"\nhost = "127.0.0.1"\nport = {port}\n'
                                    'profile = "liebert_crv"\nrated_fan_power_w = 1000.0\ntimeout_s = 3.0\n')
    result = rackwatt("poll", "--config", str(config), "--once")
    assert result.returncode == 0
    out = result.stdout
    assert "crac.c1.fan_pct" in out and "64 %" in out
    assert "crac.c1.power_w" in out and "(estimated)" in out
    assert "1 of 3 device(s) answered" in out or "2 of 3 device(s) answered" in out  # nvml: host-dependent
    assert "with errors" in out


def test_invalid_config_names_the_problem(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text('[agent]\nsite = "dc1"\n')
    result = rackwatt("poll", "--config", str(config), "--once")
    assert result.returncode == 2
    assert "rack" in result.stderr and "Traceback" not in result.stderr
