"""Data-driven loader cases: each file in cases/valid loads, each file in cases/invalid fails as stated.

Directives in a case's leading comments:
  ``# expect: <issue>``   an error the loader must report, exactly as printed (``{dir}`` = the case's folder)
  ``# expect-prefix: <start of an issue>``  an error starting so (for messages listing shipped profiles)
  ``# warn: <issue>``     a warning it must report
  ``# secret: NAME MODE`` create NAME beside the case with octal MODE before loading
  ``# check: EXPR``       a Python expression over the Config's fields that must be true
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agent.config.errors import ConfigError
from agent.config.loader import load_config

CASES = Path(__file__).parent / "cases"


def _directives(path: Path, name: str) -> list[str]:
    prefix = f"# {name}: "
    return [
        line[len(prefix) :].rstrip("\n") for line in path.read_text().splitlines() if line.startswith(prefix)
    ]


def _stage(case: Path, tmp_path: Path) -> Path:
    """Copy the case into a private folder and create its secret files."""
    target = tmp_path / case.name
    shutil.copy(case, target)
    for spec in _directives(case, "secret"):
        name, mode = spec.split()
        secret = tmp_path / name
        secret.write_text("s3cret-value\n")
        secret.chmod(int(mode, 8))
    return target


@pytest.mark.parametrize("case", sorted((CASES / "valid").glob("*.toml")), ids=lambda p: p.stem)
def test_valid_case_loads(case: Path, tmp_path: Path) -> None:
    config = load_config(_stage(case, tmp_path))
    for expression in _directives(case, "check"):
        namespace = {
            f: getattr(config, f) for f in ("agent", "mqtt", "pdus", "cracs", "nvml", "stages", "engine")
        }
        assert eval(expression, {}, namespace), expression
    expected_warnings = [w.replace("{dir}", str(tmp_path)) for w in _directives(case, "warn")]
    assert list(config.warnings) == expected_warnings


@pytest.mark.parametrize("case", sorted((CASES / "invalid").glob("*.toml")), ids=lambda p: p.stem)
def test_invalid_case_reports_every_expected_issue(case: Path, tmp_path: Path) -> None:
    expected = [e.replace("{dir}", str(tmp_path)) for e in _directives(case, "expect")]
    prefixes = _directives(case, "expect-prefix")
    assert expected or prefixes, f"{case.name} has no '# expect:' line"
    with pytest.raises(ConfigError) as info:
        load_config(_stage(case, tmp_path))
    reported = [str(issue) for issue in info.value.issues]
    for line in expected:
        assert line in reported, f"missing:\n  {line}\nreported:\n  " + "\n  ".join(reported)
    for prefix in prefixes:
        assert any(r.startswith(prefix) for r in reported), f"no issue starts with {prefix!r}: {reported}"
    for issue in info.value.issues:
        assert issue.key_path or issue.line is not None, f"issue names neither key nor line: {issue}"
