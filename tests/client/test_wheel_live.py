"""Done-when (issue 20 item 5): the client wheel, pip-installed into a bare venv, measures a stand-in
training loop's window against a live rack agent (``rackwatt demo``: the real agent, drivers and
engine on the twin's loopback devices), and its facility energy matches the agent's accounting.

"The agent's accounting" is read by a path independent of the energy query: the agent's own
``/metrics`` energy counters (``rackwatt_stage_energy_joules_total``, the engine's cumulative
per-stage IT and cooling energy). Sampled together with the ledger's ``accounted_until``, they give
the cumulative energy curve at the agent's batch ends; the window's reference energy is that curve
interpolated at the window's ends (linearly, the same even-spread assumption the ledger makes
inside a bin).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
from rackwatt_client.rack_query import RackQuery, RackUnavailable

from agent.live.demo.setup import free_port
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow

WINDOW_REAL_S = 12.0  # 12 real seconds = 12 simulated minutes at the demo's speed of 60
TOLERANCE = 0.01  # the 1 %

STAND_IN = """
import json, sys, time
from rackwatt_client import begin_window, end_window, report, stage
begin_window("epoch")
stop = time.monotonic() + float(sys.argv[1])
steps = 0
while time.monotonic() < stop:            # a stand-in training loop
    with stage("forward_backward"):
        time.sleep(0.03)
    with stage("grad_sync"):
        time.sleep(0.01)
    steps += 1
    report(work_rate=steps)
m = end_window("epoch", wait_s=30)
fields = ("name", "elapsed_s", "gpu_energy_j", "it_energy_j", "cooling_energy_j", "facility_energy_j",
          "start_ts", "end_ts", "job")
print(json.dumps({**{k: getattr(m, k) for k in fields}, "unavailable": dict(m.unavailable)}))
"""

COUNTER = re.compile(r'^rackwatt_stage_energy_joules_total\{[^}]*part="(it|cooling)"[^}]*\} (\S+)$', re.M)


def _build_wheel(tmp: Path) -> Path:
    src = tmp / "client-src"
    shutil.copytree(
        REPO_ROOT / "packaging" / "client", src, ignore=shutil.ignore_patterns("build", "*.egg-info")
    )
    out = tmp / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--disable-pip-version-check",
            "-q",
            "--no-deps",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
        capture_output=True,
        timeout=240,
    )
    (wheel,) = out.glob("rackwatt_client-*.whl")
    return wheel


def _bare_venv(tmp: Path, wheel: Path) -> Path:
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    subprocess.run(
        [
            str(py),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "-q",
            "--no-index",
            "--no-deps",
            str(wheel),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return py


class Sampler(threading.Thread):
    """(accounted_until, IT J, cooling J) from the agent's /metrics, kept only when the ledger's
    accounted_until is the same just before and just after the scrape (no batch in between)."""

    def __init__(self, socket_path: str, metrics_url: str) -> None:
        super().__init__(daemon=True)
        self.query = RackQuery(socket_path, timeout_s=2.0)
        self.url = metrics_url
        self.points: list[tuple[float, float, float]] = []
        self.stop = threading.Event()

    def until(self) -> float | None:
        reply = self.query.ask(t0=1e9 * 1.7)  # any t0: the reply says how far the ledger reaches
        value = reply.get("accounted_until")
        return float(value) if value is not None else None

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                before = self.until()
                text = urllib.request.urlopen(self.url, timeout=2).read().decode()
                after = self.until()
            except (OSError, RackUnavailable):
                time.sleep(0.05)
                continue
            if before is not None and before == after:
                parts = {"it": 0.0, "cooling": 0.0}
                for part, value in COUNTER.findall(text):
                    parts[part] += float(value)
                if not self.points or self.points[-1][0] != before:
                    self.points.append((before, parts["it"], parts["cooling"]))
            time.sleep(0.03)


def _wait_for(predicate, timeout_s: float, what: str, proc: subprocess.Popen[bytes], log: Path):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = predicate()
        if found:
            return found
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    raise AssertionError(f"{what} not seen; demo output:\n{log.read_text()[-3000:]}")


def test_a_bare_venv_client_matches_the_rack_agents_accounting(tmp_path: Path, short_tmp: Path) -> None:
    wheel = _build_wheel(tmp_path)
    with __import__("zipfile").ZipFile(wheel) as zf:
        tops = {name.split("/")[0] for name in zf.namelist()}
    assert tops == {"rackwatt_client", wheel.name.split("-py3")[0] + ".dist-info"}, tops  # nothing else
    py = _bare_venv(tmp_path, wheel)
    bare = subprocess.run(
        [
            str(py),
            "-I",
            "-c",
            "import importlib.util as u; print([m for m in ('numpy', 'agent', 'drivers', "
            "'paho', 'pysnmp', 'rackwatt_client') if u.find_spec(m)])",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert bare.stdout.strip() == "['rackwatt_client']", bare.stdout  # importable without the agent's deps

    demo_tmp = short_tmp
    port = free_port()
    log = tmp_path / "demo.log"
    env = {**os.environ, "TMPDIR": str(demo_tmp), "PYTHONUNBUFFERED": "1"}
    env.pop("CI", None)
    with open(log, "wb") as out:
        demo = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "agent",
                "demo",
                "--no-mqtt",
                "--warmup",
                "0",
                "--plain",
                "--seed",
                "7",
                "--duration",
                "90",
                "--metrics",
                f"127.0.0.1:{port}",
            ],
            cwd=REPO_ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    sampler: Sampler | None = None
    try:
        sock = _wait_for(
            lambda: next(iter(demo_tmp.glob("rackwatt-demo-*/stage.sock")), None),
            60,
            "the agent's stage socket",
            demo,
            log,
        )
        sampler = Sampler(str(sock), f"http://127.0.0.1:{port}/metrics")
        sampler.start()
        _wait_for(lambda: len(sampler.points) >= 2, 60, "the agent's first accounted bins", demo, log)
        job = subprocess.run(
            [str(py), "-I", "-c", STAND_IN, str(WINDOW_REAL_S)],
            capture_output=True,
            text=True,
            timeout=120,
            env={"PATH": os.environ.get("PATH", ""), "RACKWATT_STAGE_SOCKET": str(sock)},
        )
        assert job.returncode == 0, job.stderr
        m = json.loads(job.stdout.strip().splitlines()[-1])
        t0, t1 = m["start_ts"], m["end_ts"]
        _wait_for(lambda: sampler.points[-1][0] >= t1 + 60, 30, "the window's end accounted", demo, log)
    finally:
        if sampler is not None:
            sampler.stop.set()
            sampler.join(5)
        demo.terminate()
        demo.wait(30)

    assert m["facility_energy_j"] is not None, m["unavailable"]
    assert (
        m["gpu_energy_j"] is None and "pynvml" in m["unavailable"]["gpu_energy_j"]
    )  # no NVML in a bare venv
    assert abs(m["elapsed_s"] - WINDOW_REAL_S) < 2.0
    pts = np.array(sampler.points)
    assert pts[0, 0] <= t0 and pts[-1, 0] >= t1, (pts[[0, -1], 0], t0, t1)
    ref_it = float(np.interp(t1, pts[:, 0], pts[:, 1]) - np.interp(t0, pts[:, 0], pts[:, 1]))
    ref_cool = float(np.interp(t1, pts[:, 0], pts[:, 2]) - np.interp(t0, pts[:, 0], pts[:, 2]))
    figures = (
        f"window {t1 - t0:.0f} simulated s: client facility {m['facility_energy_j'] / 1e6:.4f} MJ vs agent's "
        f"/metrics {(ref_it + ref_cool) / 1e6:.4f} MJ "
        f"(IT {m['it_energy_j'] / 1e6:.4f} vs {ref_it / 1e6:.4f}, "
        f"cooling {m['cooling_energy_j'] / 1e6:.4f} vs {ref_cool / 1e6:.4f}); {len(pts)} counter samples"
    )
    print(figures)
    assert ref_it > 0 and ref_cool > 0, figures
    assert m["facility_energy_j"] == pytest.approx(ref_it + ref_cool, rel=TOLERANCE), figures
    assert m["it_energy_j"] == pytest.approx(ref_it, rel=TOLERANCE), figures
    assert m["cooling_energy_j"] == pytest.approx(ref_cool, rel=TOLERANCE), figures
