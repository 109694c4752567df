"""The Grafana dashboards and their provisioning, checked without Grafana: well-formed JSON, every
panel on the data-source variable, every query valid PromQL (``promtool check rules``) naming only
metrics the agent exports. test_prometheus.py runs the same queries against a real Prometheus."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.metrics.conftest import samples
from tests.metrics.dashboards import LABEL_VALUES, dashboards, queries
from tests.metrics.test_families import exposition, snapshot

VARIABLES = {"site": "dc1", "rack": "r1", "__range": "1h", "__rate_interval": "2m", "__interval": "1m"}


def test_each_dashboard_is_complete_and_uses_the_datasource_variable() -> None:
    found = dashboards()
    assert set(found) == {"rackwatt-fleet.json", "rackwatt-rack.json"}
    for name, dash in found.items():
        assert dash["uid"] and dash["title"].startswith("rackwatt"), name
        ids = [p["id"] for p in dash["panels"]]
        assert len(ids) == len(set(ids)), f"{name}: panel ids repeat"
        for panel in dash["panels"]:
            assert panel["datasource"]["uid"] == "${datasource}", f"{name}: {panel['title']}"
            assert panel["targets"], f"{name}: {panel['title']} has no query"


def test_every_query_is_valid_promql(tmp_path: Path) -> None:
    exprs = [q for q in queries(VARIABLES) if not LABEL_VALUES.fullmatch(q.expr)]
    rules = {
        "groups": [
            {
                "name": "dashboards",
                "rules": [{"record": f"dashboard:query_{i}", "expr": q.expr} for i, q in enumerate(exprs)],
            }
        ]
    }
    path = tmp_path / "rules.yml"
    path.write_text(json.dumps(rules))  # JSON is YAML
    done = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_queries_name_only_metrics_the_agent_exports() -> None:
    full = snapshot()
    assert full.summary is not None
    full.summary["power_w"]["cooling_expected"] = 2100.0  # every figure known
    exported = {name for name, _ in samples(exposition(full))}
    assert len(exported) > 30
    for q in queries(VARIABLES):
        for name in re.findall(r"\brackwatt_\w+", q.expr):
            assert name in exported, f"{q.dashboard} {q.where}: {name} is not exported"


def test_provisioning_points_grafana_at_the_dashboards() -> None:
    prov = REPO_ROOT / "packaging" / "grafana" / "provisioning"
    text = (prov / "dashboards" / "rackwatt.yaml").read_text()
    assert "type: file" in text and "path: /var/lib/grafana/dashboards/rackwatt" in text
    assert "type: prometheus" in (prov / "datasources" / "prometheus.yaml").read_text()
