"""Done-when of issue 14's node role, live: 4 node agents + a rack agent on loopback.

The node agents are real processes (``rackwatt run`` with ``role = "node"``, NVML faked at the
pynvml boundary); the rack agent is the real ``LiveAgent`` polling the twin's PDUs over real SNMP
and its cooling unit over real Modbus TCP, publishing to a real Mosquitto. One node agent is
killed: only its GPUs go missing, ``status`` (on the broker too) names the node, the others keep
their rate; started again, it rejoins by itself.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agent.config.loader import load_config
from agent.live.demo.nodes import NodePlan
from agent.live.demo.rack import DemoRack
from agent.live.demo.setup import Intervals, MqttTarget, pick_ports, write_config
from agent.live.loop import LiveAgent
from agent.sim import make_scenario
from agent.trace.model import TraceChunk
from tests.live.conftest import Broker, Subscriber

# Four node agents + a rack agent, judged on their 1 Hz rate: needs the cores to itself.
pytestmark = [pytest.mark.slow, pytest.mark.serial]

NODES, GPUS_PER_NODE = 4, 2
NODE_PROC = Path(__file__).with_name("node_proc.py")
WINDOW_S = 10.0  # 10 samples per GPU at 1 s: a tick or two lost on a busy host stays above 0.7


class Frames:
    """Every tick's row, as (ts, {gpu index: power sampled this tick?})."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, set[int], set[str]]] = []

    def __call__(self, chunk: TraceChunk) -> None:
        for i, ts in enumerate(chunk.ts):
            power = chunk.columns_matching("gpu.", ".power_w")
            gpus = {int(k) for k, col in power.items() if np.isfinite(col[i])}
            others = {n for n, col in chunk.numeric.items()
                      if not n.startswith("gpu.") and np.isfinite(col[i])}
            self.rows.append((float(ts), gpus, others))

    def rate_per_gpu(self, since: float) -> dict[int, float]:
        rows = [r for r in self.rows if r[0] >= since]
        span = max(1.0, rows[-1][0] - rows[0][0] + 1) if rows else 1.0
        return {g: sum(g in r[1] for r in rows) / span for g in range(NODES * GPUS_PER_NODE)}


def start_node(plan: NodePlan, node_id: str, logs: Path) -> subprocess.Popen[bytes]:
    with open(logs / f"{node_id}.log", "ab") as log_file:
        return subprocess.Popen([sys.executable, str(NODE_PROC), str(plan.node_config(node_id)),
                                 str(GPUS_PER_NODE)], stdout=log_file, stderr=subprocess.STDOUT)


async def until(predicate: Callable[[], Any], timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def test_killed_node_only_blanks_its_gpus_and_rejoins(tmp_path: Path, make_broker: Callable[..., Broker],
                                                      subscribe: Callable[..., Subscriber]) -> None:
    broker = make_broker()
    sub = subscribe(broker.port, "rackwatt/v1/lab/r1/status")
    plan = NodePlan.make(tmp_path, NODES, GPUS_PER_NODE, interval_s=1.0)
    scenario = make_scenario("steady", days=1, seed=0, gpus=NODES * GPUS_PER_NODE, start_ts=time.time() - 60,
                             outdoor_sensor=False)
    ports = pick_ports()
    cooling = scenario.rack.cooling
    path, community = write_config(tmp_path, site="lab", rack="r1", ports=ports, crac_id=cooling.crac_id,
                                   crac_share=cooling.share, intervals=Intervals(),
                                   mqtt=MqttTarget("127.0.0.1", broker.port), nodes=plan)
    config = load_config(path)
    frames = Frames()
    procs = {n: start_node(plan, n, tmp_path) for n in plan.keys}

    async def scenario_run() -> None:
        rack = DemoRack(scenario, time.time)
        await rack.start(ports, community)
        agent = LiveAgent(config, frame_sinks=[frames], engine_batch_s=15.0)
        task = asyncio.create_task(agent.run())
        try:
            await check(agent)
        finally:
            agent.request_stop()
            await asyncio.wait_for(task, 30)
            await rack.stop()

    async def check(agent: LiveAgent) -> None:
        def devices() -> dict[str, Any]:
            return agent.status_body()["devices"]

        await until(lambda: all(devices().get(f"node.{n}", {}).get("ok") for n in plan.keys), 30,
                    "every node agent to be received")
        await until(lambda: {"pdu.a.power_w", "crac.1.power_w"} <= set().union(*(r[2] for r in frames.rows)),
                    30, "the PDUs and the cooling unit over SNMP and Modbus")
        t0 = agent.clock.time()
        await asyncio.sleep(WINDOW_S)
        before = frames.rate_per_gpu(t0)
        assert all(rate >= 0.7 for rate in before.values()), before  # ~1 sample per GPU per second

        procs["n3"].send_signal(signal.SIGKILL)  # n3 owns gpu.4 and gpu.5
        procs["n3"].wait(10)
        await until(lambda: not devices()["node.n3"]["ok"], 10, "n3 to be marked missing")
        error = devices()["node.n3"]["error"]
        assert "node 'n3'" in error and "gpu.4..gpu.5 missing" in error
        assert all(devices()[f"node.{n}"]["ok"] for n in ("n1", "n2", "n4"))
        await until(lambda: published_missing(sub, "node.n3"), 15, "the broker's status to name n3")
        t1 = agent.clock.time()
        await asyncio.sleep(WINDOW_S)
        during = frames.rate_per_gpu(t1)
        assert during[4] == 0 and during[5] == 0, during
        assert all(during[g] >= 0.7 for g in (0, 1, 2, 3, 6, 7)), during  # the rest keeps its rate
        link = agent.status_body()["node_link"]
        assert link["nodes"]["n3"]["last_seen_s"] > 3 and link["counters"]["replayed"] == 0

        procs["n3"] = start_node(plan, "n3", tmp_path)
        await until(lambda: devices()["node.n3"]["ok"], 30, "n3 to rejoin")
        t2 = agent.clock.time()
        await asyncio.sleep(WINDOW_S)
        after = frames.rate_per_gpu(t2)
        assert after[4] >= 0.7 and after[5] >= 0.7, after
        assert agent.status_body()["node_link"]["nodes"]["n3"]["sessions"] == 2

    try:
        asyncio.run(asyncio.wait_for(scenario_run(), 150))
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                assert proc.wait(10) in (0, -signal.SIGTERM, -signal.SIGKILL)
            except subprocess.TimeoutExpired:
                proc.kill()
    n3_log = (tmp_path / "n3.log").read_text()
    assert "Traceback" not in n3_log and "rackwatt node 'n3'" in n3_log


def published_missing(sub: Subscriber, device: str) -> bool:
    """The latest retained ``online`` status on the broker marks ``device`` not ok, naming it."""
    for message in reversed(sub.snapshot()):
        body = message.json()
        if body.get("state") != "online":
            continue
        health = body.get("devices", {}).get(device)
        return bool(health) and not health["ok"] and device.split(".")[1] in (health["error"] or "")
    return False
