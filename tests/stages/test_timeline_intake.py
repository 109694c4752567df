"""Timeline expiry and ordering; intake rate limit, counting and command dispatch."""

from __future__ import annotations

import math

import pytest

from agent.stages.hints import Command, Hint
from agent.stages.intake import HintIntake
from agent.stages.peers import CommandPolicy, PeerCred
from agent.stages.timeline import StageTimeline

T0 = 1_764_400_000.0


class FakeClock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_hint_holds_then_expires_to_unknown() -> None:
    tl = StageTimeline(ttl_s=60)
    assert tl.current(T0).source == "none"
    tl.apply(Hint("eval", T0, "udp", "j1", 10.0))
    assert tl.current(T0 + 59) == ("eval", "j1", 10.0, "udp")
    now = tl.current(T0 + 61)
    assert now.stage == "" and now.source == "expired"
    assert tl.expired == 1
    tl.current(T0 + 62)
    assert tl.expired == 1  # counted once per expiry, not per tick


def test_late_hint_lands_at_its_own_time() -> None:
    tl = StageTimeline(ttl_s=600)
    tl.apply(Hint("forward_backward", T0, "unix"))
    tl.apply(Hint("checkpoint", T0 + 20, "unix"))
    tl.apply(Hint("grad_sync", T0 + 10, "mqtt"))  # arrived late
    assert tl.current(T0 + 5).stage == "forward_backward"
    assert tl.current(T0 + 15).stage == "grad_sync"
    assert tl.current(T0 + 25).stage == "checkpoint"
    assert math.isnan(tl.current(T0 + 25).work_rate)


def test_timeline_memory_is_bounded() -> None:
    tl = StageTimeline(ttl_s=600, capacity=8)
    for i in range(1000):
        tl.apply(Hint("eval", T0 + i, "udp"))
    assert len(tl) == 8


def test_intake_counts_each_reason_and_applies_good_hints() -> None:
    clock = FakeClock()
    tl = StageTimeline(ttl_s=60)
    intake = HintIntake(tl, rate_limit_per_s=1000, clock=clock)
    assert intake.receive(b'{"stage": "eval"}', "udp", "a")
    assert not intake.receive(b"garbage", "udp", "a")
    assert not intake.receive(b'{"stage": "eval", "x": 1}', "udp", "a")
    assert not intake.receive(b'{"stage": "EVAL"}', "udp", "a")
    assert not intake.receive(b'{"stage": "eval", "ts": %f}' % (T0 - 120), "udp", "a")
    c = intake.counters
    assert (c["accepted"], c["malformed"], c["unknown_field"], c["bad_label"], c["stale"]) == (1, 1, 1, 1, 1)
    assert tl.current(T0).stage == "eval"
    assert "stale" in intake.last_error or "old" in intake.last_error


def test_flood_from_one_sender_is_limited_and_others_still_get_through() -> None:
    clock = FakeClock()
    tl = StageTimeline(ttl_s=60)
    intake = HintIntake(tl, rate_limit_per_s=50, clock=clock)
    accepted = sum(intake.receive(b'{"stage": "eval"}', "udp", "flooder") for _ in range(10_000))
    assert accepted <= 51
    assert intake.counters["flood"] == 10_000 - accepted
    assert intake.receive(b'{"stage": "checkpoint"}', "unix", "polite")
    clock.now += 1.0  # a second later the flooder has a second's allowance again
    again = sum(intake.receive(b'{"stage": "eval"}', "udp", "flooder") for _ in range(1000))
    assert 40 <= again <= 51


def test_many_senders_cannot_grow_the_table() -> None:
    intake = HintIntake(StageTimeline(), rate_limit_per_s=5, clock=FakeClock(), max_senders=16)
    for port in range(5000):
        intake.receive(b'{"stage": "eval"}', "udp", f"127.0.0.1:{port}")
    assert len(intake._buckets) <= 16
    assert intake.counters["flood"] > 0  # the global bucket caps the sum


def test_commands_are_dispatched_and_handler_errors_contained() -> None:
    seen: list[Command] = []

    def handler(cmd: Command) -> None:
        seen.append(cmd)
        raise RuntimeError("handler bug")

    intake = HintIntake(StageTimeline(), on_command=handler, clock=FakeClock())
    root = PeerCred(pid=1, uid=0, gid=0)
    assert intake.receive(b'{"command": "accept", "cause": "cooling"}', "unix", root.key, peer=root)
    assert seen and seen[0].cause == "cooling"
    assert intake.counters["commands"] == 1


ACCEPT = b'{"command": "accept", "cause": "power_chain"}'


def test_commands_need_the_unix_socket_and_a_permitted_sender() -> None:
    seen: list[Command] = []
    policy = CommandPolicy(uids={0}, gids={997})
    intake = HintIntake(StageTimeline(), on_command=seen.append, clock=FakeClock(), command_policy=policy)
    nobody = PeerCred(pid=40, uid=65534, gid=65534)
    member = PeerCred(pid=41, uid=1000, gid=997)
    assert not intake.receive(ACCEPT, "udp", "127.0.0.1:5000")  # UDP: no identity, hints only
    assert not intake.receive(ACCEPT, "mqtt", "broker")  # the hint topic is not cmd/accept
    assert not intake.receive(ACCEPT, "unix", "unbound")  # no credentials
    assert not intake.receive(ACCEPT, "unix", nobody.key, peer=nobody)
    assert intake.counters["unauthorized"] == 4 and not seen
    assert "uid 65534" in intake.last_error
    assert intake.receive(ACCEPT, "unix", member.key, peer=member)
    assert [c.cause for c in seen] == ["power_chain"]
    # a refused sender's hints still count: only commands need permission
    assert intake.receive(b'{"stage": "eval"}', "unix", nobody.key, peer=nobody)


def test_command_policy_defaults_and_group_names() -> None:
    import grp
    import os

    policy = CommandPolicy.from_config(None, None)
    assert policy.permits(PeerCred(pid=1, uid=0, gid=12345))
    assert policy.permits(PeerCred(pid=1, uid=54321, gid=os.getegid()))
    assert not policy.permits(PeerCred(pid=1, uid=54321, gid=54321))
    assert not policy.permits(None)
    root_group = grp.getgrgid(0).gr_name
    assert CommandPolicy.from_config([], [root_group]).gids == {0}
    with pytest.raises(ValueError, match="no such group 'no-such-group-x'"):
        CommandPolicy.from_config(None, ["no-such-group-x"])


def test_each_unix_process_has_its_own_bucket() -> None:
    """One flooding process must not get another process's hints dropped as flood."""
    clock = FakeClock()
    intake = HintIntake(StageTimeline(), rate_limit_per_s=10, clock=clock)
    flooder = PeerCred(pid=50, uid=65534, gid=65534)
    job = PeerCred(pid=51, uid=1000, gid=1000)
    for _ in range(1000):
        intake.receive(b'{"stage": "eval"}', "unix", flooder.key, peer=flooder)
    assert intake.counters["flood"] >= 990
    assert intake.receive(b'{"stage": "checkpoint"}', "unix", job.key, peer=job)


def test_kernel_drops_are_shown_as_a_counter() -> None:
    intake = HintIntake(StageTimeline(), clock=FakeClock())
    assert not any(k.startswith("kernel_drops") for k in intake.counters)
    intake.note_kernel_drops("udp", 7)
    intake.note_kernel_drops("udp", 3)  # the kernel's count never goes back; a stale value is ignored
    assert intake.counters["kernel_drops_udp"] == 7


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        StageTimeline(ttl_s=0)
    with pytest.raises(ValueError):
        HintIntake(StageTimeline(), rate_limit_per_s=0)


def test_repeated_drops_are_logged_on_the_agent_wide_cadence(caplog: pytest.LogCaptureFixture) -> None:
    """Every drop is counted; the journal gets the 1st, 10th and 100th (logsetup.worth_logging)."""
    intake = HintIntake(StageTimeline(), rate_limit_per_s=1000, clock=FakeClock())
    with caplog.at_level("WARNING", logger="agent.stages.intake"):
        for _ in range(120):
            intake.receive(b"garbage", "udp", "a")
    assert intake.counters["malformed"] == 120
    logged = [r.getMessage() for r in caplog.records if "stage hint dropped" in r.getMessage()]
    assert len(logged) == 3 and "100 so far" in logged[-1]
