"""Fixtures for the stage tests: a short socket directory (AF_UNIX paths are limited to 107 bytes)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def sock_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="rwst"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
