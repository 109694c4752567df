"""TLS with a test CA and client certificates, password authentication, and a bad password."""

from __future__ import annotations

import asyncio
import grp
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from agent.live.loop import LiveAgent
from tests.live.conftest import Broker, Subscriber
from tests.live.fakes import FakeDriver, FakeEngine, fake_link, make_config
from tests.live.test_agent_mqtt import await_until

PASSWORD = "s3cret-broker-pw"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def pki() -> Iterator[Path]:
    """CA, server (SAN localhost/127.0.0.1) and client certificates, and a mosquitto password file.

    In a directory mosquitto can read after it drops root privileges to user ``mosquitto``.
    """
    if shutil.which("openssl") is None or shutil.which("mosquitto_passwd") is None:
        pytest.fail("openssl and mosquitto_passwd are needed (run .ci/setup)")
    d = Path(tempfile.mkdtemp(prefix="rackwatt-pki-"))
    try:
        _openssl(
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "30",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-subj",
            "/CN=rackwatt-test-ca",
            cwd=d,
        )
        (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        for name in ("server", "client"):
            _openssl(
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                f"{name}.key",
                "-out",
                f"{name}.csr",
                "-subj",
                f"/CN={'localhost' if name == 'server' else 'rack-gw-1'}",
                cwd=d,
            )
            _openssl(
                "x509",
                "-req",
                "-in",
                f"{name}.csr",
                "-CA",
                "ca.crt",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "30",
                "-out",
                f"{name}.crt",
                "-extfile",
                "san.ext",
                cwd=d,
            )
        subprocess.run(
            ["mosquitto_passwd", "-c", "-b", str(d / "passwd"), "edge", PASSWORD],
            check=True,
            capture_output=True,
            timeout=30,
        )
        (d / "password").write_text(PASSWORD + "\n")
        (d / "wrong-password").write_text("not-the-password\n")
        for f in ("password", "wrong-password", "client.key"):
            os.chmod(d / f, 0o600)
        if os.geteuid() == 0:  # mosquitto drops to user mosquitto before reading keys and passwords
            gid = grp.getgrnam("mosquitto").gr_gid
            for f in (d, d / "server.key", d / "passwd", d / "server.crt", d / "ca.crt"):
                os.chown(f, 0, gid)
            os.chmod(d, 0o750)
            os.chmod(d / "server.key", 0o640)
            os.chmod(d / "passwd", 0o640)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def tls_broker(pki: Path, make_broker: Callable[..., Broker]) -> Broker:
    return make_broker(
        extra=f"allow_anonymous false\npassword_file {pki / 'passwd'}\n",
        listener_extra=(
            f"cafile {pki / 'ca.crt'}\ncertfile {pki / 'server.crt'}\nkeyfile {pki / 'server.key'}\n"
            "require_certificate true\ntls_version tlsv1.2\n"
        ),
    )


def _tls_config(tmp_path: Path, pki: Path, port: int, password_file: str):  # type: ignore[no-untyped-def]
    return make_config(
        tmp_path / "state",
        port,
        tick_s=0.05,
        ca_file=pki / "ca.crt",
        cert_file=pki / "client.crt",
        key_file=pki / "client.key",
        username="edge",
        password_file=pki / password_file,
    )


def test_tls_with_client_certificate_and_password(
    tmp_path: Path, pki: Path, tls_broker: Broker, subscribe: Callable[..., Subscriber]
) -> None:
    sub = subscribe(
        tls_broker.port,
        tls={
            "ca_certs": str(pki / "ca.crt"),
            "certfile": str(pki / "client.crt"),
            "keyfile": str(pki / "client.key"),
        },
        auth=("edge", PASSWORD),
    )
    config = _tls_config(tmp_path, pki, tls_broker.port, "password")
    agent = LiveAgent(
        config,
        engine_batch_s=0,
        driver_factory=lambda c: [FakeDriver("pdu.a", 0.05)],
        engine=fake_link(FakeEngine(summary_every=2, event_every=0)),
    )

    async def scenario() -> None:
        task = asyncio.create_task(agent.run())
        await await_until(lambda: len(sub.on("/summary")) >= 3, 15, "summaries over TLS")
        agent.request_stop()
        await asyncio.wait_for(task, 10)

    asyncio.run(scenario())
    assert agent.publisher is not None and agent.publisher.connects == 1
    assert sub.on("/status")[0].json()["state"] == "online"


def test_bad_password_gives_a_clear_error_and_backs_off(
    tmp_path: Path, pki: Path, tls_broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    config = _tls_config(tmp_path, pki, tls_broker.port, "wrong-password")
    agent = LiveAgent(
        config,
        engine_batch_s=0,
        driver_factory=lambda c: [FakeDriver("pdu.a", 0.05)],
        engine=fake_link(FakeEngine(summary_every=2, event_every=0)),
    )
    observed_s = 4.5

    async def scenario() -> None:
        task = asyncio.create_task(agent.run())
        await asyncio.sleep(observed_s)
        assert agent.publisher is not None and not agent.publisher.connected
        agent.request_stop()
        await asyncio.wait_for(task, 10)

    with caplog.at_level("ERROR", logger="rackwatt.mqtt"):
        started = time.monotonic()
        asyncio.run(scenario())
        elapsed = time.monotonic() - started
    refusals = [r.getMessage() for r in caplog.records if "refused the connection" in r.getMessage()]
    assert refusals, "a refused login is logged"
    assert "Not authorized" in refusals[0] or "password" in refusals[0].lower()
    assert "mqtt.password_file" in refusals[0] and "retrying in 1 s" in refusals[0]
    # Exponential backoff (1, 2, 4 s …): a handful of attempts, not a tight loop.
    assert 2 <= len(refusals) <= 4, (len(refusals), elapsed)
    assert "retrying in 2 s" in refusals[1]
    assert agent.store is not None and len(agent.store) > 0, "data is kept in the store meanwhile"
    assert all("not-the-password" not in r.getMessage() for r in caplog.records)
