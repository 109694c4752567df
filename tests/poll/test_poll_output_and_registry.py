"""In-process parts of ``rackwatt poll`` (output shapes, exit rule, misbehaving drivers) and the registry."""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys

import pytest

from agent.config.model import AgentSection, Config, CracConfig, NvmlSection, PduConfig
from agent.live import poll_cmd
from drivers import registry
from drivers.base import PollResult
from tests.conftest import REPO_ROOT

CONFIG = Config(agent=AgentSection(site="dc1", rack="r07"))


def result(device: str, ok: bool, signals: dict[str, float], **kw: object) -> PollResult:
    return PollResult(device=device, ts=0.0, signals=signals, ok=ok, elapsed_ms=12.34, **kw)  # type: ignore[arg-type]


def test_json_shape_matches_the_issue() -> None:
    results = [
        result("pdu.a", True, {"pdu.a.power_w": 1210.0, "pdu.a.bad": math.nan}, profile="apc_rpdu2"),
        result("crac.1", True, {"crac.1.power_w": 900.0}, profile="liebert_crv",
               estimated=frozenset({"crac.1.power_w"})),
        result("pdu.b", False, {}, error="pdu 'b' (10.0.0.2:161): timeout after 2 tries"),
    ]
    report = poll_cmd.as_json(results)
    json.dumps(report, allow_nan=False)  # NaN never reaches the JSON
    assert report["signals"] == {"pdu.a.power_w": 1210.0, "crac.1.power_w": 900.0}
    assert report["devices"]["pdu.a"] == {"ok": True, "ms": 12.3, "profile": "apc_rpdu2", "error": None,
                                          "estimated": []}
    assert report["devices"]["crac.1"]["estimated"] == ["crac.1.power_w"]
    assert report["devices"]["pdu.b"]["ok"] is False and "timeout" in report["devices"]["pdu.b"]["error"]


def test_text_shows_units_status_and_errors() -> None:
    text = poll_cmd.as_text([
        result("pdu.a", True, {"pdu.a.power_w": 1210.0, "pdu.a.energy_kwh": 5321.7}),
        result("nvml", False, {"gpu.0.temp_c": 61.0}, error="nvml: gpu 1: GPU is lost"),
        result("pdu.b", False, {}, error="pdu 'b': timeout"),
    ], CONFIG)
    assert "1210 W" in text and "5321.7 kWh" in text and "61 °C" in text
    assert "PARTIAL" in text and "FAILED" in text
    assert "error: pdu 'b': timeout" in text
    assert text.splitlines()[-1] == "2 of 3 device(s) answered, 2 with errors"


def test_units_by_suffix() -> None:
    assert [poll_cmd.unit_of(s) for s in ("x.power_w", "x.energy_kwh", "x.energy_j", "x.sm_clock_mhz",
                                           "x.pf", "x.temp_c")] == ["W", "kWh", "J", "MHz", "", "°C"]


class Raising:
    device, interval_s = "crac.bad", 1.0

    async def poll(self) -> PollResult:
        raise RuntimeError("driver bug")

    async def close(self) -> None:
        raise RuntimeError("close bug")


class Hanging:
    device, interval_s = "pdu.hang", 1.0

    async def poll(self) -> PollResult:
        await asyncio.sleep(3600)
        raise AssertionError

    async def close(self) -> None:
        return None


def test_misbehaving_drivers_cost_only_themselves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(poll_cmd, "HARD_CAP_S", 0.2)
    fine = registry.UnavailableDriver("pdu.x", 1.0, "pdu.x: nope")
    results = asyncio.run(asyncio.wait_for(poll_cmd.poll_all([Raising(), Hanging(), fine]), 10))
    assert [r.device for r in results] == ["crac.bad", "pdu.hang", "pdu.x"]
    assert "RuntimeError: driver bug" in (results[0].error or "")
    assert "exceeded its deadline of 0.2 s" in (results[1].error or "")
    assert results[2].error == "pdu.x: nope"


def test_registry_builds_one_driver_per_device_in_order() -> None:
    config = Config(
        agent=AgentSection(site="s", rack="r"),
        cracs=(CracConfig(id="c1", host="127.0.0.1", profile="liebert_crv"),
               CracConfig(id="c2", host="127.0.0.1", profile="no_such_profile")),
        nvml=NvmlSection(enabled=True),
    )
    drivers = registry.build_drivers(config)
    assert [d.device for d in drivers] == ["crac.c1", "crac.c2", "nvml"]
    assert type(drivers[0]).__name__ == "CracModbusDriver"
    assert isinstance(drivers[1], registry.UnavailableDriver)
    bad = asyncio.run(drivers[1].poll())
    assert not bad.ok and "crac.c2: cannot set up" in (bad.error or "")
    assert "no_such_profile" in (bad.error or "")
    assert type(drivers[2]).__name__ == "NvmlGpuDriver"
    no_nvml = Config(agent=AgentSection(site="s", rack="r"), nvml=NvmlSection(enabled=False))
    assert registry.build_drivers(no_nvml) == []


def test_a_missing_driver_package_is_a_device_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(registry.DRIVERS, "pdu", ("drivers.not_built_here", "Nope"))
    config = Config(agent=AgentSection(site="s", rack="r"), pdus=(PduConfig(id="a", host="h"),),
                    nvml=NvmlSection(enabled=False))
    (driver,) = registry.build_drivers(config)
    polled = asyncio.run(driver.poll())
    assert not polled.ok and "pdu.a: pdu driver not available" in (polled.error or "")


def test_importing_the_registry_loads_no_protocol_library() -> None:
    code = ("import sys, drivers.registry; "
            "print(sorted(m for m in ('pysnmp', 'pymodbus', 'pynvml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=REPO_ROOT)
    assert out.stdout.strip() == "[]", out.stderr
