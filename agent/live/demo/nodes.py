"""Node agents for a multi-node demo rack (``rackwatt demo --nodes N``) and the live node tests.

``NodePlan`` writes a key file per node, the rack's ``[node_link]``/``[[node]]`` tables and each
node's agent.toml; ``DemoNodes`` runs the node agents in the demo's process, each reading its GPUs
of the twin through the real NVML driver and sending real signed datagrams to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import socket
from dataclasses import dataclass, field
from pathlib import Path

from agent.config.loader import load_config
from agent.live.clock import Clock
from agent.live.demo.files import free_port, toml_table, write_secret_file
from agent.node.sender import NodeAgent


@dataclass(frozen=True)
class NodePlan:
    """``count`` nodes of ``gpus_per_node`` GPUs, node k owning gpu.<k·g> … of the rack."""

    workdir: Path
    count: int
    gpus_per_node: int
    interval_s: float
    port: int
    keys: dict[str, Path] = field(default_factory=dict)
    max_skew_s: float = 2.0  # the rack's [node_link] max_skew_s, in the agent's clock's seconds

    @staticmethod
    def make(workdir: Path, count: int, gpus_per_node: int, interval_s: float,
             max_skew_s: float = 2.0) -> NodePlan:
        keys: dict[str, Path] = {}
        for k in range(1, count + 1):
            path = workdir / f"node-n{k}.key"
            write_secret_file(path, secrets.token_hex(32))
            keys[f"n{k}"] = path
        port = free_port(socket.SOCK_DGRAM)
        return NodePlan(workdir, count, gpus_per_node, interval_s, port, keys, max_skew_s)

    def gpus_of(self, node_id: str) -> tuple[int, ...]:
        """The twin's GPU indices this node reads (the demo's one fake NVML serves them all)."""
        k = list(self.keys).index(node_id)
        return tuple(range(k * self.gpus_per_node, (k + 1) * self.gpus_per_node))

    def rack_lines(self) -> list[str]:
        """The rack agent's ``[node_link]`` and ``[[node]]`` tables."""
        lines = toml_table("[node_link]", address="127.0.0.1", port=self.port, max_skew_s=self.max_skew_s)
        for node_id, key in self.keys.items():
            lines += toml_table("[[node]]", id=node_id, key_file=key, gpu_count=self.gpus_per_node,
                                interval_s=self.interval_s)
        return lines

    def node_config(self, node_id: str, gpus: tuple[int, ...] | None = None) -> Path:
        """Write node ``node_id``'s agent.toml (``role = "node"``); ``gpus``: its ``[nvml] gpus``."""
        state = self.workdir / f"state-{node_id}"
        state.mkdir(mode=0o700, exist_ok=True)
        lines = toml_table("[agent]", site="demo", rack="nodes", role="node", state_dir=state)
        lines += toml_table("[nvml]", interval_s=self.interval_s, gpus=gpus)
        lines += toml_table("[uplink]", node_id=node_id, gateway="127.0.0.1", port=self.port,
                            key_file=self.keys[node_id], interval_s=self.interval_s)
        path = self.workdir / f"node-{node_id}.toml"
        path.write_text("\n".join(lines) + "\n")
        return path


class DemoNodes:
    """The plan's node agents as tasks of this process, on the demo's clock."""

    def __init__(self, plan: NodePlan, clock: Clock) -> None:
        self.plan = plan
        self.agents = [NodeAgent(load_config(plan.node_config(n, plan.gpus_of(n))), clock=clock)
                       for n in plan.keys]
        self._tasks: list[asyncio.Task[int]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(a.run(), name=f"node-{a.uplink.node_id}") for a in self.agents]

    async def stop(self) -> None:
        for agent in self.agents:
            agent.request_stop()
        for task in self._tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 10)
        self._tasks = []
