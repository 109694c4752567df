"""rackwatt: an edge agent that learns a per-training-stage facility energy baseline for a GPU rack.

Packages: ``agent.config`` (TOML → frozen objects), ``agent.trace`` (trace CSV I/O),
``agent.sim`` (the rack twin), ``agent.engine`` (baseline, lag model, drift),
``agent.stages`` (stage hints and inference), ``agent.live`` (poll loop, MQTT, spool),
``agent.report`` (HTML report). Device drivers live in the top-level ``drivers`` package.
"""

__version__ = "0.1.0"
