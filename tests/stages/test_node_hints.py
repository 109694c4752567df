"""Hints that name their node: parsing, the unknown-node refusal, per-node timelines, real sockets."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import numpy as np
import pytest

from agent.config.model import StagesSection
from agent.stages.hints import DROP_REASONS, Hint, HintError, encode_hint, parse_hint
from agent.stages.intake import HintIntake
from agent.stages.timeline import NodeTimelines, StageTimeline
from tests.conftest import free_port
from tests.stages.test_listener import _wait_for, build_stage_input

T0 = 1_764_400_000.0


def test_node_round_trips_and_a_hint_without_it_is_for_the_rack() -> None:
    hint = parse_hint(encode_hint("checkpoint", job="j1", node="gpu_07"), "udp", now=T0)
    assert (hint.stage, hint.job, hint.node) == ("checkpoint", "j1", "gpu_07")
    assert parse_hint(b'{"stage": "eval"}', "udp", now=T0).node is None


@pytest.mark.parametrize("node", ["", "N1", "n-1", "x" * 65, 7, None, ["n1"]])
def test_a_malformed_node_is_a_bad_value_naming_the_field(node: object) -> None:
    data = json.dumps({"stage": "eval", "node": node}).encode()
    if node is None:  # JSON null is "no node": the whole rack
        assert parse_hint(data, "udp", now=T0).node is None
        return
    with pytest.raises(HintError, match=r"^node: ") as err:
        parse_hint(data, "udp", now=T0)
    assert err.value.reason == "bad_value"


def test_an_unknown_node_is_refused_counted_and_named() -> None:
    timeline = StageTimeline()
    intake = HintIntake(timeline, clock=lambda: T0, nodes=NodeTimelines(timeline, ["n1", "n2"]))
    assert "unknown_node" in DROP_REASONS
    assert not intake.receive(encode_hint("eval", node="n9"), "udp", "a")
    assert intake.counters["unknown_node"] == 1
    assert "'n9'" in intake.last_error and "n1, n2" in intake.last_error
    assert intake.receive(encode_hint("eval", node="n2"), "udp", "a")
    assert intake.counters["accepted"] == 1
    # a rack that lists no nodes refuses every node hint, and says why
    bare = HintIntake(StageTimeline(), clock=lambda: T0)
    assert not bare.receive(encode_hint("eval", node="n1"), "udp", "a")
    assert "lists no [[node]]" in bare.last_error


def test_node_hints_stay_on_their_node_and_rack_hints_on_the_rack() -> None:
    timeline = StageTimeline(ttl_s=60)
    nodes = NodeTimelines(timeline, ["n1", "n2"])
    intake = HintIntake(timeline, clock=lambda: T0 + 30, nodes=nodes)
    intake.receive(encode_hint("idle", ts=T0), "udp", "s")  # rack-wide
    intake.receive(encode_hint("checkpoint", job="a", ts=T0 + 10, node="n1"), "udp", "s")
    intake.receive(encode_hint("eval", job="b", ts=T0 + 20, node="n2"), "udp", "s")
    assert timeline.current(T0 + 30).stage == "idle"  # node hints never reach the rack timeline
    ts = np.array([T0 + 5, T0 + 15, T0 + 25, T0 + 15 + 61])
    stage, job = nodes.labels_at("n1", ts)
    assert stage.tolist() == ["", "checkpoint", "checkpoint", ""]  # before it, fresh, expired after ttl
    assert job.tolist() == ["", "a", "a", ""]
    assert nodes.labels_at("n2", ts)[0].tolist() == ["", "", "eval", "eval"]
    assert nodes.labels_at("n3", ts)[0].tolist() == ["", "", "", ""]


def test_a_reload_keeps_the_rings_of_nodes_still_listed() -> None:
    timeline = StageTimeline(ttl_s=60)
    nodes = NodeTimelines(timeline, ["n1", "n2"])
    nodes.apply(Hint("eval", T0, "udp", node="n1"))
    nodes.apply(Hint("eval", T0, "udp", node="n2"))
    timeline.ttl_s = 120
    after = nodes.for_nodes(["n1", "n3"])
    assert after.rack is timeline and sorted(after.nodes) == ["n1", "n3"]
    assert after.labels_at("n1", np.array([T0 + 90]))[0].tolist() == ["eval"]  # kept, new ttl
    assert len(after.nodes["n3"]) == 0


def test_node_hints_over_the_real_unix_socket_and_udp(sock_dir: Path) -> None:
    path = sock_dir / "stage.sock"  # a short directory: AF_UNIX paths are limited to 107 bytes
    port = free_port(socket.SOCK_DGRAM)

    async def main() -> None:
        _timeline, intake, listener = build_stage_input(
            StagesSection(socket_path=path, udp_port=port), nodes=["n1", "n2"]
        )
        async with listener:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
                s.sendto(encode_hint("checkpoint", job="j1", node="n1"), str(path))
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(encode_hint("eval", node="n2"), ("127.0.0.1", port))
                s.sendto(encode_hint("eval", node="ghost"), ("127.0.0.1", port))
            await _wait_for(lambda: intake.counters["accepted"] + intake.counters["unknown_node"] >= 3, 5.0)
        now = np.array([time.time()])
        assert intake.nodes.labels_at("n1", now)[0].tolist() == ["checkpoint"]
        assert intake.nodes.labels_at("n2", now)[0].tolist() == ["eval"]
        assert intake.counters["unknown_node"] == 1

    asyncio.run(asyncio.wait_for(main(), 10))
