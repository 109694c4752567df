"""Shared test helpers: repository paths and loopback port allocation.

Fixtures that start real peers (mosquitto, snmpsim, a pymodbus server) live in the
conftest.py of the test folder that uses them.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SPEC_DIR = REPO_ROOT / "docs" / "spec"


def _shared_candidates() -> list[Path]:
    """Where ../shared may be: $RACKWATT_SHARED, next to this checkout, or next to the local repository
    this checkout was cloned from (a clean clone made elsewhere, as CI does)."""
    if "RACKWATT_SHARED" in os.environ:
        return [Path(os.environ["RACKWATT_SHARED"])]
    found = [REPO_ROOT.parent / "shared"]
    try:
        origin = subprocess.run(["git", "-C", str(REPO_ROOT), "config", "--get", "remote.origin.url"],
                                capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        origin = ""
    origin = origin.removeprefix("file://")
    if origin and "://" not in origin and ":" not in origin.split("/")[0]:  # a local path, not a URL
        found.append(Path(origin).resolve().parent / "shared")
    return found


def shared_dir() -> Path | None:
    """The project's ../shared folder (device recordings), when this checkout has one."""
    return next((c for c in _shared_candidates() if c.is_dir()), None)


def shared_dir_hint() -> str:
    """Why ``shared_dir()`` found nothing: the places looked at, for a skip reason."""
    looked = ", ".join(str(c) for c in _shared_candidates())
    return f"no ../shared folder (looked at {looked}; set RACKWATT_SHARED to its path)"


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port on 127.0.0.1 that was free a moment ago (TCP by default, UDP with SOCK_DGRAM)."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def open_terminal(rows: int = 50, cols: int = 120) -> tuple[int, int, dict[str, str]]:
    """A pseudo-terminal of a known size: (master, slave, env for the child).

    A fresh pty is 0×0, so the child's size would come from LINES/COLUMNS (which pytest-xdist's
    workers set to 24×80) or a fallback: the size is set here so a view test sees the same screen
    wherever it runs."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("LINES", "COLUMNS", "CI")}
    return master, slave, {**env, "TERM": "xterm"}


@pytest.fixture
def short_tmp() -> Iterator[Path]:
    """A private temp dir with a short path, for children that bind Unix sockets in it: a socket
    path must fit sockaddr_un (107 bytes), which pytest's tmp_path (longer still under xdist) may not."""
    path = Path(tempfile.mkdtemp(prefix="rw-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def spec_dir() -> Path:
    return SPEC_DIR


def start_peak_rss() -> int:
    """Reset this process's resident-set high-water mark and return its current RSS in bytes.

    ``ru_maxrss`` only ever rises, so a bound measured against it depends on what ran before in
    the same pytest process; Linux resets the mark (VmHWM) on writing 5 to /proc/self/clear_refs.
    """
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_bytes("VmRSS")


def peak_rss() -> int:
    """This process's resident-set high-water mark (bytes) since the last ``start_peak_rss``."""
    return _status_bytes("VmHWM")


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")
