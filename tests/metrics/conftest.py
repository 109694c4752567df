"""Helpers for the metrics tests: parse an exposition, run promtool on it, a real Prometheus."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import free_port


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """(sample name, labels) → value of every sample in an exposition."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def promtool_problems(text: str) -> str:
    """``promtool check metrics`` on an exposition: its complaints ('' when clean)."""
    if shutil.which("promtool") is None:
        pytest.fail("promtool is not installed (Debian package prometheus; run .ci/setup)")
    done = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    return (done.stdout + done.stderr).strip() if done.returncode else ""


class Prometheus:
    """A real Prometheus on loopback (temp config and storage) and its HTTP API."""

    def __init__(self, workdir: Path, targets: list[str], scrape_interval_s: float = 1.0) -> None:
        if shutil.which("prometheus") is None:
            pytest.fail("prometheus is not installed (Debian package prometheus; run .ci/setup)")
        self.port = free_port()
        config = workdir / "prometheus.yml"
        config.write_text(
            "global:\n"
            f"  scrape_interval: {scrape_interval_s:g}s\n"
            f"  scrape_timeout: {scrape_interval_s:g}s\n"
            "scrape_configs:\n"
            "  - job_name: rackwatt\n"
            "    static_configs:\n"
            f"      - targets: {json.dumps(targets)}\n"
        )
        self.log_path = workdir / "prometheus.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={config}",
                    f"--storage.tsdb.path={workdir / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        self.url = f"http://127.0.0.1:{self.port}"

    def get(self, path: str, **params: str | list[str]) -> Any:
        query = urllib.parse.urlencode(params, doseq=True)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=10) as response:
            body = json.loads(response.read())
        assert body["status"] == "success", body
        return body["data"]

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited with {self.proc.returncode}: {self.log()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = self.get("/api/v1/query", query=expr)
        return list(data["result"]) if data["resultType"] in ("vector", "matrix") else [data["result"]]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


@pytest.fixture
def start_prometheus(tmp_path: Path) -> Iterator[Callable[[list[str]], Prometheus]]:
    started: list[Prometheus] = []

    def start(targets: list[str]) -> Prometheus:
        workdir = tmp_path / f"prometheus-{len(started)}"
        workdir.mkdir()
        prom = Prometheus(workdir, targets)
        started.append(prom)
        return prom

    yield start
    for prom in started:
        prom.stop()


@pytest.fixture
def start_demo(tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``rackwatt demo`` subprocesses (plain lines), killed at the end if still running."""
    from tests.demo.test_demo_run import DemoProcess

    started: list[Any] = []

    def start(*args: str) -> Any:
        workdir = tmp_path / f"demo-{len(started)}"
        workdir.mkdir()
        demo = DemoProcess(["--plain", *args], workdir)
        started.append(demo)
        return demo

    yield start
    for demo in started:
        demo.kill()
