"""``DcgmExporterDriver``: one GPU node's dcgm-exporter, scraped over HTTP, as ``gpu.<i>.*`` signals.

Each ``[[dcgm]]`` node is its own device (``dcgm.<node>``) with its own deadline, so a node that is
down marks only its own GPUs missing. Node ``k`` owns ``gpu.<first_gpu>`` … ``gpu.<first_gpu +
gpu_count - 1>`` by the exporter's ``gpu`` label: extra GPUs are an error, never a shift of the next
node's numbers. Energy is made reset-safe as in the NVML driver (``gpu.<i>.energy_resets``).
"""

from __future__ import annotations

import logging
import ssl
import time

from drivers.base import PollResult
from drivers.counters import EnergyTotal
from drivers.dcgm_exporter.config import DcgmSection
from drivers.dcgm_exporter.exposition import ExpositionError, GpuReading, parse_exposition
from drivers.dcgm_exporter.http_get import HttpError, Target, http_get, parse_url

log = logging.getLogger(__name__)


class DcgmExporterDriver:
    """One node's exporter; ``poll`` never raises."""

    def __init__(self, cfg: DcgmSection, first_gpu: int | None = None) -> None:
        self.cfg = cfg
        self.device = f"dcgm.{cfg.id}"
        self.interval_s = cfg.interval_s
        self.first_gpu = cfg.first_gpu if cfg.first_gpu is not None else (first_gpu or 0)
        self.target: Target = parse_url(cfg.url)
        self._auth: tuple[str, str] | None = None
        if cfg.username is not None and cfg.password_file is not None:
            from agent.config.secrets import read_secret

            self._auth = (cfg.username, read_secret(cfg.password_file))
        self._ssl: ssl.SSLContext | None = None
        if self.target.scheme == "https":
            self._ssl = ssl.create_default_context(cafile=str(cfg.ca_file) if cfg.ca_file else None)
        self._counters: dict[str, EnergyTotal] = {}  # by GPU UUID: indexes can move after a reboot

    @property
    def deadline_s(self) -> float:
        return min(self.cfg.timeout_s, 0.8 * self.cfg.interval_s)

    async def poll(self) -> PollResult:
        ts = time.time()
        started = time.perf_counter()
        signals: dict[str, float] = {}
        error: str | None = None
        ok = True
        try:
            body = await http_get(self.target, timeout_s=self.deadline_s,
                                  max_body_bytes=self.cfg.max_body_bytes,
                                  basic_auth=self._auth, ssl_context=self._ssl)
            gpus = parse_exposition(body.decode("utf-8", errors="replace"))
            problems = self._signals(gpus, signals)
            if problems:
                error = f"{self._name()}: " + "; ".join(problems)
        except (HttpError, ExpositionError) as exc:
            ok, error = False, f"{self._name()}: {exc}"
        except Exception as exc:  # never raise: the other devices' polls go on
            log.exception("%s: unexpected error", self.device)
            ok, error = False, f"{self._name()}: unexpected {type(exc).__name__}: {exc}"
        return PollResult(device=self.device, ts=ts, signals=signals, ok=ok,
                          elapsed_ms=(time.perf_counter() - started) * 1000.0,
                          profile="dcgm-exporter", error=error)

    async def close(self) -> None:
        return None

    def _name(self) -> str:
        return f"dcgm node '{self.cfg.id}' ({self.target.where})"

    def _signals(self, gpus: list[GpuReading], signals: dict[str, float]) -> list[str]:
        """Fill ``signals`` from one scrape; returns the problems worth reporting."""
        problems: list[str] = []
        if len(gpus) > self.cfg.gpu_count:
            extra = ", ".join(str(g.index) for g in gpus[self.cfg.gpu_count:])
            problems.append(f"shows {len(gpus)} GPUs but gpu_count = {self.cfg.gpu_count}; "
                            f"GPU(s) {extra} ignored")
        if len(gpus) < self.cfg.gpu_count:
            problems.append(f"shows {len(gpus)} of {self.cfg.gpu_count} GPUs; the others are missing")
        for gpu in gpus[: self.cfg.gpu_count]:
            if gpu.index >= self.cfg.gpu_count:
                problems.append(f"gpu {gpu.index} is outside 0..{self.cfg.gpu_count - 1}; ignored")
                continue
            prefix = f"gpu.{self.first_gpu + gpu.index}."
            values = dict(gpu.values)
            raw_j = values.pop("energy_j", None)
            if raw_j is not None:
                counter = self._counters.setdefault(gpu.uuid, EnergyTotal())
                values["energy_j"], reset = counter.update(raw_j)
                if reset:
                    log.warning("%s: gpu %d energy counter went back (driver reload?); continuing",
                                self._name(), gpu.index)
                values["energy_resets"] = float(counter.delta.resets)
            signals.update({prefix + name: value for name, value in values.items()})
        return problems
