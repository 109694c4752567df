"""``rackwatt watch`` with a broker that is not there or a password file that is missing: one clear
line, a non-zero exit, no traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT, free_port


def watch(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent", "watch", "--site", "dc1", *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_no_broker_is_said_and_once_exits_1() -> None:
    done = watch("--mqtt", f"127.0.0.1:{free_port()}", "--once", "--interval", "1")
    assert done.returncode == 1
    assert "no rack of site dc1 seen" in done.stdout and "cannot reach the broker" in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_a_missing_password_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "ops.pw"
    done = watch("--username", "ops", "--password-file", str(missing), "--once")
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == f"rackwatt watch: cannot read --password-file {missing}: No such file or directory"
    )
