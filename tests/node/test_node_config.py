"""``[agent] role``, ``[uplink]``, ``[node_link]`` and ``[[node]]``: what loads, what is refused and how
it reads, and the rack-wide GPU numbering of [[dcgm]] and [[node]] sources together."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent.config.errors import ConfigError
from agent.config.loader import load_config
from drivers.registry import build_drivers
from tests.conftest import REPO_ROOT
from tests.node.helpers import key_file, node_toml

HEAD = '[agent]\nsite = "lab"\nrack = "r1"\n'


def write(tmp: Path, text: str) -> Path:
    path = tmp / "agent.toml"
    path.write_text(text)
    return path


def problems(path: Path) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return [str(issue) for issue in info.value.issues]


def test_a_node_agent_configuration_loads(tmp_path: Path) -> None:
    config = load_config(node_toml(tmp_path, "n1", key_file(tmp_path, "n1"), 9870))
    assert config.agent.role == "node" and config.uplink is not None
    assert (config.uplink.node_id, config.uplink.gateway, config.uplink.port) == ("n1", "127.0.0.1", 9870)


def test_a_rack_with_nodes_numbers_their_gpus_after_the_dcgm_nodes(tmp_path: Path) -> None:
    k1, k2 = key_file(tmp_path, "a"), key_file(tmp_path, "b")
    config = load_config(write(tmp_path, HEAD + (
        '[nvml]\nenabled = false\n'
        '[[dcgm]]\nid = "d1"\nurl = "http://127.0.0.1:9400/metrics"\ngpu_count = 4\n'
        f'[[node]]\nid = "n1"\nkey_file = "{k1}"\n'
        f'[[node]]\nid = "n2"\nkey_file = "{k2}"\ngpu_count = 2\n'
        f'[[node]]\nid = "n3"\nkey_file = "{k2}"\nfirst_gpu = 10\n')))  # overlaps n1 (gpu.4..11)
    assert config.node_link.port == 9870 and config.nodes[1].gpu_count == 2
    drivers: dict[str, Any] = {d.device: d for d in build_drivers(config)}
    assert drivers["node.n1"].gpu_range == "gpu.4..gpu.11"
    assert drivers["node.n2"].gpu_range == "gpu.12..gpu.13"
    assert "overlap node(s) n1" in drivers["node.n3"].error


@pytest.mark.parametrize(("body", "expected"), [
    ('role = "node"\n', 'agent.role: role = "node" needs an [uplink] section'),
    ('role = "gateway"\n', 'agent.role: must be one of "rack", "node", got "gateway"'),
    ('role = "node"\n[uplink]\nnode_id = "n1"\ngateway = "10.0.4.1:9870"\nkey_file = "{key}"\n'
     '[[pdu]]\nid = "a"\nhost = "10.0.3.7"\ncommunity_file = "{key}"\n',
     "uplink.gateway: includes a port"),
    ('role = "node"\n[uplink]\nnode_id = "n1"\ngateway = "10.0.4.1"\nkey_file = "{key}"\n'
     '[[pdu]]\nid = "a"\nhost = "10.0.3.7"\ncommunity_file = "{key}"\n',
     'pdu: not used with role = "node": a node agent reads only its own GPUs'),
    ('role = "node"\n[nvml]\nenabled = false\n[uplink]\nnode_id = "n1"\ngateway = "g"\nkey_file = "{key}"\n',
     'nvml.enabled: must be true with role = "node"'),
    ('[uplink]\nnode_id = "n1"\ngateway = "g"\nkey_file = "{key}"\n',
     'uplink: only used with role = "node"'),
    ('[[node]]\nid = "n1"\nkey_file = "{short}"\n', "is 6 characters; at least 16 (write one with: openssl"),
    ('[[node]]\nid = "n1"\nsecret = "abc"\n', "node[0].secret: secrets are not written in the configuration"),
    ('[[node]]\nid = "N1"\nkey_file = "{key}"\ngpu_count = 33\n',
     "node[0].gpu_count: must be between 1 and 32"),
    ('[[node]]\nid = "n1"\nkey_file = "{key}"\n[[node]]\nid = "n1"\nkey_file = "{key}"\n',
     'node[1].id: duplicate id "n1"'),
    ('[node_link]\nmax_skew_s = 0\n', "node_link.max_skew_s: must be > 0"),
])
def test_bad_node_configuration_names_the_key_and_why(tmp_path: Path, body: str, expected: str) -> None:
    key, short = key_file(tmp_path, "k"), key_file(tmp_path, "short", "abcdef")
    issues = problems(write(tmp_path, HEAD + body.format(key=key, short=short)))
    assert any(expected in issue for issue in issues), issues
    ours = [issue for issue in issues if issue.startswith(("uplink", "node", "agent.role"))]
    assert all("agent.toml line" in issue for issue in ours), ours


def test_rack_with_local_nvml_and_nodes_from_gpu_0_is_warned(tmp_path: Path) -> None:
    key = key_file(tmp_path, "k")
    config = load_config(write(tmp_path, HEAD + f'[[node]]\nid = "n1"\nkey_file = "{key}"\n'))
    assert any("nvml.enabled: the rack agent also reads this host's own GPUs" in w for w in config.warnings)


def test_run_exits_2_on_a_bad_node_configuration_without_a_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, HEAD + 'role = "node"\n')
    done = subprocess.run([sys.executable, "-m", "agent", "run", "--config", str(path)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert 'role = "node" needs an [uplink] section' in done.stderr and "Traceback" not in done.stderr


def test_poll_once_hears_a_running_node_agent(tmp_path: Path) -> None:
    """The operator's first check on the gateway: `rackwatt poll --once` shows the node's GPUs."""
    import json
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    key = key_file(tmp_path, "n1")
    rack = write(tmp_path, HEAD + '[nvml]\nenabled = false\n'
                 f'[node_link]\naddress = "127.0.0.1"\nport = {port}\n'
                 f'[[node]]\nid = "n1"\nkey_file = "{key}"\ngpu_count = 2\n')
    node = subprocess.Popen([sys.executable, str(Path(__file__).with_name("node_proc.py")),
                             str(node_toml(tmp_path, "n1", key, port)), "2"], cwd=REPO_ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.5)  # the node agent's start-up
        command = ["poll", "--config", str(rack), "--once", "--json"]
        done = subprocess.run([sys.executable, "-m", "agent", *command], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=60)
    finally:
        node.terminate()
        node.wait(10)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["signals"]["gpu.1.power_w"] == 350.0  # node_proc's GPU 1: 300 + 50 W
    assert out["devices"]["node.n1"]["ok"]
