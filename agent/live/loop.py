"""The live agent: drivers → one frame per tick → engine → outbox → store → publisher.

``LiveAgent`` owns the parts' lifecycle, state saves, systemd notification, SIGHUP reload and a
clean stop. Time comes from an injected ``Clock`` and every part can be injected, so ``rackwatt
demo``, ``rackwatt record`` and the benchmarks run this very loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent import __version__
from agent.config.model import Config
from agent.live import reload_ack, sdnotify
from agent.live.accept import parse_accept
from agent.live.clock import Clock, WallClock, sleep_unless
from agent.live.engine_link import EngineLink
from agent.live.frames import FrameBuilder, Row
from agent.live.outbox import MessageObserver, Outbox
from agent.live.poller import Poller
from agent.live.publisher import MqttPublisher
from agent.live.status import AgentTally, health_signature
from agent.live.store import Store, StoreError
from agent.live.topics import Topics
from agent.metrics import serve_metrics
from agent.metrics.snapshot import active_drift_list
from agent.trace.model import TraceChunk
from drivers.base import Driver

log = logging.getLogger("rackwatt.agent")

DriverFactory = Callable[[Config], list[Driver]]
FrameSink = Callable[[TraceChunk], None]

ENGINE_STATE = "engine"  # the engine's row in the store
HEALTH_CHECK_S = 5.0  # how often a change of device health is looked for (it then publishes status)


def _connection(config: Config) -> tuple[Any, ...]:
    """What a reload must reconnect MQTT for (not the summary interval or the spool size)."""
    mq = dataclasses.replace(config.mqtt, summary_interval_s=0.0, spool_max_mb=0.0)
    return (mq, config.agent.site, config.agent.rack, config.stages.mqtt_hints)


def _load_config_file(path: Path) -> Config:
    from agent.config.loader import load_config

    return load_config(path)


def default_driver_factory(config: Config) -> list[Driver]:
    gpu_nodes = config.dcgms or config.nodes
    if not config.pdus and not config.cracs and not config.nvml.enabled and not gpu_nodes:
        return []
    from drivers.registry import build_drivers

    return list(build_drivers(config))


class LiveAgent:
    """One rack agent. ``await run()`` until ``request_stop()``; ``request_reload()`` on SIGHUP.

    How ``rackwatt demo`` (or a test) builds one with its own devices and an accelerated clock::

        agent = LiveAgent(config, clock=ScaledClock(60), driver_factory=lambda cfg: demo_drivers,
                          on_message=view.message,      # (kind, topic, payload with seq): what is published
                          frame_sinks=[view.frame])     # every tick's TraceChunk row
        await agent.run()                               # agent.status_body() for the status view

    With ``config.mqtt.enabled = False`` nothing is stored for sending; ``on_message`` still sees
    every message that would have been published, numbered by the store.
    """

    def __init__(
        self,
        config: Config,
        *,
        config_path: Path | None = None,
        clock: Clock | None = None,
        driver_factory: DriverFactory = default_driver_factory,
        engine: EngineLink | bool | None = True,  # True: build from config; False/None: no engine
        on_message: MessageObserver | None = None,
        frame_sinks: list[FrameSink] | None = None,
        save_interval_s: float = 300.0,
        status_interval_s: float | None = None,
        baseline_interval_s: float | None = None,
        config_loader: Callable[[Path], Config] | None = None,
        publisher_options: dict[str, Any] | None = None,
        engine_batch_s: float = 15.0,
    ) -> None:
        self.config = config
        self.config_path = config_path or config.source
        self.clock: Clock = clock or WallClock()
        self.driver_factory = driver_factory
        self._engine_arg = engine
        self.engine: EngineLink | None = None
        self.on_message = on_message
        self.frame_sinks = list(frame_sinks or [])
        self.save_interval_s = save_interval_s
        # heartbeat of the retained status; a change of device health is published within HEALTH_CHECK_S
        self.status_interval_s = status_interval_s or 600.0
        self._baseline_interval_s = baseline_interval_s
        self._config_loader = config_loader or _load_config_file
        self._publisher_options = dict(publisher_options or {})
        self.poller: Poller | None = None
        self.store: Store | None = None
        self.outbox: Outbox | None = None
        self.publisher: MqttPublisher | None = None
        self.timeline: Any = None
        self.node_timelines: Any = None  # per-node stage hints (agent.stages.timeline.NodeTimelines)
        self.intake: Any = None
        self._listener: Any = None
        self._wake = asyncio.Event()
        self._stop_requested = False
        self._reload_requested = False
        self.frames = FrameBuilder()
        self.engine_batch_s = engine_batch_s
        self.started_ts = 0.0
        self.ticks = 0
        self.tally = AgentTally()
        self._save_failing = False
        self.stage_now: Any = None
        self._last_health: tuple[Any, ...] = ()

    # ---- control (safe from signal handlers) -----------------------------------------------
    def request_stop(self) -> None:
        self._stop_requested = True
        self._wake.set()

    def request_reload(self) -> None:
        self._reload_requested = True
        self._wake.set()

    # ---- derived settings ------------------------------------------------------------------
    @property
    def baseline_interval_s(self) -> float:
        return self._baseline_interval_s or max(900.0, 5 * self.config.mqtt.summary_interval_s)

    # ---- setup -----------------------------------------------------------------------------
    def _build_engine(self) -> None:
        """The engine, on from the stored state if that fits; else it is set aside (never a crash loop)."""
        if self._engine_arg is True:
            self.engine = EngineLink.from_config(self.config)
        else:
            self.engine = self._engine_arg if isinstance(self._engine_arg, EngineLink) else None
        if self.engine is None or self.store is None:
            return
        blob = self.store.load_state(ENGINE_STATE)
        if blob is None:
            return
        try:
            self.engine.restore(blob)
        except Exception as exc:
            self.store.quarantine_state(ENGINE_STATE, f"{type(exc).__name__}: {exc}")
            return
        log.info("engine: state restored from %s", self.store.path)

    def _open_store(self, seq_floor: int | None = None) -> Store:
        max_bytes = int(self.config.mqtt.spool_max_mb * 1024 * 1024)
        state_dir = Path(self.config.agent.state_dir)
        return Store.open(state_dir, max_bytes, clock=self.clock.time, seq_floor=seq_floor)

    def _build_outbox(self, store: Store) -> Outbox:
        c = self.config
        topics = Topics.for_rack(c.mqtt.topic_root, c.agent.site, c.agent.rack)
        return Outbox(topics, store, site=c.agent.site, rack=c.agent.rack, qos=c.mqtt.qos,
                      keep=c.mqtt.enabled, on_stored=self._wake_publisher, observe=self._observe)

    def _wake_publisher(self) -> None:
        if self.publisher is not None:
            self.publisher.wake()

    def _observe(self, kind: str, topic: str, payload: dict[str, Any]) -> None:
        if self.on_message is not None:
            self.on_message(kind, topic, payload)

    def _build_stages(self) -> None:
        from agent.stages.timeline import NodeTimelines, StageTimeline

        self.timeline = StageTimeline(ttl_s=self.config.stages.hint_ttl_s)
        self.node_timelines = NodeTimelines(self.timeline)
        self._build_intake()

    async def _start_listener(self) -> None:
        from agent.stages.listener import HintListener

        st = self.config.stages
        if st.socket_path is None and st.udp_port is None:
            return
        listener = HintListener(self.intake, st.socket_path, st.udp_port)
        try:
            await listener.start()
        except OSError as exc:
            log.error(
                "stage hints: cannot open the hint socket (socket_path=%s, udp_port=%s): %s; "
                "hints from the MQTT topic still work",
                st.socket_path,
                st.udp_port,
                exc,
            )
            await listener.stop()
            return
        self._listener = listener

    async def _stop_listener(self) -> None:
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None

    async def _start_publisher(self) -> None:
        """A publisher for the current configuration, connecting; none with MQTT off."""
        mq = self.config.mqtt
        self.publisher = None
        if not mq.enabled or self.store is None:
            return
        self.publisher = MqttPublisher(mq, self.config.agent.site, self.config.agent.rack, self.store,
                                       version=__version__, status_fn=self.status_body,
                                       on_hint=self._on_mqtt_hint if self.config.stages.mqtt_hints else None,
                                       on_accept=self._on_mqtt_accept, clock=self.clock.time,
                                       **self._publisher_options)
        await self.publisher.start()

    # ---- the main loop ---------------------------------------------------------------------
    async def run(self) -> int:
        """Run until stopped; returns the process exit status."""
        self.started_ts = self.clock.time()
        self._wake = asyncio.Event()
        drivers = self.driver_factory(self.config)
        self.poller = Poller(drivers, self.clock)
        if self.config.mqtt.enabled or self._engine_arg not in (False, None):
            # nothing to number, keep or restore without MQTT and an engine (``rackwatt record``)
            self.store = self._open_store()
            self.outbox = self._build_outbox(self.store)
        self._build_engine()
        self._build_stages()
        await self._start_publisher()
        await self._start_listener()
        self.poller.start()
        log.info("rackwatt %s: rack %s/%s, %d device(s), tick %g s, mqtt %s", __version__,
                 self.config.agent.site, self.config.agent.rack, len(drivers), self.config.agent.tick_s,
                 self.publisher.endpoint if self.publisher else "off")
        if not self.config.nvml.enabled and not self.config.dcgms and not self.config.nodes:
            log.warning(
                "no GPU telemetry source ([nvml] disabled, no [[dcgm]] or [[node]] nodes): predictions "
                "come from stages and work rate; power_chain and gpu_hardware detection are off"
            )
        sdnotify.ready(f"polling {len(drivers)} device(s)")
        try:
            async with serve_metrics(self):
                await self._tick_loop()
        finally:
            await self._shutdown()
        return 0

    async def _tick_loop(self) -> None:
        now = self.clock.time()
        next_tick = now + self.config.agent.tick_s
        next_status = now + self.status_interval_s
        next_health_check = now + HEALTH_CHECK_S
        next_baselines = now + min(self.baseline_interval_s, 60.0)
        next_summary = now + self.config.mqtt.summary_interval_s
        next_save = time.monotonic() + self.save_interval_s
        wd_interval = sdnotify.watchdog_interval_s()
        next_wd = time.monotonic()
        while not self._stop_requested:
            await self._sleep_until(next_tick)
            if self._stop_requested:
                break
            if self._reload_requested:
                self._reload_requested = False
                await self._reload()
            now = self.clock.time()
            if now < next_tick:
                continue  # woken early (reload)
            next_tick = max(next_tick + self.config.agent.tick_s, now)
            published_summary = self._tick(now)
            if published_summary:
                next_summary = now + self.config.mqtt.summary_interval_s
            elif now >= next_summary:
                self._emit_engine_summary(now)
                next_summary = now + self.config.mqtt.summary_interval_s
            if now >= next_baselines:
                self._emit_baselines(now)
                next_baselines = now + self.baseline_interval_s
            if now >= next_health_check:
                next_health_check = now + HEALTH_CHECK_S
                if health_signature(self.poller, self.engine, self.tally) != self._last_health:
                    next_status = now  # a device failed or recovered: say so now
            if now >= next_status:
                self._last_health = health_signature(self.poller, self.engine, self.tally)
                self._refresh_status()
                next_status = now + self.status_interval_s
            mono = time.monotonic()
            if mono >= next_save:
                self._save_state()
                next_save = mono + self.save_interval_s
            if wd_interval is not None and mono >= next_wd:
                sdnotify.watchdog()
                next_wd = mono + wd_interval

    async def _sleep_until(self, t: float) -> None:
        """Sleep on the agent's clock until ``t``, or until a stop or reload request."""
        remaining = t - self.clock.time()
        if remaining <= 0:
            await asyncio.sleep(0)
            return
        self._wake.clear()
        if not (self._stop_requested or self._reload_requested):
            await sleep_unless(self.clock, remaining, self._wake)

    def make_row(self, ts: float, signals: dict[str, float]) -> Row:
        """The row for one tick: fresh samples plus the stage the timeline says now."""
        now = self.timeline.current(ts) if self.timeline is not None else None
        self.stage_now = now
        if now is None:
            return Row(ts, signals, "", "", math.nan)
        return Row(ts, signals, now.stage, now.job or "", float(now.work_rate))

    def _tick(self, ts: float) -> bool:
        """Build one row, hand it to the sinks, feed the engine every batch; True if it summarised."""
        assert self.poller is not None
        self.ticks += 1
        row = self.make_row(ts, self.poller.take_new())
        self.frames.add(row)
        if self.frame_sinks:
            frame = self.frames.chunk([row])
            for sink in self.frame_sinks:
                try:
                    sink(frame)
                except Exception:
                    log.exception("frame sink failed")
        if ts - self.frames.first_ts + self.config.agent.tick_s * 0.5 < self.engine_batch_s:
            return False
        return self._feed_engine()

    def ask_engine(self, what: str, call: Callable[[EngineLink], Any]) -> Any:
        """``call(engine)``; None without an engine or when it fails (tallied: the agent runs on)."""
        if self.engine is None:
            return None
        try:
            return call(self.engine)
        except Exception as exc:
            self.tally.engine_failed(what, exc)
            return None

    def _feed_engine(self) -> bool:
        if not len(self.frames):
            return False
        chunk = self.frames.take_chunk()
        if self.engine is not None and self.node_timelines is not None:  # each node's own hints
            self.engine.use_node_hints(self.node_timelines.labels_at)
        return self._send_reports(self.ask_engine("process", lambda e: e.process(chunk)) or [])

    # ---- outputs ---------------------------------------------------------------------------
    def _send_reports(self, reports: list[dict[str, Any]]) -> bool:
        return self.outbox.reports(reports) if self.outbox is not None else False

    def _emit_engine_summary(self, ts: float) -> None:
        payload = self.ask_engine("summary_payload", lambda e: e.summary_payload(ts))
        if payload and self.outbox is not None:
            self.outbox.send("summary", payload)

    def _emit_baselines(self, ts: float) -> None:
        baselines = self.ask_engine("baseline_payloads", lambda e: e.baseline_payloads(ts))
        if baselines and self.outbox is not None:
            self.outbox.baselines(baselines)

    def status_body(self) -> dict[str, Any]:
        """The ``online`` status fields the publisher wraps (agent/schemas/status.schema.json)."""
        now, engine, tally = self.clock.time(), self.engine, self.tally
        body: dict[str, Any] = {
            "ts": now,
            "started": self.started_ts,
            "uptime_s": round(max(0.0, now - self.started_ts), 1),
            "devices": self.poller.health_dict() if self.poller else {},
            "engine": {
                "ok": engine is not None and tally.engine_errors == 0,
                "errors": tally.engine_errors,
                "last_error": tally.last_engine_error,
            },
            "reloads": {"ok": tally.reloads, "rejected": tally.reload_failures},
        }
        caps = engine.capabilities() if engine is not None else None
        if caps is not None:
            body["capabilities"] = caps
        if self.store is not None:
            body["spool"] = self.store.stats()
        if self.intake is not None:
            body["hints"] = dict(self.intake.counters)
        # active drifts, so a watcher that missed the onset event still sees them (rackwatt watch)
        body["drifts"] = active_drift_list(engine.engine if engine is not None else None)
        stage = self.stage_now
        if stage is not None:
            body["stage"] = {"stage": stage.stage, "source": stage.source, "job": stage.job}
        if self.poller is not None and self.config.nodes:  # the node link: which node sends, which is silent
            from agent.node.source import node_link_status

            link = node_link_status(self.poller.drivers)
            if link is not None:
                body["node_link"] = link
        return body

    def _refresh_status(self) -> None:
        devices = self.poller.health_dict() if self.poller else {}
        ok = sum(1 for h in devices.values() if h["ok"])
        mqtt_state = "off"
        if self.publisher is not None:
            self.publisher.publish_status()
            mqtt_state = "connected" if self.publisher.connected else "unreachable"
        pending = len(self.store) if self.store is not None else 0
        sdnotify.status(f"{ok}/{len(devices)} devices ok; mqtt {mqtt_state}; {pending} message(s) spooled")

    # ---- inbound ---------------------------------------------------------------------------
    def _on_mqtt_hint(self, data: bytes) -> None:
        if self.intake is not None:
            self.intake.receive(data, "mqtt", "broker")

    def _on_mqtt_accept(self, data: bytes) -> None:
        try:
            cause, by = parse_accept(data)
        except ValueError as exc:
            log.warning("mqtt cmd/accept: ignored: %s", exc)
            return
        self._accept(cause, by)

    def _on_command(self, command: Any) -> None:
        if command.name == "accept":
            self._accept(command.cause or "all", "operator")
        else:
            log.warning("stage hints: unknown command %r ignored", command.name)

    def _accept(self, cause: str, by: str) -> None:
        if self.engine is None:
            log.warning("accept %s from %s: no engine running", cause, by)
            return
        try:
            events = self.engine.accept(cause, self.clock.time(), by)
        except Exception as exc:
            log.warning("accept %s from %s: %s", cause, by, exc)
            return
        log.info("accept: %s accepted as the new normal by %s", cause or "(all)", by)
        self._send_reports([{"type": "event", **e} if "type" not in e else e for e in events])

    # ---- state, reload, shutdown -----------------------------------------------------------
    def _save_state(self) -> None:
        if self.store is None:
            return
        blob = self.ask_engine("serialising its state", lambda e: e.state_bytes())
        if blob is None:
            return
        try:
            self.store.save_state(ENGINE_STATE, blob)
        except StoreError as exc:  # a store problem, not the engine's: said once until a save works
            if not self._save_failing:
                log.error("state: %s; retrying at every save", exc)
            self._save_failing = True
            return
        if self._save_failing:
            log.info("state: saved again to %s", self.store.path)
        self._save_failing = False

    async def _move_store(self) -> None:
        """``state_dir`` changed by reload: state, pending messages and ``seq`` move with it."""
        old = self.store
        if old is None:
            return
        new = self._open_store(seq_floor=old.next_seq)
        new.take_over(old)
        self.store = new
        self.outbox = self._build_outbox(new)
        if self.publisher is not None:
            self.publisher.store = new
        self._save_state()
        old.close()
        log.info("reload: state_dir is now %s; seq continues at %d", new.path, new.next_seq)

    async def _reload(self) -> None:
        path = self.config_path
        if path is None:
            log.error("reload: no configuration file to reload from")
            reload_ack.report(False, "no configuration file to reload from")
            return
        from drivers.registry import gpu_nodes

        sdnotify.reloading()
        try:
            try:
                new = await asyncio.to_thread(self._config_loader, Path(path))
                drivers = self.driver_factory(new)
            except Exception as exc:
                self.tally.reload_failures += 1
                reload_ack.reject(Path(path), exc, log)
                return
            old, self.config = self.config, new
            assert self.poller is not None
            await self.poller.stop()
            self.poller = Poller(drivers, self.clock)
            self.poller.start()
            if new.agent.state_dir != old.agent.state_dir:
                await self._move_store()
            if self.store is not None:
                self.store.max_bytes = int(new.mqtt.spool_max_mb * 1024 * 1024)
                self.outbox = self._build_outbox(self.store)  # topics, qos, mqtt on/off
            if _connection(new) != _connection(old):
                if self.publisher is not None:
                    await self.publisher.stop()
                await self._start_publisher()
            if new.stages != old.stages or gpu_nodes(new) != gpu_nodes(old):  # a node's hints need its ring
                await self._stop_listener()
                self.timeline.ttl_s = new.stages.hint_ttl_s
                self._build_intake()
                await self._start_listener()
            if new.engine != old.engine:
                log.warning(
                    "reload: [engine] settings change at the next restart (the learned state is kept)"
                )
            self.tally.reloads += 1
            log.info("reload: %s applied: %d device(s)", path, len(drivers))
            reload_ack.report(True, f"{path} applied: {len(drivers)} device(s)")
        finally:
            sdnotify.ready()

    def _build_intake(self) -> None:
        """The hint intake on the current timelines, with a ring for each GPU node now listed."""
        from agent.stages.energy_query import engine_answerer
        from agent.stages.intake import HintIntake
        from agent.stages.listener import command_policy
        from drivers.registry import gpu_nodes

        self.node_timelines = self.node_timelines.for_nodes(node for node, _ in gpu_nodes(self.config))
        self.intake = HintIntake(
            self.timeline,
            nodes=self.node_timelines,
            rate_limit_per_s=self.config.stages.rate_limit_per_s,
            on_command=self._on_command,
            clock=self.clock.time,
            command_policy=command_policy(self.config.stages),
            on_query=engine_answerer(lambda: self.engine, self.clock.time),  # rackwatt_client windows
        )

    async def _shutdown(self) -> None:
        """Each step bounded and independent: one that fails must not skip the others."""
        sdnotify.stopping()
        log.info("stopping: saving state and publishing offline")
        steps: list[tuple[str, Any]] = []
        if self.poller is not None:
            steps.append(("closing devices", self.poller.stop()))
        steps.append(("closing hint sockets", self._stop_listener()))
        for what, step in steps:
            try:
                await asyncio.wait_for(step, timeout=10)
            except Exception as exc:
                log.error("stopping: %s failed: %s", what, exc)
        self._feed_engine()  # the rows of the last partial batch
        self._save_state()
        if self.publisher is not None:
            try:
                await asyncio.wait_for(self.publisher.stop(), timeout=15)
            except Exception as exc:
                log.error("stopping: mqtt shutdown failed: %s", exc)
        if self.store is not None:
            self.store.close()
        log.info("stopped")
