"""Prometheus ``/metrics`` for the rack agent (docs/metrics.md): ``serve_metrics(agent)`` is the live
loop's one hook. MQTT stays the delivery path that loses nothing; ``/metrics`` is a view of it.
"""

from agent.metrics.server import serve_metrics

__all__ = ["serve_metrics"]
