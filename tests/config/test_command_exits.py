"""Every command that loads the configuration exits 2 with the list of problems, never a traceback.

Run as subprocesses, as an operator or systemd runs them: a traceback would reach stderr there.
The files are the measured crashers of issue 18 (a 20 000-part dotted header, deep nesting, a NUL
in a path) and issue 21's first-day slips (a host with a port, a placeholder identity).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HEAD = '[agent]\nsite = "lab"\nrack = "r1"\n'
BAD = {
    "dotted_header": (HEAD + "[" + ".".join(["a"] * 20000) + "]\n", "refused before parsing: a dotted name"),
    "deep_arrays": (HEAD + "x = " + "[" * 3000 + "]" * 3000 + "\n", "refused before parsing: nested 3000"),
    "nul_state_dir": (
        '[agent]\nsite = "lab"\nrack = "r1"\nstate_dir = "/var/lib/\\u0000x"\n',
        "agent.state_dir: must not contain a NUL byte",
    ),
    "host_with_port": (HEAD + '[mqtt]\nhost = "10.0.3.7:1883"\n', "mqtt.host: includes a port"),
    "placeholder": (
        '[agent]\nsite = "my-site"\nrack = "r1"\n',
        'agent.site: "my-site" is the example\'s placeholder',
    ),
}
COMMANDS = {
    "check-config": lambda cfg, tmp: ["check-config", str(cfg)],
    "run": lambda cfg, tmp: ["run", "--config", str(cfg)],
    "poll": lambda cfg, tmp: ["poll", "--config", str(cfg), "--once"],
    "record": lambda cfg, tmp: [
        "record",
        "--config",
        str(cfg),
        "--out",
        str(tmp / "t.csv"),
        "--duration",
        "1",
    ],
    "accept": lambda cfg, tmp: ["accept", "all", "--config", str(cfg)],
    "replay": lambda cfg, tmp: [
        "replay",
        str(tmp / "none.csv"),
        "--config",
        str(cfg),
        "--report",
        str(tmp / "r.jsonl"),
    ],
}
# Each command meets one crasher and one slip; every file is met by some command.
PAIRS = [
    ("check-config", "dotted_header"),
    ("check-config", "nul_state_dir"),
    ("check-config", "placeholder"),
    ("run", "deep_arrays"),
    ("run", "host_with_port"),
    ("poll", "dotted_header"),
    ("poll", "nul_state_dir"),
    ("record", "deep_arrays"),
    ("record", "placeholder"),
    ("accept", "deep_arrays"),
    ("accept", "host_with_port"),
    ("replay", "dotted_header"),
    ("replay", "host_with_port"),
]


@pytest.mark.parametrize(("command", "case"), PAIRS, ids=[f"{c}-{k}" for c, k in PAIRS])
def test_bad_configuration_exits_2_with_the_problem(tmp_path: Path, command: str, case: str) -> None:
    text, expected = BAD[case]
    config = tmp_path / "agent.toml"
    config.write_text(text)
    args = COMMANDS[command](config, tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "agent", *args], capture_output=True, text=True, timeout=60
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert expected in output
    assert "Traceback" not in output


def test_an_unhandled_exception_is_one_line_and_exit_70(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agent import cli
    from agent.config import check_cmd

    def broken(args: object) -> int:
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(check_cmd, "run", broken)
    monkeypatch.delenv("RACKWATT_TRACEBACK", raising=False)
    assert cli.main(["check-config", str(tmp_path / "x.toml")]) == 70
    err = capsys.readouterr().err
    assert err.startswith("rackwatt check-config: internal error: RuntimeError: boom (a bug")
    assert err.count("\n") == 1
    monkeypatch.setenv("RACKWATT_TRACEBACK", "1")
    with pytest.raises(RuntimeError):
        cli.main(["check-config", str(tmp_path / "x.toml")])


@pytest.mark.parametrize("command", ["check-config", "poll", "run", "replay"])
def test_every_command_reads_conf_d_next_to_the_file_like_the_unit(tmp_path: Path, command: str) -> None:
    """The unit merges /etc/rackwatt/conf.d; `poll --config /etc/rackwatt/agent.toml` must see it too."""
    config = tmp_path / "agent.toml"
    config.write_text(HEAD)
    (tmp_path / "conf.d").mkdir()
    (tmp_path / "conf.d" / "10-pdus.toml").write_text('[[pdu]]\nid = "a"\nhost = "10.0.3.700"\n')
    args = COMMANDS[command](config, tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "agent", *args], capture_output=True, text=True, timeout=60
    )
    output = result.stdout + result.stderr
    assert result.returncode == 2, output
    assert "pdu[0].host: is not a valid IPv4 address" in output and "(10-pdus.toml line 3)" in output
    assert "Traceback" not in output
