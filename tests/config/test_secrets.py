"""Secret files: read without the trailing newline; unusable ones are errors; files the wrong people can
read (or the agent's user cannot) give a warning with the fix. The layout docs/deploy.md installs,
root:rackwatt 0640, passes without one."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agent.config import secrets
from agent.config.errors import ConfigError
from agent.config.loader import load_config
from agent.config.secrets import SecretError, read_secret


def test_read_secret_strips_only_the_trailing_newline(tmp_path: Path) -> None:
    secret = tmp_path / "s"
    secret.write_text("  pass word \r\n")
    assert read_secret(secret) == "  pass word "


@pytest.mark.parametrize(("content", "reason"), [(None, "does not exist"), ("\n", "is empty")])
def test_unusable_secret_names_the_file(tmp_path: Path, content: str | None, reason: str) -> None:
    secret = tmp_path / "community"
    if content is not None:
        secret.write_text(content)
    with pytest.raises(SecretError, match=f"{secret}: {reason}"):
        read_secret(secret)


def _config_with_secret(tmp_path: Path, mode: int) -> Path:
    secret = tmp_path / "pdu.community"
    secret.write_text("public\n")
    secret.chmod(mode)
    config = tmp_path / "agent.toml"
    config.write_text(
        '[agent]\nsite = "s"\nrack = "r"\n[[pdu]]\nid = "a"\nhost = "h"\ncommunity_file = "pdu.community"\n'
    )
    return config


@pytest.fixture(autouse=True)
def _no_service_user(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever users this machine has: the service's group is the secret's own unless a test says not."""
    monkeypatch.setattr(secrets, "service_reader", lambda: None)


@pytest.mark.parametrize("mode", [0o644, 0o604])
def test_secret_readable_by_every_user_is_a_warning(tmp_path: Path, mode: int) -> None:
    config = load_config(_config_with_secret(tmp_path, mode))
    secret = tmp_path / "pdu.community"
    assert config.pdus[0].community_file == secret
    assert config.warnings == (
        f"pdu[0].community_file: secret file {secret} is readable by every user (mode {mode:04o}); "
        f"run: chown root:rackwatt {secret} && chmod 0640 {secret} (agent.toml line 7)",
    )


def test_deploy_layout_group_readable_by_the_service_group_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/deploy.md: owner root, group rackwatt, 0640 (the agent reads it and cannot change it)."""
    config_path = _config_with_secret(tmp_path, 0o640)
    group = (tmp_path / "pdu.community").stat().st_gid
    monkeypatch.setattr(secrets, "service_gids", lambda: {group})
    assert load_config(config_path).warnings == ()


def test_group_readable_by_another_group_is_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config_path = _config_with_secret(tmp_path, 0o640)
    monkeypatch.setattr(secrets, "service_gids", set)
    (warning,) = load_config(config_path).warnings
    assert "(mode 0640), which is not the agent's group rackwatt; run: chown root:rackwatt" in warning


def test_secret_the_service_user_cannot_read_is_a_warning(tmp_path: Path) -> None:
    """Checked as root for the service user: root:root 0600 would leave the agent without its secret."""
    secret = tmp_path / "s"
    secret.write_text("x\n")
    secret.chmod(0o600)
    info = secret.stat()
    other_uid = info.st_uid + 4242
    problem = secrets.secret_file_problem(secret, allowed_gids=set(), reader=(other_uid, set()))
    assert problem is not None and problem[0] == "warning"
    owner = f"(owner {info.st_uid}:{info.st_gid}, mode 0600)"
    assert f"not readable by the agent's user rackwatt {owner}" in problem[1]
    secret.chmod(0o640)
    group_reader = (other_uid, {info.st_gid})
    assert secrets.secret_file_problem(secret, allowed_gids={info.st_gid}, reader=group_reader) is None


@pytest.mark.parametrize(
    ("mode", "uid", "gids", "readable"),
    [(0o600, 1, set(), True), (0o060, 1, {2}, False), (0o040, 9, {2}, True), (0o004, 9, {3}, True),
     (0o640, 9, {3}, False), (0o604, 9, {2}, False)],
)
def test_readable_by_follows_owner_then_group_then_other(
    mode: int, uid: int, gids: set[int], readable: bool
) -> None:
    info = os.stat_result((stat.S_IFREG | mode, 0, 0, 1, 1, 2, 0, 0, 0, 0))
    assert secrets.readable_by(info, uid, gids) is readable


@pytest.mark.parametrize(
    ("content", "reason"),
    [(b"\n", "is empty"), (b"pub\x00lic\n", "contains a NUL byte"), (b"\xff\xfe", "is not UTF-8 text"),
     (b"x" * 70000, "longer than 65535 bytes")],
)
def test_unusable_secret_content_is_an_error(tmp_path: Path, content: bytes, reason: str) -> None:
    config_path = _config_with_secret(tmp_path, 0o600)
    secret = tmp_path / "pdu.community"
    secret.write_bytes(content)
    with pytest.raises(ConfigError) as info:
        load_config(config_path)
    assert [str(issue) for issue in info.value.issues] == [
        f"pdu[0].community_file: secret file {secret}: {reason}"
        + ("; is it the right file?" if "longer" in reason else "") + " (agent.toml line 7)"
    ]


def test_private_secret_gives_no_warning(tmp_path: Path) -> None:
    assert load_config(_config_with_secret(tmp_path, 0o600)).warnings == ()


def test_warnings_travel_with_errors(tmp_path: Path) -> None:
    config = _config_with_secret(tmp_path, 0o644)
    config.write_text(config.read_text() + "port = -1\n")
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert len(info.value.issues) == 1 and "port" in info.value.issues[0].key_path
    assert len(info.value.warnings) == 1 and "readable by every user" in str(info.value.warnings[0])


def test_the_secret_layout_deploy_md_installs_passes_check_config(tmp_path: Path) -> None:
    """docs/deploy.md and the mode rule agree (issue 21: check-config warned "chmod 600" on every run)."""
    import re

    deploy = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
    task = deploy[deploy.index("- name: SNMP community and broker password") :]
    task = task[: task.index("\n- name:", 1)]
    owner = re.search(r"owner: (\w+)", task)
    group = re.search(r"group: (\w+)", task)
    mode = re.search(r'mode: "(0[0-7]{3})"', task)
    assert owner and group and mode, task
    assert (owner.group(1), group.group(1)) == ("root", secrets.SERVICE_GROUP)
    secret = tmp_path / "snmp-community"
    secret.write_text("public\n")
    secret.chmod(int(mode.group(1), 8))
    info = secret.stat()
    # The file's group stands in for rackwatt; the service user reads it through that group.
    service = (info.st_uid + 4242, {info.st_gid})
    assert secrets.secret_file_problem(secret, allowed_gids={info.st_gid}, reader=service) is None
