"""``rackwatt demo --nodes N``: node agents feeding the rack agent over the node link, end to end."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT


def demo(args: list[str], tmp: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1"}
    env.pop("CI", None)
    return subprocess.run([sys.executable, "-m", "agent", "demo", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout_s, stdin=subprocess.DEVNULL)


@pytest.mark.serial  # several agents against wall-clock bounds: needs the cores to itself
@pytest.mark.slow
def test_demo_with_four_node_agents_shows_every_node_healthy(tmp_path: Path) -> None:
    done = demo(["--nodes", "4", "--duration", "20", "--plain", "--no-mqtt", "--warmup", "0"], tmp_path, 120)
    out = done.stdout
    assert done.returncode == 0, done.stderr[-2000:]
    assert "a simulated 8-GPU training rack" in out and "GPUs: 4 node agents (2 GPUs each" in out
    for node in ("n1", "n2", "n3", "n4"):  # each node's device reported healthy at least once
        assert any(f"device node.{node}" in line and " ok " in line for line in out.splitlines()), out[-3000:]
    assert "refused" not in done.stderr and "Traceback" not in done.stderr + out
    assert list(tmp_path.iterdir()) == []  # temporary files (keys, configs) removed


def test_node_count_is_checked_before_anything_starts(tmp_path: Path) -> None:
    done = demo(["--nodes", "9"], tmp_path, 60)
    assert done.returncode == 2 and "--nodes: must be between 1 and 8, got 9" in done.stderr
