"""Energy windows, zeus style: ``begin_window(name)`` … ``end_window(name) -> Measurement``.

A window gives the job three things: its elapsed time, its own GPU energy (NVML's counters on
this node, when pynvml is importable), and the rack's facility energy for that window as the rack
agent accounted it (IT, cooling, facility = IT + cooling; the job's share when the job has an id).
Anything not known is None with the reason in ``Measurement.unavailable``, never 0.0.

The rack agent accounts energy in bins that close after a short look-ahead (about a minute on a
live rack), so right at ``end_window`` the last part of the window is usually not accounted yet:
``end_window(name, wait_s=90)`` waits for it, or ``refresh(measurement)`` asks again later.

Misuse (ending a window never begun, beginning one twice) raises ``ValueError`` naming the window;
an absent, slow or old rack agent never raises: its parts are None with why.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from rackwatt_client.gpu_energy import GpuEnergyMeter, window_energy_j
from rackwatt_client.rack_query import RackQuery, RackUnavailable
from rackwatt_client.stage_hints import StageClient, get_client

_POLL_S = 0.2  # between re-asks while waiting for the rack agent to account a window's end
_MAX_OPEN = 256  # open windows kept; more means begin_window without end_window in a loop
# the rack agent's reply parts → the Measurement's fields
_RACK_FIELDS = {"it_j": "it_energy_j", "cooling_j": "cooling_energy_j", "facility_j": "facility_energy_j"}


@dataclass(frozen=True)
class Measurement:
    """One window's time and energy. ``*_energy_j`` None ⇔ ``unavailable`` says why."""

    name: str
    elapsed_s: float  # on this process's monotonic clock
    gpu_energy_j: float | None  # this process's GPUs (NVML counters)
    it_energy_j: float | None  # rack IT (PDU) energy in the window, or the job's share of it
    cooling_energy_j: float | None  # cooling energy the rack agent attributed to the rack / job
    facility_energy_j: float | None  # IT + cooling
    job: str | None = None  # whose share the rack figures are (None: the whole rack)
    start_ts: float | None = None  # the window on the rack agent's clock (Unix seconds)
    end_ts: float | None = None
    unavailable: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def pending(self) -> bool:
        """True while the rack agent has not yet accounted the window's end (``refresh`` later)."""
        return any(why.startswith("not yet accounted") for why in self.unavailable.values())


@dataclass
class _Open:
    mono0: float
    agent_t0: float | None
    gpu_mj: dict[int, int] | None
    why: str | None  # why the agent's clock was not read at the start


class EnergyClient:
    """Measures windows; one per process is what the module-level functions use."""

    def __init__(
        self,
        socket_path: str | None = None,
        job: str | None = None,
        timeout_s: float | None = None,
        stage_client: StageClient | None = None,
    ) -> None:
        self._stage = stage_client or get_client()
        self.socket_path = socket_path if socket_path is not None else self._stage.socket_path
        self._job = job
        self._rack = RackQuery(self.socket_path, timeout_s)
        self._gpu = GpuEnergyMeter()
        self._open: dict[str, _Open] = {}

    @property
    def job(self) -> str | None:
        """The job id: given here, else the stage client's (``begin(job=)``, RACKWATT_JOB, SLURM_JOB_ID)."""
        return self._job or self._stage.job

    def begin_window(self, name: str) -> None:
        """Start measuring ``name`` (windows may overlap; each name once at a time)."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"window name must be a non-empty string, got {name!r}")
        if name in self._open:
            raise ValueError(f"window {name!r} has already begun")
        if len(self._open) >= _MAX_OPEN:
            raise ValueError(f"{_MAX_OPEN} windows are open; end some (last begun: {name!r})")
        gpu_mj = self._gpu.read_mj()
        agent_t0, why = None, None
        try:
            agent_t0 = float(self._rack.ask()["now"])
        except RackUnavailable as exc:
            why = str(exc)
        self._open[name] = _Open(time.monotonic(), agent_t0, gpu_mj, why)

    def end_window(self, name: str, wait_s: float = 0.0) -> Measurement:
        """Stop measuring ``name``; wait up to ``wait_s`` for the rack agent to account its end."""
        opened = self._open.pop(name, None)
        if opened is None:
            raise ValueError(f"window {name!r} was not begun (or has already ended)")
        elapsed_s = time.monotonic() - opened.mono0
        gpu_j, gpu_why = window_energy_j(opened.gpu_mj, self._gpu.read_mj())
        if gpu_why is not None and opened.gpu_mj is None and self._gpu.reason:
            gpu_why = self._gpu.reason
        unavailable = {"gpu_energy_j": gpu_why} if gpu_why else {}
        m = Measurement(name, elapsed_s, gpu_j, None, None, None, job=self.job)
        if opened.agent_t0 is None:
            why = f"the rack agent's clock was not read at the window's start: {opened.why}"
            return _with_rack(m, None, unavailable, why)
        try:
            reply = self._rack.ask(t0=opened.agent_t0, job=self.job)
        except RackUnavailable as exc:  # e.g. the agent restarting: the end is estimated, so that
            # refresh() can still ask for the window later (the agent's clock runs at wall speed
            # on a gateway; only the demo's runs faster)
            m = replace(m, start_ts=opened.agent_t0, end_ts=opened.agent_t0 + elapsed_s)
            why = f"{exc}; the window's end is estimated from its elapsed time: refresh() asks again"
            return _with_rack(m, None, unavailable, why)
        m = replace(m, start_ts=opened.agent_t0, end_ts=float(reply["now"]))
        m = _with_rack(m, reply.get("energy"), unavailable, None)
        return self.refresh(m, wait_s) if m.pending and wait_s > 0 else m

    def refresh(self, m: Measurement, wait_s: float = 0.0) -> Measurement:
        """Ask the rack agent again for a pending measurement's facility parts (up to ``wait_s``)."""
        if m.start_ts is None or m.end_ts is None:
            return m
        deadline = time.monotonic() + max(0.0, wait_s)
        keep = {k: v for k, v in m.unavailable.items() if k == "gpu_energy_j"}
        while True:
            try:
                reply = self._rack.ask(t0=m.start_ts, t1=m.end_ts, job=m.job)
                m = _with_rack(m, reply.get("energy"), keep, None)
            except RackUnavailable as exc:
                m = _with_rack(m, None, keep, str(exc))
            if not m.pending or time.monotonic() >= deadline:
                return m
            time.sleep(min(_POLL_S, max(0.0, deadline - time.monotonic())))

    def close(self) -> None:
        self._rack.close()


def _with_rack(m: Measurement, energy: Any, unavailable: dict[str, str], why: str | None) -> Measurement:
    """``m`` with the rack parts from the agent's ``energy`` reply (or all None because ``why``)."""
    values: dict[str, float | None] = dict.fromkeys(_RACK_FIELDS.values(), None)
    reasons = dict(unavailable)
    if why is None and not isinstance(energy, dict):
        why = "the rack agent's reply has no energy figures"
    for part, name in _RACK_FIELDS.items():
        if why is not None:
            reasons[name] = why
            continue
        value = energy.get(part)
        if isinstance(value, int | float) and not isinstance(value, bool):
            values[name] = float(value)
        else:
            agent_why = energy.get("why")
            reason = agent_why.get(part) if isinstance(agent_why, dict) else None
            reasons[name] = str(reason or "the rack agent gave no figure")
    return replace(m, **values, unavailable=MappingProxyType(reasons))  # type: ignore[arg-type]


_default: EnergyClient | None = None


def get_energy_client() -> EnergyClient:
    """The process-wide client (created on first use; shares the stage client's socket and job)."""
    global _default
    if _default is None:
        _default = EnergyClient()
    return _default


def begin_window(name: str) -> None:
    get_energy_client().begin_window(name)


def end_window(name: str, wait_s: float = 0.0) -> Measurement:
    return get_energy_client().end_window(name, wait_s)
