"""The rackwatt engine: per-stage facility baselines with a lag-aware response model. Public surface:
``Engine``, ``RackInfo`` and ``rack_info`` (device facts from trace metadata and configuration).
See docs/engine.md.
"""

from __future__ import annotations

from agent.engine.engine import Engine
from agent.engine.frames import RackInfo, rack_info

__all__ = ["Engine", "RackInfo", "rack_info"]
