"""Real peers for the live-agent tests: a mosquitto broker on a free loopback port, a subscriber.

The broker runs in the foreground as a child process with persistence off and is stopped in the
fixture finalizer. ``Broker.stop()``/``start()`` simulate an outage on the same port.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.client import CallbackAPIVersion

from tests.conftest import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
SCHEMA_DIR = REPO_ROOT / "agent" / "schemas"


def wait_until(predicate: Callable[[], Any], timeout_s: float, what: str, step_s: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Broker:
    conf: Path
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        assert self.proc is None
        with open(self.log_path, "ab") as log_file:
            self.proc = subprocess.Popen(
                ["mosquitto", "-c", str(self.conf)], stdout=log_file, stderr=subprocess.STDOUT
            )
        try:
            wait_until(
                lambda: port_open(self.port) or self.proc.poll() is not None, 10, "mosquitto to listen"
            )
        except AssertionError:
            self.stop()
            raise
        if self.proc.poll() is not None:
            code = self.proc.returncode
            self.proc = None
            raise RuntimeError(f"mosquitto exited with {code}: {self.log_path.read_text()[-2000:]}")

    def stop(self, sig_kill: bool = False) -> None:
        if self.proc is None:
            return
        if sig_kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=5)
        self.proc = None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def _mosquitto_available() -> bool:
    return shutil.which("mosquitto") is not None


@pytest.fixture
def make_broker(tmp_path: Path) -> Iterator[Callable[..., Broker]]:
    """Start a mosquitto with ``extra`` config lines (listener and persistence are added)."""
    if not _mosquitto_available():
        pytest.fail("mosquitto is not installed (run .ci/setup)")
    started: list[Broker] = []

    def make(
        extra: str = "allow_anonymous true\n", port: int | None = None, listener_extra: str = ""
    ) -> Broker:
        port = port or free_port()
        conf = tmp_path / f"mosquitto-{port}.conf"
        conf.write_text(
            f"per_listener_settings false\npersistence false\nlog_dest stdout\n{extra}"
            f"listener {port} 127.0.0.1\n{listener_extra}"
        )
        broker = Broker(conf, port, tmp_path / f"mosquitto-{port}.log")
        broker.start()
        started.append(broker)
        return broker

    yield make
    for broker in started:
        broker.stop()


def persistent_broker_lines(directory: Path) -> str:
    """Config lines for a broker that keeps sessions and their queued messages across a restart."""
    directory.mkdir(parents=True, exist_ok=True)
    # Run as root, mosquitto drops to user mosquitto, which cannot enter pytest's 0700 tmp
    # directories to save its database: keep the test broker's user instead.
    keep_user = "user root\n" if os.geteuid() == 0 else ""
    return (
        f"{keep_user}allow_anonymous true\npersistence true\n"
        f"persistence_location {directory}/\nmax_queued_messages 0\nmax_inflight_messages 0\n"
    )


@pytest.fixture
def broker(make_broker: Callable[..., Broker]) -> Broker:
    return make_broker()


@dataclass
class Received:
    topic: str
    payload: bytes
    retain: bool

    def json(self) -> Any:
        return json.loads(self.payload)


@dataclass
class Subscriber:
    """Collects everything under a topic filter, in arrival order (thread-safe)."""

    port: int
    topic_filter: str = "rackwatt/#"
    tls: dict[str, str] | None = None  # tls_set() keyword arguments
    auth: tuple[str, str] | None = None  # username, password
    messages: list[Received] = field(default_factory=list)
    client: mqtt.Client | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    connected: threading.Event = field(default_factory=threading.Event)
    # A persistent session (clean_session off): with a persisting broker (``PERSISTENT_BROKER``)
    # what is published while this subscriber reconnects after an outage waits for it.
    persistent: bool = False

    def start(self) -> Subscriber:
        c = mqtt.Client(
            callback_api_version=CallbackAPIVersion.VERSION2,
            client_id=f"sub-{os.getpid()}-{id(self)}",
            clean_session=not self.persistent,
        )
        c.suppress_exceptions = True
        c.reconnect_delay_set(1, 1)
        if self.tls:
            c.tls_set(**self.tls)
        if self.auth:
            c.username_pw_set(*self.auth)

        def on_connect(client: Any, userdata: Any, flags: Any, rc: Any, props: Any) -> None:
            if not rc.is_failure:
                client.subscribe(self.topic_filter, qos=1)
                self.connected.set()

        def on_message(client: Any, userdata: Any, msg: Any) -> None:
            with self._lock:
                self.messages.append(Received(msg.topic, bytes(msg.payload), bool(msg.retain)))

        c.on_connect = on_connect
        c.on_message = on_message
        c.connect_async("127.0.0.1", self.port, keepalive=5)
        c.loop_start()
        self.client = c
        assert self.connected.wait(10), "subscriber could not connect"
        time.sleep(0.1)  # SUBACK
        return self

    def stop(self) -> None:
        if self.client is not None:
            self.client.disconnect()
            self.client.loop_stop()
            self.client = None

    def snapshot(self) -> list[Received]:
        with self._lock:
            return list(self.messages)

    def on(self, suffix: str) -> list[Received]:
        return [m for m in self.snapshot() if m.topic.endswith(suffix)]


@pytest.fixture
def subscribe() -> Iterator[Callable[..., Subscriber]]:
    subs: list[Subscriber] = []

    def make(port: int, topic_filter: str = "rackwatt/#", **options: Any) -> Subscriber:
        sub = Subscriber(port, topic_filter, **options).start()
        subs.append(sub)
        return sub

    yield make
    for sub in subs:
        sub.stop()


def load_schema(name: str) -> dict[str, Any]:
    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text())
