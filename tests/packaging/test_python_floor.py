"""One answer to "which Python": 3.11 and newer, everywhere it is stated.

The .deb brings its own Python 3.11 (packaging/build-deb.sh), so a gateway's own interpreter
(3.10 on Ubuntu 22.04) never matters and there is no tomli fallback to keep alive. A pip install
from source needs 3.11 for tomllib; these checks fail if one place starts saying otherwise.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
FLOOR = (3, 11)


def _pyproject() -> dict:
    with open(REPO_ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def test_requires_python_ruff_and_mypy_agree_on_3_11() -> None:
    project = _pyproject()
    assert project["project"]["requires-python"] == ">=3.11"
    assert project["tool"]["ruff"]["target-version"] == "py311"
    assert project["tool"]["mypy"]["python_version"] == "3.11"


def test_no_tomli_fallback_anywhere() -> None:
    deps = _pyproject()["project"]["dependencies"]
    assert not [d for d in deps if d.lower().startswith("tomli")], deps
    offenders = [
        str(path.relative_to(REPO_ROOT))
        for folder in ("agent", "drivers", "bench")
        for path in (REPO_ROOT / folder).rglob("*.py")
        if re.search(r"^\s*(import tomli|from tomli)\b", path.read_text(), re.MULTILINE)
    ]
    assert offenders == []


def test_the_bundled_interpreter_meets_the_floor() -> None:
    script = (REPO_ROOT / "packaging" / "build-deb.sh").read_text()
    minor = re.search(r"^py_minor=(\d+)\.(\d+)$", script, re.MULTILINE)
    assert minor, "build-deb.sh names the bundled Python as py_minor=X.Y"
    assert (int(minor.group(1)), int(minor.group(2))) >= FLOOR
