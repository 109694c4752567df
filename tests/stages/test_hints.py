"""Hint and command datagram parsing: valid shapes accepted, every kind of bad input named."""

from __future__ import annotations

import json

import pytest

from agent.live.topics import Topics
from agent.node.config import NODE_ID
from agent.stages.hints import (
    MAX_DATAGRAM_BYTES,
    Command,
    Hint,
    HintError,
    encode_hint,
    parse_datagram,
    parse_hint,
)
from agent.trace.model import is_stage_label

NOW = 1_764_400_000.0


def test_full_hint_parses() -> None:
    data = b'{"stage": "checkpoint", "job": "llama-70b-r3", "work_rate": 1834.5, "ts": 1764399999.5}'
    hint = parse_hint(data, "unix", now=NOW)
    assert hint == Hint("checkpoint", 1764399999.5, "unix", "llama-70b-r3", 1834.5)


def test_minimal_hint_takes_receive_time() -> None:
    hint = parse_hint(b'{"stage":"eval"}', "udp", now=NOW)
    assert (hint.stage, hint.ts, hint.job, hint.work_rate) == ("eval", NOW, None, None)


def test_encode_round_trips() -> None:
    data = encode_hint("grad_sync", job="123", work_rate=5.0, ts=NOW - 1)
    assert parse_hint(data, "cli", now=NOW) == Hint("grad_sync", NOW - 1, "cli", "123", 5.0)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"not json", "malformed"),
        (b'{"stage": "eval"', "malformed"),
        (b"\xff\xfe", "malformed"),
        (b'["eval"]', "malformed"),
        (b"{}", "malformed"),
        (b"[" * 5000 + b"]" * 5000, "too_large"),
        (b'{"stage": "eval", "colour": "red"}', "unknown_field"),
        (b'{"stage": "Eval"}', "bad_label"),
        (b'{"stage": "1eval"}', "bad_label"),
        (b'{"stage": "check-point"}', "bad_label"),
        (b'{"stage": ""}', "bad_label"),
        (b'{"stage": 3}', "bad_label"),
        (json.dumps({"stage": "a" * 65}).encode(), "bad_label"),
        (b'{"stage": "eval", "work_rate": -1}', "bad_value"),
        (b'{"stage": "eval", "work_rate": "fast"}', "bad_value"),
        (b'{"stage": "eval", "work_rate": true}', "bad_value"),
        (b'{"stage": "eval", "work_rate": NaN}', "bad_value"),
        (b'{"stage": "eval", "work_rate": Infinity}', "bad_value"),
        (b'{"stage": "eval", "job": ""}', "bad_value"),
        (b'{"stage": "eval", "job": "a b"}', "bad_value"),
        (b'{"stage": "eval", "ts": 12}', "bad_ts"),
        (b'{"stage": "eval", "ts": "now"}', "bad_ts"),
        (b'{"stage": "eval", "ts": true}', "bad_ts"),
        (b'{"stage": "eval", "ts": Infinity}', "bad_ts"),
        (json.dumps({"stage": "eval", "ts": NOW + 3600}).encode(), "bad_ts"),
        (b'{"command": "reboot"}', "unknown_field"),
        (b'{"command": "accept", "cause": "gremlins"}', "bad_value"),
        (b'{"command": "accept", "force": true}', "unknown_field"),
    ],
)
def test_bad_datagrams_are_rejected_with_a_reason(data: bytes, reason: str) -> None:
    with pytest.raises(HintError) as info:
        parse_datagram(data, "udp", now=NOW)
    assert info.value.reason == reason
    assert str(info.value)  # a message a person can read


def test_oversized_datagram_rejected_before_parsing() -> None:
    data = json.dumps({"stage": "eval", "job": "x" * MAX_DATAGRAM_BYTES}).encode()
    with pytest.raises(HintError) as info:
        parse_hint(data, "udp", now=NOW)
    assert info.value.reason == "too_large"


def test_command_datagram() -> None:
    message = parse_datagram(b'{"command": "accept", "cause": "cooling"}', "unix", now=NOW)
    assert message == Command(name="accept", source="unix", ts=NOW, cause="cooling")


def test_parse_hint_refuses_a_command() -> None:
    with pytest.raises(HintError):
        parse_hint(b'{"command": "accept"}', "unix", now=NOW)


def test_labels() -> None:
    assert is_stage_label("forward_backward") and is_stage_label("x9")
    assert not is_stage_label("a" * 65) and not is_stage_label("_x") and not is_stage_label(None)


def test_topic() -> None:  # the hint topic is spelled once, in agent.live.topics
    assert Topics.for_rack("rackwatt/v1/", "hall-b", "r07").hint == "rackwatt/v1/hall-b/r07/hint"


def test_node_id_follows_the_rack_configuration_rule() -> None:
    """One owner for the node-id rule: what [[node]] id accepts, a hint's node accepts."""
    for node in ("n1", "gpu_node_7", "a" * 64, "N1", "n-1", "a" * 65, ""):
        raw = json.dumps({"stage": "eval", "node": node}).encode()
        try:
            parse_datagram(raw, "udp")
            accepted = True
        except HintError:
            accepted = False
        assert accepted == (NODE_ID(node) is None), node
