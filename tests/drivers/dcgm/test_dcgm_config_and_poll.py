"""``[[dcgm]]`` through the real configuration loader and ``rackwatt poll --once``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.config.errors import ConfigError
from agent.config.loader import load_config
from drivers.registry import build_drivers
from tests.conftest import REPO_ROOT
from tests.drivers.dcgm.exporter_server import Served, exporter, render

GATEWAY = '[agent]\nsite = "dc1"\nrack = "r07"\n\n[nvml]\nenabled = false\n\n'


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(GATEWAY + body)
    return path


def test_two_nodes_are_polled_into_one_rack_wide_numbering(tmp_path: Path) -> None:
    node_a = render([{"DCGM_FI_DEV_POWER_USAGE": 100.0 + i} for i in range(4)], host="node-a")
    node_b = render([{"DCGM_FI_DEV_POWER_USAGE": 200.0 + i} for i in range(4)], host="node-b")
    with exporter(Served(node_a)) as url_a, exporter(Served(node_b)) as url_b:
        config = write(tmp_path, f'[[dcgm]]\nid = "a"\nurl = "{url_a}"\ngpu_count = 4\n\n'
                                 f'[[dcgm]]\nid = "b"\nurl = "{url_b}"\ngpu_count = 4\n')
        done = subprocess.run([sys.executable, "-m", "agent", "poll", "--config", str(config), "--once",
                               "--json"], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    powers = [report["signals"][f"gpu.{i}.power_w"] for i in range(8)]
    assert powers == pytest.approx([100, 101, 102, 103, 200, 201, 202, 203])
    assert report["devices"]["dcgm.b"]["ok"] is True


def test_one_node_down_leaves_the_other_nodes_gpus(tmp_path: Path) -> None:
    with exporter(Served(render([{"DCGM_FI_DEV_POWER_USAGE": 5.0}] * 2))) as url_a:
        config = write(tmp_path, f'[[dcgm]]\nid = "a"\nurl = "{url_a}"\ngpu_count = 2\n\n'
                                 '[[dcgm]]\nid = "b"\nurl = "http://127.0.0.1:9/metrics"\ngpu_count = 2\n')
        done = subprocess.run([sys.executable, "-m", "agent", "poll", "--config", str(config), "--once",
                               "--json"], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
    report = json.loads(done.stdout)
    assert {"gpu.0.power_w", "gpu.1.power_w"} <= set(report["signals"])
    assert not {"gpu.2.power_w", "gpu.3.power_w"} & set(report["signals"])
    assert "127.0.0.1:9" in report["devices"]["dcgm.b"]["error"]


@pytest.mark.parametrize(("body", "expected"), [
    ('[[dcgm]]\nid = "a"\nurl = "10.0.4.11:9400"\n', "must start with http:// or https://"),
    ('[[dcgm]]\nid = "a"\nurl = "http://:9400/metrics"\n', "has no host"),
    ('[[dcgm]]\nid = "A b"\nurl = "http://n1:9400/metrics"\n', "must match"),
    ('[[dcgm]]\nid = "a"\nurl = "http://n1:9400/metrics"\ngpu_count = 0\n', "between 1 and 64"),
    ('[[dcgm]]\nid = "a"\nurl = "http://n1/m"\n\n[[dcgm]]\nid = "a"\nurl = "http://n2/m"\n', "duplicate id"),
    ('[[dcgm]]\nid = "a"\nurl = "http://n1/m"\npassword = "x"\n', "password_file"),
])
def test_bad_dcgm_tables_are_named(tmp_path: Path, body: str, expected: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, body))
    assert any(expected in str(issue) and "dcgm" in str(issue) for issue in caught.value.issues), \
        [str(i) for i in caught.value.issues]


def test_overlapping_gpu_ranges_are_refused_at_build(tmp_path: Path) -> None:
    config = load_config(write(tmp_path, '[[dcgm]]\nid = "a"\nurl = "http://n1/m"\ngpu_count = 8\n\n'
                                         '[[dcgm]]\nid = "b"\nurl = "http://n2/m"\nfirst_gpu = 4\n'))
    first, second = build_drivers(config)
    assert type(first).__name__ == "DcgmExporterDriver"
    assert "overlap node(s) a" in second.error  # type: ignore[attr-defined]
