"""The PromQL of the Grafana dashboards in packaging/grafana, as the Prometheus test runs it.

Read from the JSON itself (panels, template variables, annotations), so a query edited in a
dashboard is the query tested. Grafana's variables are replaced the way Grafana would for one
chosen site and rack; the range variables get windows that a short test run has samples for.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.conftest import REPO_ROOT

DASHBOARD_DIR = REPO_ROOT / "packaging" / "grafana" / "dashboards"
LABEL_VALUES = re.compile(r"label_values\((?:(?P<match>.+),\s*)?(?P<label>\w+)\)")


@dataclass(frozen=True)
class Query:
    dashboard: str
    where: str  # panel title, variable or annotation name
    expr: str


def dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(DASHBOARD_DIR.glob("*.json"))}


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # rows


def queries(variables: dict[str, str]) -> list[Query]:
    """Every query of every dashboard, variables substituted (``label_values`` kept as written)."""
    out = []
    for name, dash in dashboards().items():
        for panel in _panels(dash["panels"]):
            for target in panel.get("targets", []):
                out.append(Query(name, f"panel {panel['title']!r}", substitute(target["expr"], variables)))
        for var in dash["templating"]["list"]:
            if var["type"] == "query":
                out.append(Query(name, f"variable {var['name']}", substitute(var["definition"], variables)))
        for ann in dash["annotations"]["list"]:
            if "expr" in ann:
                out.append(Query(name, f"annotation {ann['name']!r}", substitute(ann["expr"], variables)))
    return out


def substitute(expr: str, variables: dict[str, str]) -> str:
    for key in sorted(variables, key=len, reverse=True):  # $__rate_interval before $__range
        expr = expr.replace(f"${key}", variables[key]).replace(f"${{{key}}}", variables[key])
    leftover = re.search(r"\$\w+", expr)
    if leftover:
        raise AssertionError(f"dashboard variable {leftover.group()} has no test value: {expr}")
    return expr


def dashboard_files() -> list[Path]:
    return sorted(DASHBOARD_DIR.glob("*.json"))
