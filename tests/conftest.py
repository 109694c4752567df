"""Shared test helpers: repository paths and loopback port allocation.

Fixtures that start real peers (mosquitto, snmpsim, a pymodbus server) live in the
conftest.py of the test folder that uses them.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SPEC_DIR = REPO_ROOT / "docs" / "spec"


def shared_dir() -> Path | None:
    """The project's ../shared folder (device recordings), when this checkout has one."""
    candidate = Path(os.environ.get("RACKWATT_SHARED", REPO_ROOT.parent / "shared"))
    return candidate if candidate.is_dir() else None


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port on 127.0.0.1 that was free a moment ago (TCP by default, UDP with SOCK_DGRAM)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def spec_dir() -> Path:
    return SPEC_DIR
