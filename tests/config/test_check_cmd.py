"""`rackwatt check-config`: OK/exit 0, or every error one per line/exit 2 (Ansible `validate:`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_valid_file_prints_ok(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _write(tmp_path / "agent.toml", '[agent]\nsite = "s"\nrack = "r"\n')
    assert main(["check-config", str(config)]) == 0
    assert capsys.readouterr().out == "OK\n"


def test_every_error_on_its_own_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _write(tmp_path / "agent.toml", '[agent]\nsite = "s"\n[mqtt]\nqos = 5\nprot = 1\n')
    assert main(["check-config", str(config)]) == 2
    assert capsys.readouterr().out.splitlines() == [
        "agent.rack: required key is missing (agent.toml line 1)",
        "mqtt.qos: must be between 0 and 2, got 5 (agent.toml line 4)",
        'mqtt.prot: unknown key; did you mean "port"? (agent.toml line 5)',
    ]


def test_warning_does_not_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "pw", "x\n").chmod(0o644)
    config = _write(
        tmp_path / "agent.toml",
        '[agent]\nsite = "s"\nrack = "r"\n[mqtt]\nusername = "u"\npassword_file = "pw"\n',
    )
    assert main(["check-config", str(config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "OK" and lines[0].startswith("warning: mqtt.password_file: secret file")


@pytest.mark.parametrize("target", ["missing.toml", "."])
def test_unreadable_file_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], target: str
) -> None:
    assert main(["check-config", str(tmp_path / target)]) == 2
    out = capsys.readouterr().out
    assert "cannot read" in out and "Traceback" not in out


def test_conf_d_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _write(tmp_path / "agent.toml", '[agent]\nsite = "s"\nrack = "r"\n')
    (tmp_path / "conf.d").mkdir()
    _write(tmp_path / "conf.d" / "10.toml", "[nvml]\ninterval_s = -1.0\n")
    assert main(["check-config", str(config), "--conf-d", str(tmp_path / "conf.d")]) == 2
    assert capsys.readouterr().out == "nvml.interval_s: must be > 0, got -1.0 (10.toml line 2)\n"


def test_as_a_subprocess_like_ansible_validate(tmp_path: Path) -> None:
    """Ansible runs `rackwatt check-config /tmp/tmpXXXX` and keys off the exit status only."""
    good = _write(tmp_path / "tmpgood", '[agent]\nsite = "s"\nrack = "r"\n')
    bad = _write(tmp_path / "tmpbad", '[agent]\nsite = "s"\nrack = "r"\n[[pdu]]\nid = "a"\n')
    run = [sys.executable, "-m", "agent.cli", "check-config"]
    ok = subprocess.run([*run, str(good)], capture_output=True, text=True, timeout=60)
    fail = subprocess.run([*run, str(bad)], capture_output=True, text=True, timeout=60)
    assert (ok.returncode, ok.stdout) == (0, "OK\n")
    assert fail.returncode == 2 and "pdu[0].host: required key is missing (tmpbad line 4)" in fail.stdout
    assert fail.stderr == ""


def test_conf_d_next_to_the_file_is_read_by_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The unit merges /etc/rackwatt/conf.d; `check-config /etc/rackwatt/agent.toml` must see it too."""
    config = _write(tmp_path / "agent.toml", '[agent]\nsite = "s"\nrack = "r"\n')
    (tmp_path / "conf.d").mkdir()
    _write(tmp_path / "conf.d" / "10.toml", "[nvml]\ninterval_s = -1.0\n")
    assert main(["check-config", str(config)]) == 2
    assert capsys.readouterr().out == "nvml.interval_s: must be > 0, got -1.0 (10.toml line 2)\n"
    assert main(["check-config", str(config), "--no-conf-d"]) == 0
    assert capsys.readouterr().out == "OK\n"


def test_missing_default_conf_d_is_not_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = _write(tmp_path / "agent.toml", '[agent]\nsite = "s"\nrack = "r"\n')
    assert main(["check-config", str(config)]) == 0
    assert main(["check-config", str(config), "--conf-d", str(tmp_path / "conf.d")]) == 2
    assert "drop-in directory" in capsys.readouterr().out


def test_thousands_of_errors_are_listed_with_a_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keys = "".join(f"k{i} = 1\n" for i in range(500))
    config = _write(tmp_path / "agent.toml", '[agent]\nsite = "s"\nrack = "r"\n[engine]\n' + keys)
    assert main(["check-config", str(config)]) == 2
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 101 and lines[0].startswith("engine.k0: unknown key")
    assert lines[-1] == "... and 400 more"


def test_a_retired_key_is_a_warning_so_an_upgraded_file_still_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``[stages] inference`` was documented and read nowhere (issue 17): an old file still loads."""
    config = _write(tmp_path / "agent.toml", '[agent]\nsite = "s"\nrack = "r"\n[stages]\ninference = false\n')
    assert main(["check-config", str(config)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-1] == "OK"
    assert lines[0].startswith("warning: stages.inference: read by no part of the agent")
