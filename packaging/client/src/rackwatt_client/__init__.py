"""rackwatt-client: what a training job needs from the rack agent, standard library only.

- Stage hints: ``stage(name)`` / ``begin`` / ``end`` / ``mark`` / ``idle`` / ``report`` tell the
  rack agent which training stage this process is in (``rackwatt_client.stage_hints``).
- Energy windows, zeus style: ``begin_window(name)`` … ``end_window(name) -> Measurement`` give
  the window's time, this job's GPU energy and the rack's facility energy for it as the rack
  agent accounted it (``rackwatt_client.window``).

Installs only this package (``pip install rackwatt-client``); see docs/client.md.
"""

from __future__ import annotations

from rackwatt_client.stage_hints import StageClient, begin, end, get_client, idle, mark, report, stage
from rackwatt_client.window import EnergyClient, Measurement, begin_window, end_window, get_energy_client

__version__ = "0.1.0"

__all__ = [
    "EnergyClient",
    "Measurement",
    "StageClient",
    "__version__",
    "begin",
    "begin_window",
    "end",
    "end_window",
    "get_client",
    "get_energy_client",
    "idle",
    "mark",
    "report",
    "stage",
]
