"""``/metrics`` served by a running ``LiveAgent``: off by default, HTTP and HTTPS on loopback,
a port already taken is one clear log line (the agent runs on), and the server stops with the agent."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import ssl
import subprocess
import urllib.error
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agent.config.model import MetricsSection
from agent.live.loop import LiveAgent
from agent.metrics import serve_metrics
from tests.conftest import free_port
from tests.live.fakes import FakeDriver, make_config
from tests.metrics.conftest import samples


def agent_with(tmp_path: Path, **metrics: Any) -> LiveAgent:
    config = make_config(tmp_path / "state", free_port())
    config = dataclasses.replace(
        config,
        mqtt=dataclasses.replace(config.mqtt, enabled=False),
        metrics=MetricsSection(**({"enabled": True, "port": free_port(), "node": "gw1"} | metrics)),
    )
    return LiveAgent(config, driver_factory=lambda c: [FakeDriver("pdu.a", interval_s=0.05)], engine=False)


def while_running(agent: LiveAgent, check: Callable[[], Awaitable[Any]]) -> Any:
    """Run the agent, await ``check()`` once its first polls are in, stop it; return what check gave."""

    async def main() -> Any:
        task = asyncio.create_task(agent.run())
        try:
            for _ in range(100):
                if agent.poller is not None and any(h["ok"] for h in agent.poller.health_dict().values()):
                    break
                await asyncio.sleep(0.05)
            return await check()
        finally:
            agent.request_stop()
            assert await asyncio.wait_for(task, 20) == 0

    return asyncio.run(asyncio.wait_for(main(), 60))


def fetch(url: str, context: ssl.SSLContext | None = None) -> str:
    with urllib.request.urlopen(url, timeout=10, context=context) as response:
        return response.read().decode()


def test_off_by_default_nothing_is_served(tmp_path: Path) -> None:
    agent = agent_with(tmp_path)
    agent.config = dataclasses.replace(agent.config, metrics=MetricsSection())

    async def check() -> Any:
        async with serve_metrics(agent) as server:
            return server

    assert MetricsSection().enabled is False and MetricsSection().address == "127.0.0.1"
    assert asyncio.run(check()) is None


def test_a_running_agent_serves_its_status_and_stops_serving_when_it_stops(tmp_path: Path) -> None:
    agent = agent_with(tmp_path)
    port = agent.config.metrics.port
    url = f"http://127.0.0.1:{port}/metrics"
    text = while_running(agent, lambda: asyncio.to_thread(fetch, url))
    got = samples(text)
    up = (
        "rackwatt_device_up",
        frozenset({"site": "s1", "rack": "r1", "node": "gw1", "device": "pdu.a"}.items()),
    )
    assert got[up] == 1.0
    assert not any(
        name.startswith("python_") or name.startswith("process_") for name, _ in got
    )  # own registry
    with pytest.raises(urllib.error.URLError):
        fetch(url)


def test_https_with_the_configured_certificate(tmp_path: Path) -> None:
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-keyout",
            "m.key",
            "-out",
            "m.crt",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=60,
    )
    (tmp_path / "m.key").chmod(0o600)
    agent = agent_with(tmp_path, cert_file=tmp_path / "m.crt", key_file=tmp_path / "m.key")
    port = agent.config.metrics.port
    trusted = ssl.create_default_context(cafile=str(tmp_path / "m.crt"))

    async def check() -> tuple[str, bool]:
        text = await asyncio.to_thread(fetch, f"https://127.0.0.1:{port}/metrics", trusted)
        plain_refused = False
        try:
            await asyncio.to_thread(fetch, f"http://127.0.0.1:{port}/metrics")
        except (urllib.error.URLError, ConnectionError, OSError):
            plain_refused = True
        return text, plain_refused

    text, plain_refused = while_running(agent, check)
    assert "rackwatt_device_up" in text and plain_refused


def test_a_port_already_taken_is_one_clear_line_and_the_agent_runs_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        agent = agent_with(tmp_path, port=taken.getsockname()[1])
        with caplog.at_level(logging.ERROR, logger="rackwatt.metrics"):

            async def check() -> int:
                await asyncio.sleep(0.3)
                return agent.ticks

            assert while_running(agent, check) > 0  # kept ticking
    (line,) = [r for r in caplog.records if r.name == "rackwatt.metrics"]
    assert (
        "cannot serve on 127.0.0.1:" in line.getMessage() and "running without /metrics" in line.getMessage()
    )
    assert line.exc_info is None


def _openssl(tmp_path: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], cwd=tmp_path, check=True, capture_output=True, timeout=60)


def test_with_client_ca_file_a_scraper_without_a_certificate_is_refused(tmp_path: Path) -> None:
    _openssl(
        tmp_path,
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-subj",
        "/CN=scraper-ca",
    )
    _openssl(
        tmp_path,
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "prom.key",
        "-out",
        "prom.csr",
        "-subj",
        "/CN=prometheus",
    )
    _openssl(
        tmp_path,
        "x509",
        "-req",
        "-in",
        "prom.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-out",
        "prom.crt",
    )
    _openssl(
        tmp_path,
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "2",
        "-keyout",
        "m.key",
        "-out",
        "m.crt",
        "-subj",
        "/CN=localhost",
        "-addext",
        "subjectAltName=IP:127.0.0.1",
    )
    (tmp_path / "m.key").chmod(0o600)
    agent = agent_with(
        tmp_path,
        cert_file=tmp_path / "m.crt",
        key_file=tmp_path / "m.key",
        client_ca_file=tmp_path / "ca.crt",
    )
    url = f"https://127.0.0.1:{agent.config.metrics.port}/metrics"
    with_cert = ssl.create_default_context(cafile=str(tmp_path / "m.crt"))
    with_cert.load_cert_chain(str(tmp_path / "prom.crt"), str(tmp_path / "prom.key"))
    without_cert = ssl.create_default_context(cafile=str(tmp_path / "m.crt"))

    async def check() -> tuple[str, bool]:
        text = await asyncio.to_thread(fetch, url, with_cert)
        refused = False
        try:
            await asyncio.to_thread(fetch, url, without_cert)
        except (urllib.error.URLError, ConnectionError, OSError, ssl.SSLError):
            refused = True
        return text, refused

    text, refused = while_running(agent, check)
    assert "rackwatt_device_up" in text and refused
