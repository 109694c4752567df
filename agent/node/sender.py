"""``NodeAgent``: ``rackwatt run`` with ``[agent] role = "node"`` on a GPU node.

Every ``[uplink] interval_s`` it reads the node's GPUs through the NVML driver and sends one signed
datagram (``agent.node.wire``) to the rack agent over UDP. Why UDP straight to the gateway, not the
site broker or TCP: the rack keeps its GPU telemetry while the broker is down; a node that restarts
costs nothing on either side (no connection, no backoff); a lost datagram loses no energy
(``energy_j`` is cumulative). No engine, no MQTT, no state beyond the session number; SIGHUP
re-reads the configuration (gateway, key, interval).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.config.model import Config
from agent.config.secrets import SecretError, read_secret
from agent.live import reload_ack, sdnotify
from agent.live.clock import Clock, WallClock, sleep_unless
from agent.live.logsetup import worth_logging
from agent.live.poller import guarded_poll
from agent.node import wire
from agent.node.config import UplinkSection
from drivers.base import Driver, PollResult

log = logging.getLogger("rackwatt.node")

SESSION_FILE = "node.session"
RESOLVE_EVERY_S = 60.0  # the gateway's name is looked up again this often (a moved gateway is found)


class NodeSetupError(Exception):
    """What keeps a node agent from starting (its key cannot be read); the message says which file."""


def next_session(state_dir: Path, now_us: int) -> int:
    """A session number above every earlier one of this node: the wall clock in µs, or the stored
    number + 1 when the clock is behind it (stepped back, RTC lost). Stored before first use."""
    path = Path(state_dir) / SESSION_FILE
    try:
        stored = int(path.read_text().strip() or 0)
    except (OSError, ValueError):
        stored = 0
    session = max(now_us, stored + 1)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{session}\n")
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("node: cannot store the session number in %s (%s); a restart with the clock set back "
                    "would be refused by the rack as a replay", path, exc.strerror or exc)
    return session


def ordinals(signals: dict[str, float], gpus: tuple[int, ...] | None) -> dict[int, dict[str, float]]:
    """``gpu.<nvml index>.<field>`` → ordinal → field: the ordinal is the GPU's place among the
    configured ``[nvml] gpus`` (its NVML index when all are read), so the rack's numbering stays
    put when one GPU is lost."""
    place = {index: n for n, index in enumerate(gpus)} if gpus is not None else None
    out: dict[int, dict[str, float]] = {}
    for name, value in signals.items():
        _, index_text, field = name.split(".", 2)
        if field not in wire.FIELDS:
            continue
        index = int(index_text)
        ordinal = place.get(index) if place is not None else index
        if ordinal is not None:
            out.setdefault(ordinal, {})[field] = value
    return out


class NodeAgent:
    """One node's uplink. ``await run()`` until ``request_stop()``; ``request_reload()`` on SIGHUP."""

    def __init__(self, config: Config, *, clock: Clock | None = None, driver: Driver | None = None,
                 config_loader: Callable[[Path], Config] | None = None) -> None:
        if config.uplink is None:
            raise NodeSetupError('role = "node" needs an [uplink] section')
        self.config = config
        self.uplink: UplinkSection = config.uplink
        self.clock: Clock = clock or WallClock()
        self._driver = driver
        self._config_loader = config_loader
        self.key = self._read_key(self.uplink)
        self.session = 0
        self.seq = 0
        self.sent = 0
        self.bytes_sent = 0
        self.send_errors = 0
        self.poll_failures = 0
        self._stop = asyncio.Event()
        self._reload_requested = False
        self._addr: tuple[Any, ...] | None = None
        self._resolved_at = -RESOLVE_EVERY_S
        self._sock: socket.socket | None = None

    @staticmethod
    def _read_key(uplink: UplinkSection) -> bytes:
        try:
            return read_secret(uplink.key_file).encode("utf-8")
        except SecretError as exc:
            raise NodeSetupError(f"uplink.key_file: {exc}") from None

    def request_stop(self) -> None:
        self._stop.set()

    def request_reload(self) -> None:
        self._reload_requested = True

    def _build_driver(self) -> Driver:
        if self._driver is not None:
            return self._driver
        from drivers.nvml_gpu.driver import NvmlGpuDriver

        return NvmlGpuDriver(self.config.nvml)

    async def run(self) -> int:
        up = self.uplink
        self.session = next_session(self.config.agent.state_dir, time.time_ns() // 1000)
        driver = self._build_driver()
        log.info("rackwatt node '%s': GPUs every %g s → %s:%d (session %d)", up.node_id, up.interval_s,
                 up.gateway, up.port, self.session)
        sdnotify.ready(f"sending to {up.gateway}:{up.port}")
        wd_interval = sdnotify.watchdog_interval_s()
        next_wd = time.monotonic()
        next_at = self.clock.time()
        try:
            while not self._stop.is_set():
                if self._reload_requested:
                    self._reload_requested = False
                    await self._reload()
                read_ts = self.clock.time()  # the node's own clock (the driver stamps wall time)
                result = await self._poll(driver)
                await self._send(result, read_ts)
                if wd_interval is not None and time.monotonic() >= next_wd:
                    sdnotify.watchdog()
                    next_wd = time.monotonic() + wd_interval
                next_at += self.uplink.interval_s
                now = self.clock.time()
                if next_at < now:  # overran (NVML slow): skip the missed slots, never burst
                    next_at = now + self.uplink.interval_s * 0.5
                await sleep_unless(self.clock, next_at - now, self._stop)
        finally:
            sdnotify.stopping()
            await driver.close()
            if self._sock is not None:
                self._sock.close()
            log.info("node '%s': stopped after %d datagram(s)", up.node_id, self.sent)
        return 0

    async def _poll(self, driver: Driver) -> PollResult:
        result = await guarded_poll(driver, max(2.0, 0.8 * self.uplink.interval_s), self.clock.time)
        if not result.ok:
            self.poll_failures += 1
            if worth_logging(self.poll_failures):
                log.warning("%s (failed %d time(s))", result.error, self.poll_failures)
        elif self.poll_failures:
            log.info("nvml: answering again after %d failed poll(s)", self.poll_failures)
            self.poll_failures = 0
        return result

    async def _send(self, result: PollResult, read_ts: float) -> None:
        """One datagram with what was read (none of the GPUs when NVML failed: the rack then knows
        the node is alive and its GPUs are missing, not that the node is gone)."""
        self.seq += 1
        reading = wire.NodeReading(
            node_id=self.uplink.node_id, session=self.session, seq=self.seq, read_ts=read_ts,
            sent_ts=self.clock.time(), gpus=ordinals(result.signals, self.config.nvml.gpus),
            energy_estimated=any(name.endswith(".energy_j") for name in result.estimated))
        try:
            data = wire.encode(reading, self.key)
        except wire.WireError as exc:
            self._send_failed(f"cannot encode: {exc}")
            return
        addr = await self._gateway()
        if addr is None or self._sock is None:
            return
        try:
            self._sock.sendto(data, addr)
        except OSError as exc:  # no route, ICMP refused from an earlier datagram, buffer full
            self._send_failed(f"sending to {self.uplink.gateway}:{self.uplink.port}: {exc.strerror or exc}")
            return
        self.sent += 1
        self.bytes_sent += len(data)

    async def _gateway(self) -> tuple[Any, ...] | None:
        """The gateway's address (looked up again every minute), with a socket of its family."""
        mono = time.monotonic()
        if self._addr is not None and mono - self._resolved_at < RESOLVE_EVERY_S:
            return self._addr
        up = self.uplink
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(up.gateway, up.port, type=socket.SOCK_DGRAM)
        except OSError as exc:
            self._send_failed(f"cannot resolve gateway {up.gateway!r}: {exc}")
            return self._addr
        family, _, _, _, addr = infos[0]
        if self._sock is None or self._sock.family != family:
            if self._sock is not None:
                self._sock.close()
            self._sock = socket.socket(family, socket.SOCK_DGRAM)
            self._sock.setblocking(False)
        self._addr, self._resolved_at = addr, mono
        return addr

    def _send_failed(self, why: str) -> None:
        self.send_errors += 1
        if worth_logging(self.send_errors):
            log.warning("node '%s': %s (%d time(s))", self.uplink.node_id, why, self.send_errors)

    async def _reload(self) -> None:
        path = self.config.source
        if path is None or self._config_loader is None:
            reload_ack.report(False, "no configuration file to reload from")
            return
        sdnotify.reloading()
        try:
            new = await asyncio.to_thread(self._config_loader, path)
            if new.agent.role != "node" or new.uplink is None:
                raise NodeSetupError('the new configuration is not role = "node": restart to change roles')
            key = self._read_key(new.uplink)
        except Exception as exc:
            reload_ack.reject(path, exc, log)
            return
        finally:
            sdnotify.ready()
        if new.nvml != self.config.nvml:
            log.warning("reload: [nvml] changes apply at the next restart")
        self.config, self.uplink, self.key = new, new.uplink, key
        self._addr = None  # look the gateway up again
        log.info("reload: %s applied: → %s:%d every %g s", path, new.uplink.gateway, new.uplink.port,
                 new.uplink.interval_s)
        reload_ack.report(True, f"{path} applied")
