"""The command line dispatcher: version, help listing every subcommand."""

from __future__ import annotations

import subprocess
import sys

from agent import __version__
from agent.cli import COMMANDS


def _rackwatt(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "agent", *args], capture_output=True, text=True, timeout=60)


def test_version_prints_package_version() -> None:
    result = _rackwatt("--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"rackwatt {__version__}"


def test_help_lists_every_subcommand() -> None:
    result = _rackwatt("--help")
    assert result.returncode == 0
    for name in COMMANDS:
        assert name in result.stdout


def test_subcommand_help_lists_its_own_options() -> None:
    result = _rackwatt("replay", "--help")
    assert result.returncode == 0
    assert "--report" in result.stdout and "--window" in result.stdout


def test_unknown_command_is_an_error() -> None:
    result = _rackwatt("frobnicate")
    assert result.returncode == 2
    assert "invalid choice" in result.stderr
