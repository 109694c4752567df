"""MQTT publisher: paho-mqtt 2.x in its own network thread, draining the durable store.

Why this shape (STACK-NOTES §5): paho's ``loop_start()`` thread owns the socket and the reconnect
backoff; an exception in a callback would kill it silently, so ``suppress_exceptions`` is on and
every callback only hands its arguments to the asyncio loop. Delivery is tracked by
``on_publish(mid)`` (PUBACK), never ``wait_for_publish``, which raises for messages queued while
disconnected. paho gets a small window; the rest waits in the store and is sent in ``seq`` order.
The outbox (``outbox.py``) numbers and stores a message, then calls ``wake()``.

Order across a reconnect. paho resends what was unacknowledged from its own thread after
``on_connect``, unordered against a ``publish()`` from the asyncio thread, so a newer seq could pass
it (seen once under load). So what paho carried into a new session goes first: the pump sends
nothing newer until all of it is acknowledged (paho resends in publish order, which is ``seq``
order), nor while paho is between connections or in a CONNACK the asyncio side has not seen yet
(``_sessions``). QoS 0 messages are not carried (paho drops unwritten ones at a disconnect, without
a callback): a new session takes them out of the window and the store sends them again.

``status`` is state, not history: not spooled. ``online`` (retained) on every connect and
periodically, ``offline`` (retained) from a clean stop or the last will; each carries ``seq`` = the
last data seq, so a subscriber spots a loss at the tail. The broker keeps the will of CONNECT, so it
is re-set before every reconnect, and a session whose will lags ``seq`` is cycled once
``will_refresh_s`` has passed with nothing in flight. Sessions are persistent
(``clean_session=False``): QoS 1 commands and hints wait at the broker meanwhile.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from agent.config.model import MqttSection
from agent.config.secrets import SecretError, read_secret
from agent.live.envelope import payload_json
from agent.live.store import Store
from agent.live.tls_probe import tls_failure
from agent.live.topics import SCHEMA_VERSION, Topics

log = logging.getLogger("rackwatt.mqtt")

InboundHandler = Callable[[bytes], None]


# Two clients with one client id take the session from each other: each is closed as soon as the
# other reconnects, which paho does after its minimum delay (its backoff resets on every successful
# connect). So a session the broker ends within 2 × reconnect_min_s + 1 s of CONNACK (and within
# one keepalive, before anything of ours could have timed out) is "short"; one is chance (a broker
# restart), three in a row is the pattern.
TAKEOVER_SHORT_SESSIONS = 3


class MqttConfigError(ValueError):
    """The MQTT section cannot be used (unreadable password file, bad TLS files)."""


class MqttPublisher:
    """One MQTT client per agent: sends what the store holds, status, inbound hints and commands."""

    def __init__(
        self,
        cfg: MqttSection,
        site: str,
        rack: str,
        store: Store,
        *,
        version: str,
        status_fn: Callable[[], dict[str, Any]],
        on_hint: InboundHandler | None = None,
        on_accept: InboundHandler | None = None,
        clock: Callable[[], float] = time.time,
        window: int = 10,
        delayed_after_s: float = 5.0,
        reconnect_min_s: int = 1,
        reconnect_max_s: int = 60,
        will_refresh_s: float = 600.0,
    ) -> None:
        self.cfg = cfg
        self.site, self.rack = site, rack
        self.topics = Topics.for_rack(cfg.topic_root, site, rack)
        self.store = store
        self.version = version
        self._status_fn = status_fn
        inbound = ((self.topics.hint, on_hint), (self.topics.cmd_accept, on_accept))
        self._inbound = {topic: handler for topic, handler in inbound if handler is not None}  # subscribed
        self._clock = clock
        self.window = max(1, window)
        self.delayed_after_s = delayed_after_s
        self._reconnect = (max(1, reconnect_min_s), max(1, reconnect_max_s))
        self._client: mqtt.Client | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake = asyncio.Event()
        self._pump_task: asyncio.Task[None] | None = None
        self._inflight: dict[int, int] = {}  # paho mid → store seq
        self._inflight_qos0: set[int] = set()  # mids paho forgets, unannounced, if the connection ends
        self._carried: set[int] = set()  # mids paho resends into this session: nothing newer before them
        self._sessions = 0  # CONNACKs paho has received (written by its thread only)
        self._session = 0  # the CONNACK the asyncio side has acted on
        self._control_mids: dict[int, asyncio.Future[None]] = {}  # status publishes awaited on stop
        self.connected = False
        self.connects = 0
        self.failures = 0  # consecutive failed connection attempts
        self.published = 0  # PUBACKs received for stored messages
        self.last_error: str | None = None
        self._stopping = False
        self.client_id = cfg.client_id or f"rackwatt-{site}-{rack}"
        self.will_refresh_s = will_refresh_s
        self.will_seq = 0  # the seq in the will the broker holds now
        self._will_set_mono = time.monotonic()
        self._cycling = False  # a deliberate reconnect to refresh the will is under way
        self._session_started: float | None = None
        self._short_sessions = 0
        self._short_ends: collections.deque[float] = collections.deque(maxlen=TAKEOVER_SHORT_SESSIONS)
        self.takeover_suspected = False
        self._diagnosing = False
        self._will_task: asyncio.Task[None] | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.cfg.host}:{self.cfg.port}"

    # ---- setup -----------------------------------------------------------------------------
    def _build_client(self) -> mqtt.Client:
        cfg = self.cfg
        client = mqtt.Client(callback_api_version=CallbackAPIVersion.VERSION2, client_id=self.client_id,
                             protocol=mqtt.MQTTv311, clean_session=False)
        client.suppress_exceptions = True
        client.enable_logger(logging.getLogger("rackwatt.mqtt.paho"))
        client.max_inflight_messages_set(self.window + 2)
        client.reconnect_delay_set(*self._reconnect)
        if cfg.password_file is not None:
            try:
                password = read_secret(cfg.password_file)
            except SecretError as exc:
                raise MqttConfigError(f"mqtt.password_file: {exc}") from None
            client.username_pw_set(cfg.username or "", password)
        elif cfg.username:
            client.username_pw_set(cfg.username)
        if cfg.ca_file is not None:
            try:
                client.tls_set(ca_certs=str(cfg.ca_file),
                               certfile=str(cfg.cert_file) if cfg.cert_file else None,
                               keyfile=str(cfg.key_file) if cfg.key_file else None,
                               tls_version=ssl.PROTOCOL_TLS_CLIENT)
            except (OSError, ssl.SSLError, ValueError) as exc:
                raise MqttConfigError(
                    f"mqtt TLS files (ca_file={cfg.ca_file}, cert_file={cfg.cert_file}, "
                    f"key_file={cfg.key_file}): {exc}"
                ) from None
        self._set_will(client)
        client.on_connect = self._cb_connect
        client.on_connect_fail = self._cb_connect_fail
        client.on_disconnect = self._cb_disconnect
        client.on_publish = self._cb_publish
        client.on_message = self._cb_message
        return client

    async def start(self) -> None:
        """Start connecting in the background (a broker that is down is retried with backoff)."""
        self._loop = asyncio.get_running_loop()
        self._client = self._build_client()
        self._client.connect_async(self.cfg.host, self.cfg.port, keepalive=self.cfg.keepalive_s)
        self._client.loop_start()
        self._pump_task = asyncio.create_task(self._pump(), name="mqtt-pump")
        self._will_task = asyncio.create_task(self._keep_will_current(), name="mqtt-will")
        log.info("mqtt: connecting to %s (tls=%s, user=%s)", self.endpoint,
                 "on" if self.cfg.ca_file else "off", self.cfg.username or "-")

    # ---- paho thread → asyncio -------------------------------------------------------------
    def _hand_over(self, fn: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop is closing during shutdown
            loop.call_soon_threadsafe(fn, *args)

    def _cb_connect(self, client: Any, userdata: Any, flags: Any, reason_code: Any, properties: Any) -> None:
        self._sessions += 1  # before the hand-over: the pump waits for this session's _on_connect
        self._hand_over(self._on_connect, self._sessions, bool(reason_code.is_failure), str(reason_code),
                        int(getattr(reason_code, "value", 0)))

    def _cb_connect_fail(self, client: Any, userdata: Any) -> None:
        self._hand_over(self._on_connect_fail)

    def _cb_disconnect(
        self, client: Any, userdata: Any, flags: Any, reason_code: Any, properties: Any
    ) -> None:
        self._hand_over(self._on_disconnect, str(reason_code))

    def _cb_publish(self, client: Any, userdata: Any, mid: int, reason_code: Any, properties: Any) -> None:
        self._hand_over(self._on_puback, mid, bool(getattr(reason_code, "is_failure", False)))

    def _cb_message(self, client: Any, userdata: Any, message: Any) -> None:
        self._hand_over(self._on_inbound, str(message.topic), bytes(message.payload))

    # ---- asyncio side ----------------------------------------------------------------------
    def _next_delay_s(self) -> int:
        lo, hi = self._reconnect
        return int(min(hi, lo * 2 ** max(0, self.failures - 1)))

    def _attempt_failed(self) -> None:
        self._refresh_will()
        self.failures += 1
        self.connected = False

    def _on_connect(self, session: int, failed: bool, reason: str, code: int) -> None:
        self._session = session
        if failed:
            self._attempt_failed()
            hint = ""
            if code in (134, 135, 4, 5):  # bad user name or password / not authorized (v5 and v3 codes)
                who = self.cfg.username or "(none)"
                where = self.cfg.password_file or "(no password_file)"
                hint = f" — check mqtt.username ({who}) and mqtt.password_file ({where})"
            self.last_error = f"refused: {reason}"
            log.error("mqtt: broker %s refused the connection: %s%s; retrying in %d s",
                      self.endpoint, reason, hint, self._next_delay_s())
            return
        self.connected = True
        self.connects += 1
        self.failures = 0
        self.last_error = None
        self._session_started = time.monotonic()
        # QoS 0 messages still in the window were lost with the old session (paho drops unwritten
        # packets without an on_publish): they leave the window and the store sends them again
        for mid in self._inflight_qos0:
            self._inflight.pop(mid, None)
        self._inflight_qos0.clear()
        self._carried = set(self._inflight)  # paho resends these after this callback: they go first
        log.info("mqtt: connected to %s; %d message(s) waiting in the store", self.endpoint, len(self.store))
        client = self._client
        assert client is not None
        for topic in self._inbound:
            client.subscribe(topic, qos=1)
        self.publish_status()
        self._wake.set()

    def _set_will(self, client: mqtt.Client) -> None:
        self.will_seq = self.store.last_seq
        self._will_set_mono = time.monotonic()
        client.will_set(self.topics.status, self._offline_payload("lost"), qos=1, retain=True)

    def _refresh_will(self) -> None:
        """The next CONNECT carries a will with the current ``seq`` watermark."""
        if self._client is not None and not self._stopping:
            self._set_will(self._client)

    async def _keep_will_current(self) -> None:
        """Cycle the session when the broker's will lags ``seq`` (see the module docstring)."""
        step_s = max(0.05, min(5.0, self.will_refresh_s / 4))
        while not self._stopping:
            await asyncio.sleep(step_s)
            stale = self.store.last_seq > self.will_seq
            due = time.monotonic() - self._will_set_mono >= self.will_refresh_s
            if stale and due and self.connected and not self._inflight and not self._control_mids:
                try:
                    await self._cycle_session()
                except Exception:  # the session goes on with the older will
                    log.exception("mqtt: refreshing the last will failed")

    async def _cycle_session(self) -> None:
        client = self._client
        if client is None:
            return
        self._cycling = True
        self.connected = False  # the pump sends nothing into a session that is closing
        try:
            client.disconnect()  # clean: the broker discards the old will without publishing it
            await self._join_network_thread(client)
            if self._stopping:
                return
            self._set_will(client)
            client.connect_async(self.cfg.host, self.cfg.port, keepalive=self.cfg.keepalive_s)
            client.loop_start()
        finally:
            self._cycling = False
        log.debug("mqtt: session renewed so the last will carries seq %d", self.will_seq)

    async def _join_network_thread(self, client: mqtt.Client, timeout_s: float = 5.0) -> bool:
        """``loop_stop()`` joins paho's thread without a timeout: run it aside, wait bounded."""
        stopper = threading.Thread(target=client.loop_stop, name="mqtt-stop", daemon=True)
        stopper.start()
        deadline = time.monotonic() + timeout_s
        while stopper.is_alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return not stopper.is_alive()

    def _on_connect_fail(self) -> None:
        self._attempt_failed()
        if self.last_error is None or not self.last_error.startswith("tls:"):
            self.last_error = "unreachable"
        if self.failures & (self.failures - 1) == 0:  # 1, 2, 4, 8…: one line per doubling, not a flood
            if self.cfg.ca_file is not None and not self._diagnosing and self._loop is not None:
                self._diagnosing = True
                self._loop.create_task(self._report_connect_fail(self.failures, self._next_delay_s()))
            else:
                self._log_unreachable(self.failures, self._next_delay_s())

    def _log_unreachable(self, attempt: int, delay_s: int) -> None:
        log.warning("mqtt: cannot reach broker %s (attempt %d); spooling to disk, retrying in %d s",
                    self.endpoint, attempt, delay_s)

    async def _report_connect_fail(self, attempt: int, delay_s: int) -> None:
        """With TLS on, say why the handshake fails (paho does not tell); else "cannot reach"."""
        cfg = self.cfg
        assert cfg.ca_file is not None
        try:
            reason = await asyncio.to_thread(tls_failure, cfg.host, cfg.port, cfg.ca_file, cfg.cert_file,
                                             cfg.key_file)
        except Exception as exc:  # the diagnosis must never take the publisher down
            reason = None
            log.debug("mqtt: TLS diagnosis failed: %s", exc)
        finally:
            self._diagnosing = False
        if reason is None:
            self._log_unreachable(attempt, delay_s)
            return
        self.last_error = f"tls: {reason}"
        log.error("mqtt: TLS connection to broker %s failed (attempt %d): %s; spooling to disk, "
                  "retrying in %d s", self.endpoint, attempt, reason, delay_s)

    def _on_disconnect(self, reason: str) -> None:
        was = self.connected
        self.connected = False
        if self._cycling or self._stopping:
            return
        self._refresh_will()
        if not was:
            return
        self._note_session_end(reason)
        if self.takeover_suspected:
            return  # said once per doubling in _note_session_end; not one warning per takeover
        log.warning("mqtt: lost connection to %s (%s); spooling to disk until it is back", self.endpoint,
                    reason)
        self.last_error = f"disconnected: {reason}"

    def _note_session_end(self, reason: str) -> None:
        """Spot another client with our client id: the broker closes each session right away."""
        now = time.monotonic()
        started = self._session_started
        lasted_s = now - started if started is not None else float("inf")
        short_s = min(float(self.cfg.keepalive_s), 2.0 * self._reconnect[0] + 1.0)
        if lasted_s < short_s:  # MQTT 3.1.1 gives no reason (no "session taken over"): timing tells
            self._short_sessions += 1
            self._short_ends.append(now)
        else:
            self._short_sessions = 0
            self._short_ends.clear()
            self.takeover_suspected = False
        n = self._short_sessions
        # a fight is back to back: the short sessions follow each other within one reconnect delay
        # each; short sessions spread out in time are a flaky link or a restarting broker instead
        ends = self._short_ends
        if len(ends) == TAKEOVER_SHORT_SESSIONS and ends[-1] - ends[0] <= TAKEOVER_SHORT_SESSIONS * short_s:
            self.takeover_suspected = True
            self.last_error = f"client id {self.client_id!r} in use by another client"
            if n & (n - 1) == 0 or n == TAKEOVER_SHORT_SESSIONS:
                log.error("mqtt: broker %s closed our session right after connecting %d times in a row "
                          "(%s): another agent uses client id %r; give each agent its own mqtt.client_id "
                          "(or a distinct agent.site/agent.rack)", self.endpoint, n, reason, self.client_id)

    def _on_puback(self, mid: int, failed: bool) -> None:
        waiter = self._control_mids.pop(mid, None)
        if waiter is not None:
            if not waiter.done():
                waiter.set_result(None)
            return
        seq = self._inflight.pop(mid, None)
        if seq is None:
            return
        self._carried.discard(mid)
        self._inflight_qos0.discard(mid)
        if failed:
            log.warning("mqtt: broker rejected message seq %d; it stays in the store", seq)
        else:
            self.store.ack(seq)
            self.published += 1
        self._wake.set()

    def _on_inbound(self, topic: str, payload: bytes) -> None:
        handler = self._inbound.get(topic)
        if handler is None:
            return
        try:
            handler(payload)
        except Exception:  # a bad inbound message must never stop the agent
            log.exception("mqtt: handling a message on %s failed", topic)

    # ---- publishing ------------------------------------------------------------------------
    def wake(self) -> None:
        """The store has a new message: send it if the window and the connection allow."""
        self._wake.set()

    async def _pump(self) -> None:
        while not self._stopping:
            await self._wake.wait()
            self._wake.clear()
            try:
                self._fill_window()
            except Exception:  # keep pumping; the store still holds everything
                log.exception("mqtt: sending from the store failed")

    def _fill_window(self) -> None:
        client = self._client
        if client is None or not self.connected or not self._may_send_newer(client):
            return
        room = self.window - len(self._inflight)
        if room <= 0:
            return
        for record in self.store.pending(room, exclude=self._inflight.values()):
            seq = record.seq
            payload = record.payload
            if self._clock() - record.created > self.delayed_after_s:
                payload = {**payload, "delayed": True}
            data = payload_json(payload)
            info = client.publish(record.topic, data, qos=record.qos, retain=record.retain)
            if info.rc not in (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_NO_CONN):
                log.warning("mqtt: client refused seq %d (%s); retrying later", seq,
                            mqtt.error_string(info.rc))
                return
            if record.qos == 0 and info.rc == mqtt.MQTT_ERR_SUCCESS and info.is_published():
                self.store.ack(seq)
                self._wake.set()  # no PUBACK will come to wake the pump for the next ones
                continue
            self._inflight[info.mid] = seq
            if record.qos == 0:
                self._inflight_qos0.add(info.mid)

    def _may_send_newer(self, client: mqtt.Client) -> bool:
        """Nothing newer than what paho carried over may pass it (see "Order" in the module docstring).

        ``connected`` is the asyncio side's view, which lags paho's thread: between connections
        (a PUBLISH could go out on the new socket before the resends) and in a CONNACK whose
        ``_on_connect`` is still queued (the resends are being queued right then) it is stale.
        """
        return not self._carried and self._session == self._sessions and client.is_connected()

    def _status_payload(self) -> dict[str, Any]:
        try:
            body = dict(self._status_fn())
        except Exception:
            log.exception("mqtt: building the status failed; publishing a minimal one")
            body = {}
        body["mqtt"] = {**body.get("mqtt", {}), "connects": self.connects}
        return {**self._status_head("online"), **body}

    def _offline_payload(self, reason: str) -> str:
        return payload_json({**self._status_head("offline"), "reason": reason, "ts": self._clock()})

    def _status_head(self, state: str) -> dict[str, Any]:
        """What every status says first; ``seq`` is the last data seq, so a tail loss shows."""
        return {
            "v": SCHEMA_VERSION,
            "type": "status",
            "state": state,
            "seq": self.store.last_seq,
            "site": self.site,
            "rack": self.rack,
            "version": self.version,
        }

    def publish_status(self) -> asyncio.Future[None] | None:
        """Publish the retained ``online`` status now (only while connected: it is not spooled)."""
        client = self._client
        if client is None or not self.connected:
            return None
        try:
            data = payload_json(self._status_payload())
        except (ValueError, TypeError) as exc:
            log.error("mqtt: status payload is not valid JSON (%s); not published", exc)
            return None
        info = client.publish(self.topics.status, data, qos=1, retain=True)
        return self._await_mid(info)

    def _await_mid(self, info: mqtt.MQTTMessageInfo) -> asyncio.Future[None] | None:
        if info.rc not in (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_NO_CONN) or self._loop is None:
            return None
        fut: asyncio.Future[None] = self._loop.create_future()
        self._control_mids[info.mid] = fut
        return fut

    def stats(self) -> dict[str, Any]:
        return {
            "connected": self.connected,
            "endpoint": self.endpoint,
            "connects": self.connects,
            "published": self.published,
            "inflight": len(self._inflight),
            "last_error": self.last_error,
        }

    async def stop(self, timeout_s: float = 3.0) -> None:
        """Send what can be sent in ``timeout_s``, publish ``offline`` (retained), disconnect cleanly."""
        client = self._client
        if client is None:
            return
        if self.connected:
            deadline = time.monotonic() + timeout_s
            while len(self.store) and time.monotonic() < deadline:  # the store drains
                self._wake.set()
                await asyncio.sleep(0.05)
            info = client.publish(self.topics.status, self._offline_payload("shutdown"), qos=1, retain=True)
            fut = self._await_mid(info)
            if fut is not None:
                try:
                    await asyncio.wait_for(fut, timeout=min(2.0, timeout_s))
                except TimeoutError:
                    log.warning("mqtt: broker did not acknowledge the offline status in time")
        self._stopping = True
        self._wake.set()
        for task in (self._pump_task, self._will_task):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        client.disable_logger()  # paho logs a spurious "not connected" error while its thread winds down
        client.disconnect()
        if not await self._join_network_thread(client):
            log.warning("mqtt: the network thread did not stop within 5 s; leaving it behind")
        self._client = None
        log.info("mqtt: disconnected from %s; %d message(s) left in the store", self.endpoint,
                 len(self.store))
