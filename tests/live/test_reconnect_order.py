"""Order kept across a reconnect: what paho carries over leaves before anything newer.

A link that drops with QoS 1 messages unacknowledged leaves them in paho's memory; paho sends
them again on the next connection, from its own thread, right after ``on_connect``. The pump
sends newer ones from the asyncio thread. Once, on a loaded machine, a newer seq reached the
subscriber first (tests/live/test_state_dir.py). This forces that interleaving: paho's thread
is held right after ``on_connect`` (as a busy scheduler can hold it) until the pump has sent
something or ``STALL_S`` has passed, over a real mosquitto and a hop that drops the link. The
last two cases also keep the event loop busy from before the drop until paho is in that
``on_connect``, or waiting for the CONNACK on the new connection, so the pump runs first with
the connection it knew (a slow engine batch or fsync can block the loop for longer than the
reconnect delay).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

from agent.live.publisher import MqttPublisher
from agent.live.store import Store
from agent.live.topics import Topics
from tests.live.conftest import Broker, Subscriber
from tests.live.fakes import make_config
from tests.live.hop import TcpHop
from tests.live.test_agent_mqtt import await_until, check_no_loss_in_order, data_seqs

CARRIED = 3  # unacknowledged when the link drops: fewer than the window, so the pump has room
BACKLOG = 6  # stored while the link is down
# How long paho's thread is held after on_connect when the pump sends nothing: long enough for
# the asyncio thread to act on the connect many times over on a loaded machine.
STALL_S = 1.5


class HeldAfterConnect(MqttPublisher):
    """paho's thread pauses after handing ``on_connect`` over, before it resends what it carried."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.held = threading.Event()  # paho's thread is in a held on_connect
        self.stalls = 0  # reconnects that carried messages (each held)

    def _cb_connect(self, *args: Any) -> None:
        carried = self.stats()["inflight"]
        super()._cb_connect(*args)
        if not carried:
            return
        self.stalls += 1
        self.held.set()
        deadline = time.monotonic() + STALL_S
        while self.stats()["inflight"] <= carried and time.monotonic() < deadline:
            time.sleep(0.01)


class HeldInWrite(MqttPublisher):
    """paho's thread pauses in the on_publish of a QoS 0 message it has just written, once asked:
    the packets queued behind it are still unwritten when the link is cut."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.hold, self.holding, self.resume = threading.Event(), threading.Event(), threading.Event()

    def _cb_publish(self, *args: Any) -> None:
        if self.hold.is_set():
            self.hold.clear()
            self.holding.set()
            self.resume.wait(STALL_S * 4)  # a bound only: the test resumes it within a second
        super()._cb_publish(*args)


P = TypeVar("P", bound=MqttPublisher)


def _through_a_hop(kind: type[P], broker: Broker, state_dir: Path) -> tuple[TcpHop, P]:
    """A publisher of ``kind`` on a fresh store, reaching the broker through a hop that can cut the link."""
    hop = TcpHop(broker.port).start()
    config = make_config(state_dir, hop.port)
    store = Store.open(state_dir, 1 << 20)
    publisher = kind(
        config.mqtt, "s1", "r1", store, version="test", status_fn=dict, reconnect_min_s=1, reconnect_max_s=1
    )
    return hop, publisher


def _put(store: Store, topics: Topics, n: int, qos: int = 1) -> None:
    for _ in range(n):
        store.put("summary", topics.summary, {"v": 1, "type": "summary"}, retain=False, qos=qos)


@pytest.mark.parametrize(
    "case",
    [
        "same store",
        "store moved by reload",
        "event loop busy through the reconnect",
        "event loop busy until paho waits for CONNACK",
    ],
)
def test_messages_carried_over_a_dropped_link_leave_before_newer_ones(
    tmp_path: Path, broker: Broker, subscribe: Callable[..., Subscriber], case: str
) -> None:
    sub = subscribe(broker.port)
    hop, publisher = _through_a_hop(HeldAfterConnect, broker, tmp_path / "old")
    topics = publisher.topics

    async def scenario() -> None:
        await publisher.start()
        await await_until(lambda: publisher.connected, 10, "the first connection")
        hop.hold()
        _put(publisher.store, topics, CARRIED)
        publisher.wake()
        await await_until(lambda: publisher.stats()["inflight"] == CARRIED, 5, "messages on the wire")
        if case == "event loop busy through the reconnect":
            _put(publisher.store, topics, BACKLOG)
            publisher.wake()  # the pump is due first, before the disconnect and connect news
            hop.cut()
            assert publisher.held.wait(10), "paho reconnected"  # blocks the event loop till then
        elif case == "event loop busy until paho waits for CONNACK":
            _put(publisher.store, topics, BACKLOG)
            publisher.wake()
            links = hop.accepted
            hop.cut()
            hop.hold_replies()  # the next connection gets no CONNACK until release()
            deadline = time.monotonic() + 10
            while hop.accepted == links and time.monotonic() < deadline:  # blocks the event loop
                time.sleep(0.01)
            assert hop.accepted > links, "paho reconnected"
            time.sleep(0.2)  # its CONNECT is out
            await asyncio.sleep(0.3)  # the pump's turn, then the disconnect's
            hop.release()
        else:
            hop.cut()
            await await_until(lambda: not publisher.connected, 5, "the link to drop")
            if case == "store moved by reload":  # as LiveAgent._move_store does
                moved = Store.open(tmp_path / "new", 1 << 20, seq_floor=publisher.store.next_seq)
                moved.take_over(publisher.store)
                publisher.store.close()
                publisher.store = moved
            _put(publisher.store, topics, BACKLOG)
            publisher.wake()
        await await_until(lambda: len(publisher.store) == 0, 15, "everything acknowledged")
        await publisher.stop()

    try:
        asyncio.run(scenario())
    finally:
        publisher.store.close()
        hop.close()
    time.sleep(0.3)
    seqs = data_seqs(sub)
    assert publisher.stalls == 1, "paho carried messages over the reconnect"
    assert len(set(seqs)) == CARRIED + BACKLOG
    check_no_loss_in_order(seqs, max(seqs))


def test_the_hop_drops_what_it_held(broker: Broker, subscribe: Callable[..., Subscriber]) -> None:
    """The fault the test above needs: a held, cut link loses what was sent into it."""
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    sub = subscribe(broker.port)
    hop = TcpHop(broker.port).start()
    client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id="hop-check")
    connected = threading.Event()
    client.on_connect = lambda *a: connected.set()
    client.connect("127.0.0.1", hop.port)
    client.loop_start()
    try:
        assert connected.wait(5)
        client.publish("rackwatt/hop/a", b'{"seq": 1}', qos=0).wait_for_publish(5)
        time.sleep(0.3)
        hop.hold()
        client.publish("rackwatt/hop/b", b'{"seq": 2}', qos=0).wait_for_publish(5)
        time.sleep(0.3)
        hop.cut()
        time.sleep(0.3)
    finally:
        client.loop_stop()
        hop.close()
    assert [m.topic for m in sub.snapshot()] == ["rackwatt/hop/a"]


def test_qos0_messages_paho_lost_with_the_link_are_sent_again_in_order(
    tmp_path: Path, broker: Broker, subscribe: Callable[..., Subscriber]
) -> None:
    """paho drops the QoS 0 packets it had not written when the link ends, with no callback:
    they must leave the window (else it never drains) and go again, before newer ones."""
    queued = 6  # one written, the rest queued behind it in paho when the link is cut
    sub = subscribe(broker.port)
    hop, publisher = _through_a_hop(HeldInWrite, broker, tmp_path / "state")
    store = publisher.store

    async def scenario() -> None:
        await publisher.start()
        await await_until(lambda: publisher.connected, 10, "the first connection")
        await asyncio.sleep(0.3)  # the online status is acknowledged
        publisher.hold.set()
        _put(store, publisher.topics, queued, qos=0)
        publisher.wake()
        await await_until(lambda: publisher.holding.is_set(), 5, "paho writing the first")
        await await_until(lambda: publisher.stats()["inflight"] == queued, 5, "all handed to paho")
        hop.cut()
        await asyncio.sleep(0.2)  # the hop's close reaches paho's socket
        publisher.resume.set()
        await await_until(lambda: not publisher.connected, 5, "the link to drop")
        _put(store, publisher.topics, BACKLOG, qos=0)
        publisher.wake()
        await await_until(lambda: len(store) == 0, 15, "every QoS 0 message written")
        await publisher.stop()

    try:
        asyncio.run(scenario())
    finally:
        store.close()
        hop.close()
    time.sleep(0.3)
    seqs = data_seqs(sub)
    assert seqs == sorted(set(seqs)), "in order, each once"
    assert seqs and max(seqs) == store.last_seq, "the newest arrived"
