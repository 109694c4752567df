"""What the broker does, logged as what it is, against a real Mosquitto on loopback.

TLS failures name the ssl reason (wrong CA, hostname mismatch, expired certificate); another
client with our client id is named as such; the last will carries the current ``seq``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import grp
import logging
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from agent.config.model import MqttSection
from agent.live.outbox import Outbox
from agent.live.publisher import MqttPublisher
from agent.live.store import Store
from agent.live.tls_probe import tls_failure
from agent.live.topics import Topics
from tests.live.conftest import Broker, Subscriber

NOW = dt.datetime.now(dt.UTC)


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _write(path: Path, key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> None:
    path.with_suffix(".crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    path.with_suffix(".key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )


def _ca(d: Path, name: str) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(name))
        .issuer_name(_name(name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(days=1))
        .not_valid_after(NOW + dt.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    _write(d / name, key, cert)
    return key, cert


CA = tuple[ec.EllipticCurvePrivateKey, x509.Certificate]


def _server(d: Path, name: str, ca: CA, sans: list[str], days: tuple[int, int]) -> None:
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    alt: list[x509.GeneralName] = []
    for san in sans:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(san)))
        except ValueError:
            alt.append(x509.DNSName(san))
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(sans[0]))
        .issuer_name(ca[1].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW + dt.timedelta(days=days[0]))
        .not_valid_after(NOW + dt.timedelta(days=days[1]))
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .sign(ca[0], hashes.SHA256())
    )
    _write(d / name, key, cert)


@pytest.fixture(scope="module")
def certs() -> Iterator[Path]:
    """Two CAs; server certificates: good, for another host name, expired."""
    d = Path(tempfile.mkdtemp(prefix="rackwatt-tls-"))
    try:
        ca = _ca(d, "ca")
        _ca(d, "other-ca")
        _server(d, "good", ca, ["localhost", "127.0.0.1"], (-1, 30))
        _server(d, "wrong-host", ca, ["broker.example"], (-1, 30))
        _server(d, "expired", ca, ["localhost", "127.0.0.1"], (-30, -2))
        if os.geteuid() == 0:  # mosquitto drops to user mosquitto before reading its key
            gid = grp.getgrnam("mosquitto").gr_gid
            for f in [d, *d.iterdir()]:
                os.chown(f, 0, gid)
                os.chmod(f, 0o750 if f.is_dir() else 0o640)
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _tls_broker(make_broker: Callable[..., Broker], certs: Path, server: str) -> Broker:
    return make_broker(
        listener_extra=(
            f"cafile {certs / 'ca.crt'}\ncertfile {certs / (server + '.crt')}\n"
            f"keyfile {certs / (server + '.key')}\ntls_version tlsv1.2\n"
        )
    )


@pytest.mark.parametrize(
    ("server", "ca_name", "expected"),
    [
        ("good", "ca", None),
        ("good", "other-ca", "not signed by mqtt.ca_file"),
        ("wrong-host", "ca", "does not name '127.0.0.1'"),
        ("expired", "ca", "certificate has expired"),
    ],
)
def test_tls_failures_are_named(
    make_broker: Callable[..., Broker], certs: Path, server: str, ca_name: str, expected: str | None
) -> None:
    broker = _tls_broker(make_broker, certs, server)
    reason = tls_failure("127.0.0.1", broker.port, certs / f"{ca_name}.crt", timeout_s=3)
    if expected is None:
        assert reason is None
    else:
        assert reason is not None and expected in reason, reason
        assert "certificate verify failed" in reason


def _publisher(tmp_path: Path, port: int, name: str, **mqtt: object) -> MqttPublisher:
    cfg = MqttSection(host="127.0.0.1", port=port, keepalive_s=5, **mqtt)  # type: ignore[arg-type]
    return MqttPublisher(
        cfg, "s1", "r1", Store.open(tmp_path / name, 1 << 20),
        version="test", status_fn=dict, reconnect_min_s=1, reconnect_max_s=1,
    )


def test_a_tls_failure_is_logged_with_its_reason_not_as_unreachable(
    tmp_path: Path, make_broker: Callable[..., Broker], certs: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broker = _tls_broker(make_broker, certs, "expired")
    publisher = _publisher(tmp_path, broker.port, "spool", ca_file=certs / "ca.crt")

    async def scenario() -> None:
        await publisher.start()
        deadline = time.monotonic() + 10
        while not (publisher.last_error or "").startswith("tls:") and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await publisher.stop(timeout_s=0.5)

    with caplog.at_level(logging.INFO, logger="rackwatt.mqtt"):
        asyncio.run(asyncio.wait_for(scenario(), 20))
    lines = [r.getMessage() for r in caplog.records if r.name == "rackwatt.mqtt"]
    tls_lines = [line for line in lines if "TLS connection to broker" in line]
    assert tls_lines and "certificate has expired" in tls_lines[0], lines
    assert f"127.0.0.1:{broker.port}" in tls_lines[0]
    assert not any("cannot reach broker" in line for line in lines)


@pytest.mark.slow
def test_another_agent_with_our_client_id_is_named(
    tmp_path: Path, broker: Broker, caplog: pytest.LogCaptureFixture
) -> None:
    first = _publisher(tmp_path, broker.port, "a")
    second = _publisher(tmp_path, broker.port, "b")
    assert first.client_id == second.client_id == "rackwatt-s1-r1"

    async def scenario() -> None:
        await first.start()
        await second.start()
        deadline = time.monotonic() + 20
        while not (first.takeover_suspected or second.takeover_suspected) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await first.stop(timeout_s=0.5)
        await second.stop(timeout_s=0.5)

    with caplog.at_level(logging.INFO, logger="rackwatt.mqtt"):
        asyncio.run(asyncio.wait_for(scenario(), 40))
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("another agent uses client id 'rackwatt-s1-r1'" in e for e in errors), errors
    assert any(f"127.0.0.1:{broker.port}" in e for e in errors)


def test_the_last_will_carries_the_current_seq(
    tmp_path: Path, broker: Broker, subscribe: Callable[..., Subscriber]
) -> None:
    """Issue 18 #7: the will registered at connect is renewed once seq has moved on."""
    sub = subscribe(broker.port)
    publisher = _publisher(tmp_path, broker.port, "spool")
    publisher.will_refresh_s = 0.5

    async def scenario() -> int:
        await publisher.start()
        while not publisher.connected:
            await asyncio.sleep(0.02)
        outbox = Outbox(
            Topics.for_rack("rackwatt/v1", "s1", "r1"), publisher.store, site="s1", rack="r1",
            qos=1, keep=True, on_stored=publisher.wake,
        )
        seqs = [outbox.send("event", {"i": i}) for i in range(5)]
        assert seqs == list(range(seqs[0], seqs[0] + 5))
        deadline = time.monotonic() + 10
        while (publisher.will_seq < seqs[-1] or not publisher.connected) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert publisher.will_seq == seqs[-1] and publisher.connected
        client = publisher._client
        assert client is not None
        sock = client.socket()
        assert isinstance(sock, socket.socket)
        sock.shutdown(socket.SHUT_RDWR)  # the link dies without a DISCONNECT: the broker sends the will
        deadline = time.monotonic() + 10
        while not any(m.json().get("state") == "offline" for m in sub.on("/status")):
            assert time.monotonic() < deadline, "no will"
            await asyncio.sleep(0.05)
        await publisher.stop(timeout_s=1)
        return seqs[-1] if publisher.store.last_seq == seqs[-1] else -1

    last_seq = asyncio.run(asyncio.wait_for(scenario(), 30))
    will = next(m.json() for m in sub.on("/status") if m.json().get("state") == "offline")
    assert will["reason"] == "lost" and will["seq"] == last_seq > 0
    assert [m.json()["i"] for m in sub.on("/event")] == [0, 1, 2, 3, 4]  # nothing lost by the renewal
