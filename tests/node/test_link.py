"""Node agents → rack receiver over real UDP on 127.0.0.1, with NVML faked at the pynvml boundary.

What the rack trusts (configured node, its key, newer than the last, sent within max_skew_s), what
it refuses and counts, the clock offset it measures and corrects, and a node that stops and
comes back by itself.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.config.loader import load_config
from agent.config.secrets import read_secret
from agent.node import wire
from agent.node.config import NodeLinkSection, NodeSection
from agent.node.sender import NodeAgent, next_session, ordinals
from agent.node.source import NodeSourceDriver, build_node_drivers
from agent.sim.devices.fake_nvml import DEFAULT_GPU, FakeNvml
from tests.node.helpers import key_file, node_toml

INTERVAL_S = 0.2  # fast sends keep the tests short; silence is 3 intervals


@pytest.fixture
def fake_gpus() -> Iterator[dict[int, dict[str, float]]]:
    gpus = {0: dict(DEFAULT_GPU), 1: dict(DEFAULT_GPU, power_w=300.0, util_pct=12.0)}
    with FakeNvml(lambda: gpus).installed():
        yield gpus


class Rack:
    """Two configured nodes of 2 GPUs each (gpu.0-1 and gpu.2-3) behind one receiver."""

    def __init__(self, tmp: Path) -> None:
        tmp.mkdir(exist_ok=True)
        self.tmp = tmp
        self.keys = {n: key_file(tmp, n) for n in ("n1", "n2")}
        sections = [NodeSection(id=n, key_file=k, gpu_count=2, interval_s=INTERVAL_S)
                    for n, k in self.keys.items()]
        self.drivers = build_node_drivers(NodeLinkSection(address="127.0.0.1", port=0),
                                          [(s, 2 * i) for i, s in enumerate(sections)])
        self.receiver = self.drivers[0].receiver

    async def open(self) -> int:
        assert await self.receiver.ensure_open() is None
        assert self.receiver.bound is not None
        return self.receiver.bound[1]

    def driver(self, node_id: str) -> NodeSourceDriver:
        return next(d for d in self.drivers if d.section.id == node_id)

    def node(self, node_id: str, port: int, key: Path | None = None) -> NodeAgent:
        key = key or self.keys.get(node_id) or key_file(self.tmp, node_id)
        return NodeAgent(load_config(node_toml(self.tmp, node_id, key, port, interval_s=INTERVAL_S)))

    async def close(self) -> None:
        for d in self.drivers:
            await d.close()


async def run_for(agent: NodeAgent, seconds: float) -> None:
    task = asyncio.create_task(agent.run())
    await asyncio.sleep(seconds)
    agent.request_stop()
    assert await asyncio.wait_for(task, 5) == 0


def test_readings_arrive_on_rack_wide_gpu_indices(tmp_path: Path, fake_gpus: dict) -> None:
    async def scenario() -> None:
        rack = Rack(tmp_path)
        port = await rack.open()
        nodes = [rack.node("n1", port), rack.node("n2", port)]
        tasks = [asyncio.create_task(n.run()) for n in nodes]
        await asyncio.sleep(3 * INTERVAL_S)
        first = await rack.driver("n2").poll()
        await asyncio.sleep(5 * INTERVAL_S)
        second = await rack.driver("n2").poll()
        n1 = await rack.driver("n1").poll()
        for n in nodes:
            n.request_stop()
        await asyncio.gather(*tasks)
        await rack.close()
        assert first.ok and second.ok and n1.ok, (first.error, second.error, n1.error)
        s = second.signals
        assert s["gpu.2.power_w"] == 650.0 and s["gpu.3.power_w"] == 300.0 and s["gpu.3.util_pct"] == 12.0
        assert s["gpu.2.energy_resets"] == 0.0 and "gpu.0.power_w" not in s  # n2 owns gpu.2-3 only
        assert "gpu.0.power_w" in n1.signals
        gained_j = s["gpu.2.energy_j"] - first.signals["gpu.2.energy_j"]
        assert gained_j == pytest.approx(650.0 * (second.ts - first.ts), rel=0.25)  # counter, not a guess
        status = rack.receiver.status()
        peer = status["nodes"]["n2"]  # type: ignore[index]
        assert peer["accepted"] >= 5 and peer["refused"] == {} and abs(peer["skew_s"]) < 0.05
        assert status["counters"]["accepted"] == sum(n.sent for n in nodes)  # type: ignore[index]

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_unknown_node_and_wrong_key_are_refused_and_counted(tmp_path: Path, fake_gpus: dict,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        rack = Rack(tmp_path)
        port = await rack.open()
        stranger = rack.node("n9", port)  # not in the rack's [[node]] tables
        impostor = rack.node("n2", port, key=key_file(tmp_path, "other"))  # right id, wrong key
        await asyncio.gather(run_for(stranger, 3 * INTERVAL_S), run_for(impostor, 3 * INTERVAL_S))
        result = await rack.driver("n2").poll()
        await rack.close()
        counters = rack.receiver.counters
        assert counters["unknown_node"] == stranger.sent > 0
        assert counters["bad_mac"] == impostor.sent > 0 and counters["accepted"] == 0
        assert not result.ok and result.signals == {}
        error = result.error or ""
        assert "no datagram accepted" in error and "HMAC does not match" in error

    asyncio.run(asyncio.wait_for(scenario(), 20))
    logged = caplog.text
    assert "names node 'n9', which is not one of this rack's [[node]] tables: refused" in logged
    assert "127.0.0.1:" in logged  # the sender's address is named


def signed(rack: Rack, node_id: str, seq: int, sent_ts: float, session: int = 7) -> bytes:
    key = read_secret(rack.keys[node_id]).encode()
    reading = wire.NodeReading(node_id, session, seq, read_ts=sent_ts - 0.1, sent_ts=sent_ts,
                               gpus={0: {"power_w": 500.0}, 1: {"power_w": 501.0}})
    return wire.encode(reading, key)


def test_replays_and_skewed_clocks_are_refused_small_skew_is_corrected(tmp_path: Path) -> None:
    async def scenario() -> None:
        rack = Rack(tmp_path)
        port = await rack.open()
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

        async def send(data: bytes) -> None:
            sock.sendto(data, ("127.0.0.1", port))
            await asyncio.sleep(0.05)

        ahead_s = 1.0  # within max_skew_s = 2: measured and corrected
        for seq in (1, 2, 3):
            await send(signed(rack, "n1", seq, time.time() + ahead_s))
        captured_at = time.time()
        captured = signed(rack, "n1", 4, captured_at + ahead_s)
        await send(captured)
        await send(captured)  # replayed
        await send(signed(rack, "n1", 2, time.time() + ahead_s))  # older seq of the same session
        await send(signed(rack, "n1", 1, time.time() + ahead_s, session=6))  # an older session
        result = await rack.driver("n1").poll()
        await send(signed(rack, "n2", 1, time.time() + 5.0))  # 5 s ahead: past max_skew_s
        await send(signed(rack, "n2", 2, time.time() - 5.0))  # or behind
        n2 = await rack.driver("n2").poll()
        sock.close()
        await rack.close()
        c = rack.receiver.counters
        assert c["accepted"] == 4 and c["replayed"] == 3 and c["skewed"] == 2
        peer = rack.receiver.peers["n1"]
        assert peer.skew_s == pytest.approx(-ahead_s, abs=0.05)
        assert result.ok and result.signals["gpu.1.power_w"] == 501.0
        # read_ts was 0.1 s before sending by the node's clock: on this host's clock, just before now
        assert result.ts == pytest.approx(captured_at - 0.1, abs=0.05)
        assert not n2.ok
        assert "its clock is 5.0 s behind this gateway's (limit max_skew_s = 2 s)" in (n2.error or "")

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_a_silent_node_marks_only_its_gpus_missing_and_rejoins(tmp_path: Path, fake_gpus: dict) -> None:
    async def scenario() -> None:
        rack = Rack(tmp_path)
        port = await rack.open()
        n2 = rack.node("n2", port)
        n2_task = asyncio.create_task(n2.run())
        await run_for(rack.node("n1", port), 3 * INTERVAL_S)
        await asyncio.sleep(4 * INTERVAL_S)  # n1 silent for more than 3 intervals
        gone, other = await rack.driver("n1").poll(), await rack.driver("n2").poll()
        assert not gone.ok and gone.signals == {}
        assert "node 'n1' (127.0.0.1:" in (gone.error or "") and "gpu.0..gpu.1 missing" in (gone.error or "")
        assert other.ok and "gpu.2.power_w" in other.signals
        back = rack.node("n1", port)  # a restarted node agent: a new session, nothing else to do
        back_task = asyncio.create_task(back.run())
        await asyncio.sleep(3 * INTERVAL_S)
        rejoined = await rack.driver("n1").poll()
        for agent in (back, n2):
            agent.request_stop()
        await asyncio.gather(back_task, n2_task)
        await rack.close()
        assert rejoined.ok and rejoined.signals["gpu.0.power_w"] == 650.0, rejoined.error
        assert rack.receiver.peers["n1"].sessions == 2 and rack.receiver.counters["replayed"] == 0

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_sessions_rise_even_when_the_clock_goes_back(tmp_path: Path) -> None:
    first = next_session(tmp_path, now_us=5_000)
    assert first == 5_000
    assert next_session(tmp_path, now_us=1_000) == 5_001  # clock stepped back: still above
    assert next_session(tmp_path, now_us=9_000) == 9_000


def test_ordinals_follow_the_configured_gpu_list() -> None:
    signals = {"gpu.4.power_w": 1.0, "gpu.5.power_w": 2.0, "gpu.5.energy_j": 3.0, "gpu.6.power_w": 9.0,
               "gpu.4.not_sent": 0.0}
    assert ordinals(signals, (4, 5)) == {0: {"power_w": 1.0}, 1: {"power_w": 2.0, "energy_j": 3.0}}
    assert ordinals({"gpu.3.temp_c": 50.0}, None) == {3: {"temp_c": 50.0}}


def test_a_node_whose_nvml_fails_is_alive_but_its_gpus_are_missing(tmp_path: Path) -> None:
    fake = FakeNvml(lambda: {0: dict(DEFAULT_GPU)})
    fake.init_error = 9  # NVIDIA driver not loaded on the node

    async def scenario() -> None:
        rack = Rack(tmp_path)
        port = await rack.open()
        await run_for(rack.node("n1", port), 3 * INTERVAL_S)
        result = await rack.driver("n1").poll()
        await rack.close()
        assert not result.ok and result.signals == {}
        assert "answers but sends none of its 2 GPUs (gpu.0..gpu.1 missing" in (result.error or "")

    with fake.installed():
        asyncio.run(asyncio.wait_for(scenario(), 20))


def test_sighup_reload_moves_a_node_to_another_gateway_port(tmp_path: Path, fake_gpus: dict) -> None:
    async def scenario() -> None:
        first, second = Rack(tmp_path / "a"), Rack(tmp_path / "b")
        port_a, port_b = await first.open(), await second.open()
        second.receiver.peers["n1"].key = first.receiver.peers["n1"].key  # the same node key on both
        path = node_toml(tmp_path, "n1", first.keys["n1"], port_a, interval_s=INTERVAL_S)
        agent = NodeAgent(load_config(path), config_loader=load_config)
        task = asyncio.create_task(agent.run())
        await asyncio.sleep(3 * INTERVAL_S)
        node_toml(tmp_path, "n1", first.keys["n1"], port_b, interval_s=INTERVAL_S)  # rewritten file
        agent.request_reload()
        await asyncio.sleep(4 * INTERVAL_S)
        agent.request_stop()
        await task
        await first.close()
        await second.close()
        assert first.receiver.peers["n1"].accepted >= 2 and second.receiver.peers["n1"].accepted >= 2
        assert agent.uplink.port == port_b

    asyncio.run(asyncio.wait_for(scenario(), 20))
