"""Prometheus ``/metrics`` for the rack agent (docs/metrics.md).

``serve_metrics(agent)`` is the one hook the live loop calls: it taps the messages the agent
publishes, serves a private ``CollectorRegistry`` over HTTP(S) on ``[metrics] address:port``,
and takes every scrape's figures on the agent's own event loop, so a scrape never reads the
engine while it is changing. MQTT stays the delivery path that loses nothing; ``/metrics`` is a
view for the Prometheus and Grafana a site already runs.
"""

from agent.metrics.server import serve_metrics

__all__ = ["serve_metrics"]
