"""Log lines: every secret scrubbed whatever its length; library noise never at error priority."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.config.secrets import read_secret
from agent.live import logsetup
from agent.live.logsetup import register_secret, scrub, setup_logging


@pytest.fixture
def journald_lines(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    monkeypatch.setenv("JOURNAL_STREAM", "8:1")
    monkeypatch.setattr(logsetup, "_SECRETS", set())
    monkeypatch.setattr(logsetup, "_scrubber", None)
    stream = io.StringIO()
    setup_logging(stream=stream)
    yield stream
    logging.getLogger().handlers.clear()


@pytest.mark.parametrize("secret", ["x", "pw", "abc", "hunter2-password"])
def test_a_secret_of_any_length_is_scrubbed(journald_lines: io.StringIO, secret: str) -> None:
    register_secret(secret)
    log = logging.getLogger("rackwatt.test")
    log.warning("login user=edge password=%s via mqtt://edge:%s@h", secret, secret)
    line = journald_lines.getvalue()
    assert line.count("***") == 2, line
    assert f"={secret} " not in line and f":{secret}@" not in line


def test_short_secrets_do_not_shred_ordinary_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logsetup, "_SECRETS", set())
    monkeypatch.setattr(logsetup, "_scrubber", None)
    register_secret("a")
    register_secret("pdu")
    assert scrub("a PDU at 10.0.3.7 answered; pdu 'a' ok") == "*** PDU at 10.0.3.7 answered; *** '***' ok"
    assert scrub("adapter pdus") == "adapter pdus"  # inside words: left alone


def test_library_errors_are_demoted_and_folded(journald_lines: io.StringIO) -> None:
    logging.getLogger("rackwatt.mqtt.paho").error("Client is not connected")
    logging.getLogger("pymodbus.logging").error("Failed to connect [Errno 111]")
    logging.getLogger("pymodbus.logging").warning("Repeating....")  # below the threshold once demoted
    try:
        raise ValueError("garbage\nreply")
    except ValueError:
        logging.getLogger("pyasn1.codec").exception("decoder failed")
    logging.getLogger("rackwatt.mqtt").error("mqtt: broker 127.0.0.1:1883 refused the connection")
    lines = journald_lines.getvalue().splitlines()
    assert len(lines) == 4, lines
    assert lines[0] == "<6>rackwatt.mqtt.paho ERROR: Client is not connected"
    assert lines[1].startswith("<6>pymodbus.logging ERROR: Failed to connect")
    assert lines[2].startswith("<6>pyasn1.codec ERROR: decoder failed (ValueError: garbage | reply)")
    assert "Traceback" not in lines[2]
    assert lines[3].startswith("<3>mqtt: broker 127.0.0.1:1883")  # the agent's own errors stay errors


def test_other_handlers_see_the_library_record_unchanged(
    journald_lines: io.StringIO, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="pymodbus"):
        logging.getLogger("pymodbus").error("Failed to connect")
    assert caplog.records[-1].levelno == logging.ERROR
    assert journald_lines.getvalue().startswith("<6>")


def test_every_secret_read_from_a_file_is_scrubbed(journald_lines: io.StringIO, tmp_path: Path) -> None:
    key = tmp_path / "node.key"
    key.write_text("node-link-key-7\n")
    read_secret(key)  # as the node link, the dcgm driver, SNMP and MQTT all do
    logging.getLogger("rackwatt.test").error("peer rejected key node-link-key-7")
    assert "node-link-key-7" not in journald_lines.getvalue()
    assert "***" in journald_lines.getvalue()
