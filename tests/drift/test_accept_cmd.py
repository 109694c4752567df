"""``rackwatt accept``: reaches a running agent over its hint socket, or edits the state file."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import numpy as np
import pytest

from agent.cli import main
from agent.engine.drift import DriftMonitor
from tests.drift.synthetic import Injection, stream


def _config(tmp_path: Path, socket_path: Path, state_dir: Path) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(
        f'[agent]\nsite = "s"\nrack = "r"\nstate_dir = "{state_dir}"\n\n'
        f'[mqtt]\nenabled = false\n\n[stages]\nsocket_path = "{socket_path}"\n'
    )
    return path


def _state_with_incident(path: Path) -> None:
    monitor = DriftMonitor()
    for sample in stream(2.2, 7, (Injection("cooling", 1.5 * 86400, 6.0),)):
        monitor.observe(sample)
    assert "cooling" in {i for i in monitor.incidents}
    path.write_text(json.dumps({"engine": {"stages": []}, "drift": monitor.save_state()}))


def test_running_agent_gets_the_command_datagram(tmp_path: Path) -> None:
    sock_path = tmp_path / "stage.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(str(sock_path))
        server.settimeout(5.0)
        code = main(["accept", "cooling", "--config", str(_config(tmp_path, sock_path, tmp_path))])
        data = server.recv(2048)
    assert code == 0
    message = json.loads(data)
    assert message["command"] == "accept" and message["cause"] == "cooling"
    assert isinstance(message["ts"], float)


def test_accept_all_omits_the_cause(tmp_path: Path) -> None:
    sock_path = tmp_path / "stage.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(str(sock_path))
        server.settimeout(5.0)
        assert main(["accept", "all", "--config", str(_config(tmp_path, sock_path, tmp_path))]) == 0
        assert "cause" not in json.loads(server.recv(2048))


def test_stopped_agent_state_file_is_edited(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    state_file = state_dir / "engine.json"
    _state_with_incident(state_file)
    config = _config(tmp_path, tmp_path / "absent.sock", state_dir)
    assert main(["accept", "cooling", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "no agent listening" in out and "accepted cooling" in out
    tree = json.loads(state_file.read_text())
    assert tree["engine"] == {"stages": []}
    restored = DriftMonitor()
    restored.load_state(tree["drift"])
    assert "cooling" not in restored.incidents and "cooling" not in restored.held


def test_explicit_state_file_and_nothing_to_accept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state_file = tmp_path / "s.json"
    state_file.write_text(json.dumps({"drift": DriftMonitor().save_state()}))
    before = state_file.read_text()
    assert main(["accept", "thermal", "--state", str(state_file)]) == 0
    assert "nothing changed" in capsys.readouterr().out
    assert state_file.read_text() == before


@pytest.mark.parametrize(
    ("content", "message"),
    [("not json", "not JSON"), ('{"engine": 1}', "no drift-monitor state")],
)
def test_bad_state_file_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    state_file = tmp_path / "s.json"
    state_file.write_text(content)
    assert main(["accept", "all", "--state", str(state_file)]) == 1
    assert message in capsys.readouterr().err


def test_unknown_cause_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["accept", "plumbing", "--state", str(tmp_path / "x")]) == 2
    assert "unknown cause 'plumbing'" in capsys.readouterr().err


def test_engine_state_file_is_edited(tmp_path: Path) -> None:
    """The engine's own state file (named arrays, drift state as a padded JSON blob) works too."""
    from agent.engine.state import pack, unpack

    monitor = DriftMonitor()
    for sample in stream(2.2, 7, (Injection("gpu", 1.5 * 86400, 6.0),)):
        monitor.observe(sample)
    assert "gpu_hardware" in monitor.incidents
    raw = json.dumps(monitor.save_state()).encode()
    blob = np.frombuffer(raw.ljust(32768, b" "), dtype=np.uint8).copy()
    state_file = tmp_path / "engine.state"
    state_file.write_bytes(pack({"scalars": np.arange(3.0), "drift": blob}))
    assert main(["accept", "gpu_hardware", "--state", str(state_file)]) == 0
    arrays = unpack(state_file.read_bytes())
    assert arrays["scalars"].tolist() == [0.0, 1.0, 2.0]
    assert arrays["drift"].size == 32768  # same fixed size
    restored = DriftMonitor()
    restored.load_state(json.loads(arrays["drift"].tobytes().decode()))
    assert "gpu_hardware" not in restored.incidents and "gpu" not in restored.held



@pytest.mark.parametrize("options", [[], ["--no-conf-d"]])
def test_accept_reads_the_configuration_as_every_command_does(short_tmp: Path, options: list[str]) -> None:
    """conf.d next to the file is merged as the service merges it, and ``--no-conf-d`` (which
    `accept` did not take) reads the file alone: the socket each names is the one sent to."""
    main_sock, dropin_sock = short_tmp / "main.sock", short_tmp / "dropin.sock"
    path = _config(short_tmp, main_sock, short_tmp)
    (short_tmp / "conf.d").mkdir()
    (short_tmp / "conf.d" / "50-stages.toml").write_text(f'[stages]\nsocket_path = "{dropin_sock}"\n')
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(str(main_sock if options else dropin_sock))
        server.settimeout(5.0)
        code = main(["accept", "all", "--config", str(path), *options])
        data = server.recv(2048)
    assert code == 0 and json.loads(data)["command"] == "accept"
