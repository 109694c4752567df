"""``rackwatt watch`` with a broker that is not there or a password file that is missing: one clear
line, a non-zero exit, no traceback; and a password file read exactly as the agent reads it."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from tests.conftest import REPO_ROOT, free_port
from tests.live.conftest import Broker
from tests.live.conftest import make_broker as make_broker  # the fixture, re-exported for this module


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
    assert done.stderr.strip() == f"rackwatt watch: --password-file: secret file {missing}: does not exist"


def test_the_password_file_is_read_as_the_agent_reads_it(
    tmp_path: Path, make_broker: Callable[..., Broker]
) -> None:
    """Only the trailing newline goes (read_secret): a password ending in a space still logs in."""
    password = "pw ends in a space "
    # mosquitto started as root reads its password file as user mosquitto: not from under tmp_path
    readable = Path(tempfile.mkdtemp(prefix="rackwatt-passwd-"))
    readable.chmod(0o755)
    passwd = readable / "passwd"
    subprocess.run(["mosquitto_passwd", "-c", "-b", str(passwd), "ops", password], check=True, timeout=30)
    passwd.chmod(0o644)
    try:
        broker = make_broker(extra=f"allow_anonymous false\npassword_file {passwd}\n")
    finally:
        shutil.rmtree(readable)  # mosquitto has read it at start
    secret = tmp_path / "ops.pw"
    secret.write_text(password + "\n")
    secret.chmod(0o600)
    done = watch(
        "--mqtt",
        f"127.0.0.1:{broker.port}",
        "--username",
        "ops",
        "--password-file",
        str(secret),
        "--once",
        "--interval",
        "1",
    )
    assert "refused the login" not in done.stdout
    assert done.returncode == 0, done.stdout + done.stderr
