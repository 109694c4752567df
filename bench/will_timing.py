"""Bench: how long after an MQTT client freezes does the broker publish its last will?

The docs promise a bound in terms of ``keepalive_s``. MQTT says a broker closes a session it has
heard nothing from for 1.5 × keepalive; what a real Mosquitto does is measured here. Each trial
starts a client process (paho, the agent's MQTT library) with a will, that publishes a small
message every 0.2 s so its last packet is always fresh (the worst case: the broker's silence timer
starts at the freeze), then freezes it with SIGSTOP the moment one of its messages arrives, and
times the will's arrival at a second client. Prints min / median / max and the ratio to keepalive.

    .venv/bin/python bench/will_timing.py [--keepalive 5] [--trials 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import paho.mqtt.client as mqtt
from paho.mqtt.client import CallbackAPIVersion

CLIENT = """
import sys, time
import paho.mqtt.client as mqtt
from paho.mqtt.client import CallbackAPIVersion
port, keepalive = int(sys.argv[1]), int(sys.argv[2])
c = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id="frozen")
c.will_set("bench/will", "gone", qos=1)
c.connect("127.0.0.1", port, keepalive=keepalive)
c.loop_start()
while True:
    c.publish("bench/tick", str(time.time()), qos=0)
    time.sleep(0.2)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise SystemExit("mosquitto did not start")


def trial(port: int, keepalive_s: int) -> float:
    ticked, will = threading.Event(), threading.Event()
    will_at: list[float] = []

    def on_message(client: object, userdata: object, msg: mqtt.MQTTMessage) -> None:
        if msg.topic == "bench/will":
            will_at.append(time.monotonic())
            will.set()
        else:
            ticked.set()

    watcher = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id="watcher")
    watcher.on_message = on_message
    watcher.connect("127.0.0.1", port, keepalive=60)
    watcher.subscribe([("bench/will", 1), ("bench/tick", 0)])
    watcher.loop_start()
    proc = subprocess.Popen([sys.executable, "-c", CLIENT, str(port), str(keepalive_s)])
    try:
        if not ticked.wait(15):
            raise SystemExit("the client never published")
        time.sleep(1.0)  # settled: keepalive running
        ticked.clear()
        ticked.wait(5)
        os.kill(proc.pid, signal.SIGSTOP)
        frozen_at = time.monotonic()
        if not will.wait(keepalive_s * 4 + 5):
            raise SystemExit("no will within 4 × keepalive")
        return will_at[0] - frozen_at
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        watcher.disconnect()
        watcher.loop_stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keepalive", type=int, default=5, help="client keepalive, s (default 5)")
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()
    if shutil.which("mosquitto") is None:
        raise SystemExit("mosquitto is not installed")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="rackwatt-will-") as tmp:
        conf = Path(tmp) / "mosquitto.conf"
        conf.write_text(f"persistence false\nallow_anonymous true\nlistener {port} 127.0.0.1\n")
        version = subprocess.run(["mosquitto", "-h"], capture_output=True, text=True).stdout.splitlines()[0]
        broker = subprocess.Popen(["mosquitto", "-c", str(conf)], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL)
        try:
            wait_port(port)
            delays = [trial(port, args.keepalive) for _ in range(args.trials)]
        finally:
            broker.terminate()
            broker.wait(timeout=10)
    k = args.keepalive
    print(f"{version}; keepalive {k} s; {args.trials} trials; freeze right after a packet (worst case)")
    print("| freeze → will | min | median | max |")
    print("|---|---|---|---|")
    print(f"| seconds | {min(delays):.2f} | {statistics.median(delays):.2f} | {max(delays):.2f} |")
    ratios = [d / k for d in delays]
    print(f"| × keepalive | {min(ratios):.2f} | {statistics.median(ratios):.2f} | {max(ratios):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
