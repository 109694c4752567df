"""Every runtime dependency of pyproject.toml is pinned in packaging/requirements.txt, inside its
range: the .deb installs exactly the pins, so a dependency added to pyproject alone would be
missing on a gateway (the agent would fail to start with ModuleNotFoundError)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO_ROOT = Path(__file__).resolve().parents[2]


def _pins() -> dict[str, str]:
    pins = {}
    for line in (REPO_ROOT / "packaging" / "requirements.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


def test_every_runtime_dependency_is_pinned_for_the_package_within_its_range() -> None:
    with open(REPO_ROOT / "pyproject.toml", "rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    pins = _pins()
    problems = []
    for text in deps:
        req = Requirement(re.sub(r"\s+#.*$", "", text))
        if req.marker is not None and not req.marker.evaluate({"python_version": "3.11"}):
            continue
        pin = pins.get(canonicalize_name(req.name))
        if pin is None:
            problems.append(f"{req.name}: not in packaging/requirements.txt")
        elif not req.specifier.contains(pin, prereleases=True):
            problems.append(f"{req.name}: pinned {pin}, outside {req.specifier}")
    assert problems == []
