"""``rackwatt sparkplug``: one rack as a Sparkplug B edge node, from the agent's own MQTT topics.

A bridge, not a second publisher in the agent: docs/mqtt.md stays the one contract. It subscribes
to a rack's ``summary`` and ``status`` and republishes them under ``spBv1.0/<group>/…/<rack>``; it
reads only rackwatt topics and writes only Sparkplug ones.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from typing import Any

from agent.live.cli_login import add_broker_options, cli_client
from agent.live.cli_types import positive
from agent.live.topics import Topics
from agent.payload import json_object
from agent.sparkplug.node import EdgeNode


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--site", required=True, help="the rack's site (its MQTT topics' site)")
    parser.add_argument("--rack", required=True, help="the rack: becomes the Sparkplug edge node id")
    parser.add_argument("--group", help="Sparkplug group id (default: the site)")
    add_broker_options(parser)
    parser.add_argument("--duration", type=positive, metavar="S", help="stop after S seconds")


def _now_ms() -> int:
    return int(time.time() * 1000)


class Bridge:
    """paho client + EdgeNode; all node state is touched on paho's network thread only."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.node = EdgeNode(args.group or args.site, args.rack)
        topics = Topics.for_rack(args.topic_root, args.site, args.rack)
        self.summary_topic, self.status_topic = topics.summary, topics.status
        self.last_summary: dict[str, Any] | None = None
        self.note = "connecting"
        # Sparkplug B: edge node sessions are clean (cli_client's)
        self.client = cli_client(args, f"rackwatt-spb-{self.node.group_id}-{self.node.edge_node_id}"[:64])
        self._set_will()
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_message = self._on_message
        self.client.connect_async(args.mqtt.host, args.mqtt.port, keepalive=30)

    def _set_will(self) -> None:
        self.client.will_set(*self.node.death(_now_ms()), qos=1, retain=False)

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if reason.is_failure:
            self.note = f"broker refused the login: {reason}"
            print(f"rackwatt sparkplug: {self.note}", file=sys.stderr)
            return
        self.note = "connected"
        client.subscribe([(self.summary_topic, 1), (self.status_topic, 1)])
        if self.last_summary is not None:  # a new session: birth at once with what we know
            self._publish(self.node.update(self.last_summary, _now_ms()))

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        self.note = f"disconnected ({reason}); reconnecting"
        self.node.new_session()  # the next CONNECT carries the next bdSeq in its will
        self._set_will()

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        body = json_object(msg.payload)
        if body is None:
            return  # not ours to judge: the agent's subscribers see the same bytes
        if msg.topic == self.status_topic:
            if body.get("state") == "offline" and self.node.born:  # the agent's will: the rack is gone
                client.publish(*self.node.death(_now_ms()), qos=1)
                self.node.died()
            return
        self.last_summary = body
        self._publish(self.node.update(body, _now_ms()))

    def _publish(self, message: tuple[str, bytes] | None) -> None:
        if message is not None:
            self.client.publish(*message, qos=0)

    def run(self, duration_s: float | None) -> int:
        stop = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        self.client.loop_start()
        try:
            stop.wait(duration_s)
        finally:
            if self.node.born:  # a clean stop says so itself (the will covers the rest)
                self.client.publish(*self.node.death(_now_ms()), qos=1).wait_for_publish(2)
            self.client.disconnect()
            self.client.loop_stop()
        return 0


def run(args: argparse.Namespace) -> int:
    try:
        bridge = Bridge(args)
    except OSError as exc:
        print(f"rackwatt sparkplug: {exc}", file=sys.stderr)
        return 2
    return bridge.run(args.duration)
