"""``rackwatt watch`` against a real mosquitto with three demo racks, one with a hot spot.

The watcher is the real command in a subprocess (``--json``, one line per refresh). The drift
must appear in its table within one refresh of the onset event reaching the broker (the
detection delay is the engine's; watch adds at most its refresh interval), and a watcher started
after the onset must still show it (from the retained status). A pseudo-terminal run checks the
in-place redraw. Bounded: the drift is waited for at most 90 s (a 30 h warm-up replay alone took
45 s on a loaded machine, so the faulty rack replays 8 h, enough for the hot spot).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.client import CallbackAPIVersion

from tests.conftest import REPO_ROOT, open_terminal
from tests.live.conftest import Broker, wait_until
from tests.live.conftest import make_broker as make_broker  # the fixture, re-exported for this module
from tests.metrics.conftest import start_demo as start_demo  # the fixture, re-exported for this module

pytestmark = pytest.mark.slow

SITE = "dc7"
INTERVAL_S = 1.0


class Watch:
    """``python -m agent watch … --json``, its lines collected with the time each arrived."""

    def __init__(self, broker: Broker, stderr_path: Path, *extra: str) -> None:
        self.stderr_path = stderr_path
        with open(stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "agent",
                    "watch",
                    "--site",
                    SITE,
                    "--mqtt",
                    f"127.0.0.1:{broker.port}",
                    "--interval",
                    str(INTERVAL_S),
                    "--json",
                    *extra,
                ],
                cwd=REPO_ROOT,
                stdout=subprocess.PIPE,
                stderr=err,
                stdin=subprocess.DEVNULL,
            )
        self.docs: list[tuple[float, dict[str, Any]]] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._lock:
                self.docs.append((time.monotonic(), json.loads(line)))

    def latest(self) -> dict[str, Any] | None:
        with self._lock:
            return self.docs[-1][1] if self.docs else None

    def first(self, predicate: Callable[[dict[str, Any]], bool]) -> tuple[float, dict[str, Any]] | None:
        with self._lock:
            return next(((t, d) for t, d in self.docs if predicate(d)), None)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


def _drift_of(doc: dict[str, Any], rack: str) -> list[str]:
    return [d["cause"] for r in doc["racks"] if r["rack"] == rack for d in r["drifts"]]


def _onset_listener(port: int, seen: dict[str, float]) -> mqtt.Client:
    client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2)

    def on_message(c: Any, u: Any, msg: Any) -> None:
        body = json.loads(msg.payload)
        if body.get("state") == "onset":
            seen.setdefault(body["rack"], time.monotonic())

    client.on_connect = lambda c, u, f, rc, p: c.subscribe(f"rackwatt/v1/{SITE}/+/event", 1)
    client.on_message = on_message
    client.connect("127.0.0.1", port)
    client.loop_start()
    return client


@pytest.mark.serial  # several agents against wall-clock bounds: needs the cores to itself
def test_three_demo_racks_and_a_drift_shown_within_one_refresh(
    make_broker: Callable[..., Broker], start_demo: Callable[..., Any], tmp_path: Path
) -> None:
    broker = make_broker()
    onsets: dict[str, float] = {}
    listener = _onset_listener(broker.port, onsets)
    watch = Watch(broker, tmp_path / "watch.stderr")
    try:
        common = ["--speed", "240", "--mqtt", f"127.0.0.1:{broker.port}", "--site", SITE]
        start_demo(*common, "--rack", "r01", "--warmup", "1")
        start_demo(*common, "--rack", "r02", "--warmup", "1", "--seed", "1")
        faulty = start_demo(*common, "--rack", "r03", "--fault", "hotspot", "--warmup", "8")
        try:
            shown_at, _doc = wait_until(
                lambda: watch.first(lambda d: "thermal" in _drift_of(d, "r03")), 90, "the drift in watch", 0.5
            )
        except AssertionError:
            raise AssertionError(
                "demo r03:\n"
                + "\n".join(faulty.output()[-15:])
                + "\nwatch stderr:\n"
                + watch.stderr_path.read_text()[-2000:]
                + f"\nwatch lines: {len(watch.docs)}; last: {watch.latest()}"
            ) from None
        assert "r03" in onsets, "watch showed a drift the broker never carried"
        assert shown_at - onsets["r03"] < INTERVAL_S + 2.0  # one refresh, plus process scheduling
        wait_until(  # a rack's row appears with its status; its power with its first summary
            lambda: {r["rack"] for r in watch.latest()["racks"] if r["facility_kw"] is not None}
            >= {"r01", "r02", "r03"},
            20,
            "3 racks with their power",
        )
        latest = watch.latest()
        assert latest is not None
        racks = {r["rack"]: r for r in latest["racks"]}
        assert set(racks) == {"r01", "r02", "r03"}
        for row in racks.values():
            assert row["state"] == "online" and row["facility_kw"] > 0 and row["spool_pending"] is not None
        assert not _drift_of(latest, "r01") and not _drift_of(latest, "r02")

        late = subprocess.run(  # started after the onset: learns the drift from the retained status
            [
                sys.executable,
                "-m",
                "agent",
                "watch",
                "--site",
                SITE,
                "--mqtt",
                f"127.0.0.1:{broker.port}",
                "--once",
                "--json",
                "--interval",
                "2",
            ],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert late.returncode == 0, late.stderr
        assert "thermal" in _drift_of(json.loads(late.stdout), "r03")
    finally:
        watch.stop()
        listener.loop_stop()


def test_on_a_terminal_the_table_is_redrawn_in_place(make_broker: Callable[..., Broker]) -> None:
    broker = make_broker()
    status = {"v": 1, "type": "status", "state": "online", "spool": {"pending": 2}, "devices": {}}
    client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2)
    client.connect("127.0.0.1", broker.port)
    client.loop_start()
    client.publish(f"rackwatt/v1/{SITE}/r09/status", json.dumps(status), qos=1, retain=True).wait_for_publish(
        5
    )
    client.loop_stop()
    master, slave, env = open_terminal()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent",
            "watch",
            "--site",
            SITE,
            "--mqtt",
            f"127.0.0.1:{broker.port}",
            "--interval",
            "0.5",
            "--duration",
            "3",
        ],
        cwd=REPO_ROOT,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(15) == 0
    screen = b"".join(chunks).decode(errors="replace")
    assert screen.count("\x1b[H") >= 3  # redrawn, not scrolled
    assert "r09" in screen and "active drifts" in screen and "Traceback" not in screen
