"""A node agent process with faked GPUs: ``rackwatt run`` (role = "node") over FakeNvml.

Usage: python node_proc.py CONFIG GPUS

NVML is faked at the pynvml boundary only: everything else (config loading, the NVML driver,
the uplink, signals) is the real code. GPU ordinal i draws 300 + 50·i W.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agent.live.run_cmd import run
from agent.sim.devices.fake_nvml import DEFAULT_GPU, FakeNvml


def main() -> int:
    config, gpus = Path(sys.argv[1]), int(sys.argv[2])
    values = {i: dict(DEFAULT_GPU, power_w=300.0 + 50.0 * i) for i in range(gpus)}
    args = argparse.Namespace(config=config, conf_d=None, no_conf_d=True, save_interval=300.0, verbose=False)
    with FakeNvml(lambda: values).installed():
        return run(args)


if __name__ == "__main__":
    sys.exit(main())
