"""``rackwatt stage``: delivers a hint, exits 0 with a warning when no agent, 2 on a bad label."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main
from agent.stages.hints import parse_hint
from tests.conftest import REPO_ROOT, free_port


def test_sends_a_hint_over_the_unix_socket(sock_dir: Path) -> None:
    path = sock_dir / "agent.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as rx:
        rx.bind(str(path))
        rx.settimeout(2)
        assert (
            main(
                ["stage", "checkpoint", "--job", "llama-70b-r3", "--work-rate", "12.5", "--socket", str(path)]
            )
            == 0
        )
        hint = parse_hint(rx.recv(2048), "unix")
    assert (hint.stage, hint.job, hint.work_rate) == ("checkpoint", "llama-70b-r3", 12.5)


def test_sends_over_udp(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    port = free_port(socket.SOCK_DGRAM)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", port))
        rx.settimeout(2)
        assert main(["stage", "idle", "--udp", str(port)]) == 0
        hint = parse_hint(rx.recv(2048), "udp")
    assert (hint.stage, hint.job) == ("idle", None)


def test_absent_agent_is_a_warning_not_a_failure(sock_dir: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "stage", "idle", "--socket", str(sock_dir / "none.sock")],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0
    assert "warning" in proc.stderr and "none.sock" in proc.stderr
    port = free_port(socket.SOCK_DGRAM)  # nobody listens there
    proc = subprocess.run(
        [sys.executable, "-m", "agent", "stage", "idle", "--udp", str(port)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 0 and "warning" in proc.stderr


def test_invalid_label_or_rate_is_a_usage_error(sock_dir: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["stage", "Check-Point", "--socket", str(sock_dir / "x.sock")]) == 2
    assert "invalid label 'Check-Point'" in capsys.readouterr().err
    assert main(["stage", "eval", "--work-rate", "-3", "--socket", str(sock_dir / "x.sock")]) == 2
    assert main(["stage", "eval", "--job", "bad job id", "--socket", str(sock_dir / "x.sock")]) == 2


def test_falls_back_to_udp_from_the_environment(sock_dir: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    port = free_port(socket.SOCK_DGRAM)
    monkeypatch.setenv("RACKWATT_STAGE_SOCKET", str(sock_dir / "absent.sock"))
    monkeypatch.setenv("RACKWATT_STAGE_UDP", str(port))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx:
        rx.bind(("127.0.0.1", port))
        rx.settimeout(2)
        assert main(["stage", "eval"]) == 0
        assert parse_hint(rx.recv(2048), "udp").stage == "eval"


@pytest.mark.parametrize("rate", ["nan", "inf", "1e13"])
def test_a_rate_the_agent_would_refuse_is_a_usage_error(sock_dir: Path, rate: str, capsys) -> None:  # type: ignore[no-untyped-def]
    assert main(["stage", "eval", "--work-rate", rate, "--socket", str(sock_dir / "x.sock")]) == 2
    assert "work_rate" in capsys.readouterr().err
