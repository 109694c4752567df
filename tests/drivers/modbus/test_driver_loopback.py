"""CracModbusDriver against a real pymodbus server on loopback serving each profile's register image."""

from __future__ import annotations

import asyncio
import time

import pytest

from agent.config.model import CracConfig, ModbusRegister
from agent.sim.devices.modbus_server import CoolingUnitServer
from drivers.modbus_crac.driver import CracModbusDriver
from drivers.modbus_crac.profiles import load_profile
from tests.conftest import free_port
from tests.drivers.modbus.conftest import run
from tests.drivers.modbus.silent_server import SilentTcpServer

# values a unit of each profile serves; tolerance is each point's resolution
VALUES = {
    "apc_inrow_sc": {"setpoint_c": 22.0, "supply_setpoint_c": 18.0, "cooling_w": 10800.0,
                     "cooling_demand_w": 11200.0, "rack_inlet_temp_c": 21.5, "supply_temp_c": 19.4,
                     "return_temp_c": 28.0},
    "liebert_icom": {"setpoint_c": 21.5, "return_rh_pct": 45.3, "cooling_pct": 62.0, "compressor_pct": 55.0,
                     "compressor2_pct": 0.0, "cooling_w": 35500.0, "power_w": 9120.0, "outdoor_temp_c": -3.5,
                     "water_in_temp_c": 12.5, "water_out_temp_c": 17.0, "water_flow_lpm": 912.3},
    "liebert_crv": {"fan_pct": 64.0, "compressor_pct": 38.0, "remote_temp_c": 23.7, "water_in_temp_c": 14.2},
    "stulz_c7000": {"setpoint_c": 24.0, "return_temp_c": 26.5, "supply_temp_c": 20.0, "return_rh_pct": 41.2,
                    "fan_pct": 70.0, "compressor_pct": 46.5},
}


def cfg(port: int, profile: str, **kw: object) -> CracConfig:
    settings: dict[str, object] = {"timeout_s": 1.0, "retries": 0, **kw}
    return CracConfig(id="u1", host="127.0.0.1", port=port, profile=profile, **settings)  # type: ignore[arg-type]


def resolution(profile: str, signal: str) -> float:
    point = next(p for p in load_profile(profile).points if p.signal == signal)
    step = abs(point.scale) * (5 / 9 if point.unit == "degF" else 1000 if point.unit == "kW" else 1)
    return step / 2 + 1e-9


@pytest.mark.parametrize("profile", sorted(VALUES))
def test_each_profile_decodes_its_register_image(profile: str) -> None:
    values = VALUES[profile]

    async def body() -> None:
        port = free_port()
        async with CoolingUnitServer(profile, lambda: values, port=port) as server:
            driver = CracModbusDriver(cfg(port, profile, rated_fan_power_w=600.0))
            result = await driver.poll()
            await driver.close()
        assert result.ok, result.error
        assert result.profile == profile
        for signal, expected in values.items():
            got = result.signals[f"crac.u1.{signal}"]
            assert got == pytest.approx(expected, abs=resolution(profile, signal)), signal
        assert len(server.requests) == len(driver.batches)  # one request per batch, nothing else
        unconfirmed = {f"crac.u1.{p.signal}" for p in load_profile(profile).points if not p.verified}
        assert result.unverified == unconfirmed  # every value read at such an address says so
        if profile.startswith("liebert"):
            assert unconfirmed == {f"crac.u1.{signal}" for signal in values}  # no live unit confirmed any

    run(body)


def test_values_follow_the_callback_live() -> None:
    values = dict(VALUES["stulz_c7000"])

    async def body() -> None:
        port = free_port()
        async with CoolingUnitServer("stulz_c7000", lambda: values, port=port):
            driver = CracModbusDriver(cfg(port, "stulz_c7000"))
            first = await driver.poll()
            values["supply_temp_c"] = 17.3
            second = await driver.poll()
            await driver.close()
        assert first.signals["crac.u1.supply_temp_c"] == pytest.approx(20.0)
        assert second.signals["crac.u1.supply_temp_c"] == pytest.approx(17.3)

    run(body)


@pytest.mark.parametrize("word_order", ["big", "little"])
@pytest.mark.parametrize("type_", ["u32", "s32", "f32"])
def test_generic_map_word_orders(word_order: str, type_: str) -> None:
    registers = (
        ModbusRegister(address=0, signal="power_w", type=type_, word_order=word_order, scale=0.1, unit="kW"),
        ModbusRegister(address=2, signal="supply_temp_c", table="input", type="s16", scale=0.1),
        ModbusRegister(address=3, signal="return_temp_c", table="input", type="s16", scale=0.1),
    )
    values = {"power_w": 4321.0, "supply_temp_c": -1.5, "return_temp_c": 30.1}

    async def body() -> None:
        port = free_port()
        async with CoolingUnitServer("generic", lambda: values, port=port, registers=registers) as server:
            driver = CracModbusDriver(cfg(port, "generic", registers=registers))
            result = await driver.poll()
            await driver.close()
        assert result.ok, result.error
        assert result.signals["crac.u1.power_w"] == pytest.approx(4321.0, abs=50)
        assert result.signals["crac.u1.supply_temp_c"] == pytest.approx(-1.5)
        assert not result.estimated
        # the two input registers came in one request
        requests = sorted((r.function_code, r.address, r.count) for r in server.requests)
        assert requests == [(3, 0, 2), (4, 2, 2)]

    run(body)


def test_word_order_mismatch_is_visible() -> None:
    """A site that configures the wrong word order gets a wrong value: decoding really depends on it."""
    served = (ModbusRegister(address=0, signal="cooling_w", type="u32", word_order="big"),)
    read = (ModbusRegister(address=0, signal="cooling_w", type="u32", word_order="little"),)

    async def body() -> None:
        port = free_port()
        async with CoolingUnitServer("generic", lambda: {"cooling_w": 70000.0}, port=port, registers=served):
            driver = CracModbusDriver(cfg(port, "generic", registers=read))
            result = await driver.poll()
            await driver.close()
        assert result.signals["crac.u1.cooling_w"] != pytest.approx(70000.0)

    run(body)


COMPRESSOR2 = (4, 30669 - 30001, 1)  # liebert_icom compressor2_pct: FC 4, one register


def test_missing_register_costs_only_its_signal_and_is_reprobed_on_a_doubling_backoff() -> None:
    values = VALUES["liebert_icom"]

    async def body() -> tuple[list[bool], list[int]]:
        port = free_port()
        omit = {"compressor2_pct"}
        asked: list[bool] = []
        counts: list[int] = []
        async with CoolingUnitServer("liebert_icom", lambda: values, port=port, omit=omit) as server:
            driver = CracModbusDriver(cfg(port, "liebert_icom"), reprobe_after_polls=4)
            for _ in range(16):
                before = len(server.requests)
                result = await driver.poll()
                assert result.ok and "crac.u1.compressor2_pct" not in result.signals
                assert result.signals["crac.u1.compressor_pct"] == pytest.approx(55.0)
                new = server.requests[before:]
                asked.append(COMPRESSOR2 in [(r.function_code, r.address, r.count) for r in new])
                counts.append(len(new))
            await driver.close()
        return asked, counts

    asked, counts = run(body)
    # asked at poll 0 (found absent), then after waits of 1, 2, 4, 4, 4 polls (capped at 4)
    assert [i for i, a in enumerate(asked) if a] == [0, 1, 3, 7, 11, 15]
    # poll 0: the batch, then one request per point; a poll that skips the point costs one less
    assert counts[0] == counts[1] + 1 and counts[2] == counts[1] - 1


def test_cooling_unit_data_returns_within_one_poll_after_a_burst_of_illegal_address() -> None:
    """Issue 18 #6: a unit that answered exception 2 to everything for a while, then normally."""
    values = VALUES["liebert_icom"]

    async def body() -> list[int]:
        port = free_port()
        exceptions: dict[str, int] = {}
        seen: list[int] = []
        async with CoolingUnitServer("liebert_icom", lambda: values, port=port, exceptions=exceptions):
            driver = CracModbusDriver(cfg(port, "liebert_icom"), reprobe_after_polls=30)
            planned = len(driver.batches)
            assert len((await driver.poll()).signals) == len(values)
            exceptions.update(dict.fromkeys(values, 2))  # the burst: every register "illegal address"
            for _ in range(5):
                result = await driver.poll()
                assert not result.ok and not result.signals
                assert "every request refused with exception 2" in (result.error or "")
                assert "127.0.0.1:" in (result.error or "")
            exceptions.clear()  # the unit answers normally again
            for _ in range(3):
                seen.append(len((await driver.poll()).signals))
            assert len(driver.batches) == planned and not driver.absent  # nothing re-planned
            await driver.close()
        return seen

    assert run(body) == [len(values)] * 3


def test_a_point_absent_for_a_while_is_back_within_about_as_long() -> None:
    """While other points answer, a refused point backs off; once it answers it is read every poll."""
    values = VALUES["liebert_icom"]

    async def body() -> list[bool]:
        port = free_port()
        exceptions = {"power_w": 2}
        got: list[bool] = []
        async with CoolingUnitServer("liebert_icom", lambda: values, port=port, exceptions=exceptions):
            driver = CracModbusDriver(cfg(port, "liebert_icom"), reprobe_after_polls=30)
            for _ in range(4):  # absent for 4 polls: probes at 0, 1, 3 → next at 7
                await driver.poll()
            exceptions.clear()
            for _ in range(8):
                result = await driver.poll()
                got.append("crac.u1.power_w" in result.signals and not result.estimated)
            await driver.close()
        return got

    got = run(body)
    first = got.index(True)
    assert first <= 4  # gone 4 polls, back within 4 polls
    assert all(got[first:])  # and then every poll


def test_absent_power_register_falls_back_to_an_estimate() -> None:
    values = {k: v for k, v in VALUES["liebert_icom"].items() if k != "power_w"}

    async def body() -> None:
        port = free_port()
        async with CoolingUnitServer("liebert_icom", lambda: values, port=port, omit={"power_w"}):
            config = cfg(port, "liebert_icom", rated_compressor_power_w=10000.0)
            driver = CracModbusDriver(config)
            result = await driver.poll()
            await driver.close()
        assert result.ok
        assert result.signals["crac.u1.power_w"] == pytest.approx(5500.0)  # 55 % of 10 kW
        assert result.estimated == frozenset({"crac.u1.power_w"})

    run(body)


def test_measured_power_is_not_flagged_estimated() -> None:
    async def body() -> None:
        port = free_port()
        async with CoolingUnitServer("liebert_icom", lambda: VALUES["liebert_icom"], port=port):
            driver = CracModbusDriver(cfg(port, "liebert_icom", rated_compressor_power_w=10000.0))
            result = await driver.poll()
            await driver.close()
        assert result.signals["crac.u1.power_w"] == pytest.approx(9120.0)
        assert not result.estimated

    run(body)


def test_sentinel_values_are_missing_not_zero() -> None:
    values = dict(VALUES["stulz_c7000"], supply_temp_c=None)

    async def body() -> None:
        port = free_port()
        async with CoolingUnitServer("stulz_c7000", lambda: values, port=port):
            driver = CracModbusDriver(cfg(port, "stulz_c7000"))
            result = await driver.poll()
            await driver.close()
        assert result.ok
        assert "crac.u1.supply_temp_c" not in result.signals
        assert result.signals["crac.u1.return_temp_c"] == pytest.approx(26.5)

    run(body)


def test_busy_unit_is_retried_once_then_reported() -> None:
    async def body() -> None:
        port = free_port()
        async with CoolingUnitServer("liebert_crv", lambda: VALUES["liebert_crv"], port=port) as server:
            driver = CracModbusDriver(cfg(port, "liebert_crv"), busy_retry_s=0.01)
            server.busy_next = 1
            retried = await driver.poll()
            server.busy_next = 100
            busy = await driver.poll()
            server.busy_next = 0
            recovered = await driver.poll()
            await driver.close()
        assert retried.ok and retried.error is None and len(retried.signals) == len(VALUES["liebert_crv"])
        assert busy.signals == {}
        assert "exception 6 (device busy)" in (busy.error or "")
        assert recovered.ok and len(recovered.signals) == len(VALUES["liebert_crv"])

    run(body)


def test_other_exceptions_cost_only_that_batch() -> None:
    values = VALUES["liebert_icom"]

    async def body() -> None:
        port = free_port()
        async with CoolingUnitServer("liebert_icom", lambda: values, port=port, exceptions={"cooling_w": 4}):
            driver = CracModbusDriver(cfg(port, "liebert_icom"))
            result = await driver.poll()
            await driver.close()
        assert result.ok
        assert "crac.u1.cooling_w" not in result.signals
        assert result.signals["crac.u1.setpoint_c"] == pytest.approx(21.5)
        assert "exception 4 (device failure)" in (result.error or "")
        assert "cooling_w" in (result.error or "")

    run(body)


def test_gateway_without_target_fails_the_poll() -> None:
    async def body() -> None:
        port = free_port()
        async with CoolingUnitServer("liebert_crv", lambda: VALUES["liebert_crv"], port=port,
                                     exceptions={"fan_pct": 11}):
            driver = CracModbusDriver(cfg(port, "liebert_crv"))
            result = await driver.poll()
            await driver.close()
        assert not result.ok
        assert "gateway target did not respond" in (result.error or "")

    run(body)


def test_unit_that_never_answers_times_out_within_the_bound() -> None:
    async def body() -> None:
        port = free_port()
        async with SilentTcpServer(port) as server:
            driver = CracModbusDriver(cfg(port, "apc_inrow_sc", timeout_s=0.3))
            started = time.perf_counter()
            result = await driver.poll()
            elapsed = time.perf_counter() - started
            await driver.close()
        assert not result.ok and result.signals == {}
        assert "no answer within 0.3 s" in (result.error or "")
        assert "crac 'u1' (127.0.0.1:" in (result.error or "")
        assert 0.25 < elapsed < 2.0
        assert server.received_bytes > 0

    run(body)


def test_refused_connection_is_a_clear_error_and_recovers() -> None:
    async def body() -> None:
        port = free_port()
        driver = CracModbusDriver(cfg(port, "liebert_crv", timeout_s=0.5))
        refused = await driver.poll()
        async with CoolingUnitServer("liebert_crv", lambda: VALUES["liebert_crv"], port=port):
            back = await driver.poll()
        await driver.close()
        assert not refused.ok and "cannot connect" in (refused.error or "")
        assert back.ok and back.signals["crac.u1.fan_pct"] == pytest.approx(64.0)

    run(body)


def test_rtu_framing_through_a_tcp_gateway() -> None:
    async def body() -> None:
        port = free_port()
        async with CoolingUnitServer("apc_inrow_sc", lambda: VALUES["apc_inrow_sc"], port=port, framer="rtu"):
            driver = CracModbusDriver(cfg(port, "apc_inrow_sc", framer="rtu"))
            result = await driver.poll()
            await driver.close()
        assert result.ok, result.error
        assert result.signals["crac.u1.return_temp_c"] == pytest.approx(28.0, abs=0.06)

    run(body)


def test_a_dead_unit_does_not_delay_a_live_one() -> None:
    async def body() -> None:
        live_port, dead_port = free_port(), free_port()
        async with CoolingUnitServer("liebert_crv", lambda: VALUES["liebert_crv"], port=live_port), \
                SilentTcpServer(dead_port):
            live = CracModbusDriver(cfg(live_port, "liebert_crv"))
            dead = CracModbusDriver(cfg(dead_port, "liebert_crv", timeout_s=1.0))
            results = await asyncio.gather(dead.poll(), live.poll())
            await live.close()
            await dead.close()
        assert not results[0].ok and results[1].ok
        assert results[1].elapsed_ms < 500

    run(body)


def test_unit_restart_between_polls_reconnects() -> None:
    async def body() -> list[bool]:
        port = free_port()
        driver = CracModbusDriver(cfg(port, "liebert_crv", timeout_s=0.5))
        outcomes = []
        async with CoolingUnitServer("liebert_crv", lambda: VALUES["liebert_crv"], port=port):
            outcomes.append((await driver.poll()).ok)
        async with CoolingUnitServer("liebert_crv", lambda: VALUES["liebert_crv"], port=port):
            for _ in range(2):
                outcomes.append((await driver.poll()).ok)
        await driver.close()
        return outcomes

    outcomes = run(body)
    assert outcomes == [True, True, True]  # the closed connection is noticed and re-opened at once
