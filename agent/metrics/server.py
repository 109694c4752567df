"""The ``/metrics`` HTTP(S) server and ``serve_metrics``, the live loop's one hook.

prometheus_client's own server thread serves a private ``CollectorRegistry`` (nothing leaks in from
the global one, and two agents in one process stay apart). TLS and client certificates are the
library's; basic auth is not, so docs/metrics.md shows a reverse proxy for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from agent.config.model import MetricsSection
from agent.metrics.families import build_families
from agent.metrics.jobs import JobEnergyLedger
from agent.metrics.snapshot import RackSnapshot, take_snapshot
from agent.metrics.tap import MessageTap

log = logging.getLogger("rackwatt.metrics")

# How long a scrape waits for the agent's loop to take the snapshot. Prometheus's default
# scrape_timeout is 10 s; well under it, a busy loop gets the previous snapshot served (marked
# stale) rather than a failed scrape. The loop's longest step (an engine batch) takes milliseconds.
SNAPSHOT_TIMEOUT_S = 2.0


class RackCollector(Collector):
    """Takes a snapshot on the agent's loop per scrape; the families are built on the scrape thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, take: Callable[[], RackSnapshot]) -> None:
        self._loop = loop
        self._take = take
        self._last: RackSnapshot | None = None
        self._last_mono = 0.0

    async def _snapshot(self) -> RackSnapshot:
        return self._take()

    def describe(self) -> list[Metric]:
        return []  # the names depend on the data; registering must not take a snapshot

    def collect(self) -> Iterator[Metric]:
        stale = False
        try:
            snap = asyncio.run_coroutine_threadsafe(self._snapshot(), self._loop).result(SNAPSHOT_TIMEOUT_S)
            self._last, self._last_mono = snap, time.monotonic()
        except Exception as exc:  # loop busy or stopping, or the snapshot failed: serve the previous one
            if self._last is None:
                log.warning("metrics: no snapshot for this scrape (%s: %s)", type(exc).__name__, exc)
                return
            snap, stale = self._last, True
        families = build_families(snap)
        families.gauge("metrics_snapshot_age_seconds", "Age of the figures served (0 unless the agent's "
                       "loop was too busy to answer this scrape in time).",
                       time.monotonic() - self._last_mono if stale else 0.0)
        yield from families


class MetricsServer:
    """A running ``/metrics`` endpoint; ``port`` is the one bound (useful when 0 was asked)."""

    def __init__(self, httpd: Any, thread: Any, scheme: str) -> None:
        self._httpd, self._thread = httpd, thread
        self.address, self.port = httpd.server_address[:2]
        self.url = f"{scheme}://{self.address}:{self.port}/metrics"

    @classmethod
    def start(cls, section: MetricsSection, registry: CollectorRegistry) -> MetricsServer:
        tls: dict[str, Any] = {}
        if section.cert_file is not None and section.key_file is not None:
            tls = {"certfile": str(section.cert_file), "keyfile": str(section.key_file)}
            if section.client_ca_file is not None:
                tls |= {"client_cafile": str(section.client_ca_file), "client_auth_required": True}
        httpd, thread = start_http_server(section.port, addr=section.address, registry=registry, **tls)
        return cls(httpd, thread, "https" if tls else "http")

    async def stop(self) -> None:
        await asyncio.to_thread(self._httpd.shutdown)  # waits for serve_forever (it polls every 0.5 s)
        self._httpd.server_close()


@contextlib.asynccontextmanager
async def serve_metrics(agent: Any) -> AsyncIterator[MetricsServer | None]:
    """Serve ``agent``'s metrics while the block runs, if ``[metrics] enabled``; else do nothing.

    A port that cannot be bound is logged as one line and the agent runs on without metrics.
    ``[metrics]`` changes take effect at the next restart (a reload keeps this server).
    """
    section: MetricsSection = agent.config.metrics
    if not section.enabled:
        yield None
        return
    ledger = JobEnergyLedger(section.max_jobs)
    tap = MessageTap(ledger)
    node = section.node or socket.gethostname()  # [metrics] node, else this host's name
    if agent.engine is not None:
        with contextlib.suppress(Exception):  # no reference yet: the first summary sets it
            ledger.start_from(agent.engine.summary_payload(agent.clock.time()))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RackCollector(asyncio.get_running_loop(), lambda: take_snapshot(agent, tap, node)))
    try:
        server = MetricsServer.start(section, registry)
    except (OSError, ValueError) as exc:
        log.error("metrics: cannot serve on %s:%s (%s); running without /metrics", section.address,
                  section.port, exc)
        yield None
        return
    log.info("metrics: serving %s", server.url)
    downstream = agent.on_message
    agent.on_message = tap.observer(downstream)
    try:
        yield server
    finally:
        agent.on_message = downstream
        await server.stop()
