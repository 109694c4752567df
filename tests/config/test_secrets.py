"""Secret files: read without the trailing newline; others-readable files give a warning, not an error."""

from __future__ import annotations

from pathlib import Path

import pytest

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


@pytest.mark.parametrize(
    ("mode", "who"), [(0o644, "other users"), (0o604, "other users"), (0o640, "its group")]
)
def test_readable_secret_is_a_warning(tmp_path: Path, mode: int, who: str) -> None:
    config = load_config(_config_with_secret(tmp_path, mode))
    secret = tmp_path / "pdu.community"
    assert config.pdus[0].community_file == secret
    assert config.warnings == (
        f"pdu[0].community_file: secret file {secret} is readable by {who} (mode {mode:04o}); "
        f"run: chmod 600 {secret} (agent.toml line 7)",
    )


def test_private_secret_gives_no_warning(tmp_path: Path) -> None:
    assert load_config(_config_with_secret(tmp_path, 0o600)).warnings == ()


def test_warnings_travel_with_errors(tmp_path: Path) -> None:
    config = _config_with_secret(tmp_path, 0o644)
    config.write_text(config.read_text() + "port = -1\n")
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert len(info.value.issues) == 1 and "port" in info.value.issues[0].key_path
    assert len(info.value.warnings) == 1 and "readable by other users" in str(info.value.warnings[0])
