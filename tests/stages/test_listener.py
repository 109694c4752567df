"""The asyncio endpoints with real sockets: delivery, permissions, stale files, floods."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from agent.config.model import StagesSection
from agent.stages.hints import Command
from agent.stages.intake import HintIntake
from agent.stages.listener import HintListener, bind_unix_datagram, command_policy
from agent.stages.timeline import NodeTimelines, StageTimeline
from tests.conftest import free_port


def build_stage_input(
    stages: StagesSection, on_command: Callable[[Command], None] | None = None, nodes: Iterable[str] = ()
) -> tuple[StageTimeline, HintIntake, HintListener]:
    """The timeline, intake and listener from a ``[stages]`` section: the minimal wiring these tests need
    (the live agent also passes a clock and an energy-query handler)."""
    timeline = StageTimeline(ttl_s=stages.hint_ttl_s)
    intake = HintIntake(timeline, rate_limit_per_s=stages.rate_limit_per_s, on_command=on_command,
                        command_policy=command_policy(stages), nodes=NodeTimelines(timeline, nodes))
    return timeline, intake, HintListener(intake, stages.socket_path, stages.udp_port)


async def _drained(intake, quiet_s: float = 0.3, timeout_s: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    """Wait until the intake's counters stop moving for ``quiet_s`` (bounded)."""
    deadline = time.monotonic() + timeout_s
    last, since = dict(intake.counters), time.monotonic()
    while time.monotonic() - since < quiet_s and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        now = dict(intake.counters)
        if now != last:
            last, since = now, time.monotonic()


async def _wait_for(predicate, timeout_s: float = 3.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


def test_unix_and_udp_hints_reach_the_timeline(sock_dir: Path) -> None:
    path = sock_dir / "stage.sock"
    port = free_port(socket.SOCK_DGRAM)

    async def main() -> None:
        timeline, intake, listener = build_stage_input(StagesSection(socket_path=path, udp_port=port))
        async with listener:
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o660
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
                s.sendto(b'{"stage": "checkpoint", "job": "j1"}', str(path))
            await _wait_for(lambda: intake.counters["accepted"] == 1)
            assert timeline.current(time.time()).stage == "checkpoint"
            assert timeline.current(time.time()).source == "unix"
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(b'{"stage": "eval", "work_rate": 3.5}', ("127.0.0.1", port))
                s.sendto(b"{broken", ("127.0.0.1", port))
            await _wait_for(lambda: intake.counters["malformed"] == 1)
            now = timeline.current(time.time())
            assert (now.stage, now.work_rate, now.source) == ("eval", 3.5, "udp")
        assert not path.exists()  # removed on stop

    asyncio.run(asyncio.wait_for(main(), 10))


def test_stale_socket_file_is_replaced_but_live_one_and_regular_file_are_not(sock_dir: Path) -> None:
    path = sock_dir / "stage.sock"
    old = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    old.bind(str(path))
    with pytest.raises(OSError, match="another process"):
        bind_unix_datagram(path)
    old.close()  # the file stays behind, as after a crash
    assert path.exists()
    sock = bind_unix_datagram(path)
    sock.close()
    other = sock_dir / "file"
    other.write_text("not a socket")
    with pytest.raises(OSError, match="not a socket"):
        bind_unix_datagram(other)
    assert other.read_text() == "not a socket"


def test_flood_is_counted_and_a_concurrent_ticker_keeps_its_cadence(sock_dir: Path) -> None:
    """A sender blasting datagrams must not stall the agent's other work."""
    path = sock_dir / "stage.sock"
    port = free_port(socket.SOCK_DGRAM)
    tick_s = 0.02

    async def main() -> tuple[list[float], dict[str, int], str]:
        timeline, intake, listener = build_stage_input(
            StagesSection(socket_path=path, udp_port=port, rate_limit_per_s=50)
        )
        gaps: list[float] = []
        stop = asyncio.Event()

        async def ticker() -> None:
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(tick_s)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        def flood() -> None:  # a separate thread, like a misbehaving process
            bad = [b'{"stage": "eval"}', b"garbage" * 20, b'{"stage": "BAD"}', b"x" * 4000]
            deadline = time.monotonic() + 1.5
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.setblocking(False)
                i = 0
                while time.monotonic() < deadline:
                    try:
                        s.sendto(bad[i % len(bad)], ("127.0.0.1", port))
                    except BlockingIOError:
                        time.sleep(0.0005)
                    i += 1

        async with listener:
            task = asyncio.create_task(ticker())
            await asyncio.to_thread(flood)
            # once the kernel's backlog of flood datagrams is read (a late "eval" from it would
            # overwrite the stage; on a loaded box that took longer than the wait below), an
            # honest sender still gets through
            await _drained(intake)
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
                s.bind("")
                s.sendto(b'{"stage": "checkpoint"}', str(path))
            await _wait_for(lambda: timeline.current(time.time()).stage == "checkpoint")
            stop.set()
            await task
        return gaps, intake.counters, timeline.current(time.time()).stage

    gaps, counters, _ = asyncio.run(asyncio.wait_for(main(), 20))
    assert counters["flood"] > 100, counters
    assert counters["accepted"] >= 2
    assert sum(counters[k] for k in ("malformed", "bad_label", "too_large")) > 0
    # the ticker ran throughout: no tick was starved (generous bound for a loaded CI box)
    assert len(gaps) >= 1.5 / tick_s * 0.5
    assert max(gaps) < 0.5, max(gaps)
    gaps.sort()
    assert gaps[len(gaps) // 2] < tick_s * 3


def test_client_to_listener_survives_an_agent_restart(sock_dir: Path) -> None:
    """The client keeps sending while the agent stops and starts; the new agent hears it."""
    from agent.stages.client import StageClient

    path = sock_dir / "stage.sock"

    async def main() -> None:
        client = StageClient(socket_path=str(path), keepalive_s=0.3)
        timeline, _intake, listener = build_stage_input(StagesSection(socket_path=path))
        await listener.start()
        client.begin("forward_backward", job="run-1")
        await _wait_for(lambda: timeline.current(time.time()).stage == "forward_backward")
        assert timeline.current(time.time()).job == "run-1"
        await listener.stop()  # agent down
        client.end("forward_backward")
        client.begin("checkpoint")  # no error with nobody listening
        timeline2, _, listener2 = build_stage_input(StagesSection(socket_path=path))
        await listener2.start()  # agent back
        await _wait_for(lambda: timeline2.current(time.time()).stage == "checkpoint")
        await listener2.stop()
        client.close()

    asyncio.run(asyncio.wait_for(main(), 15))


ACCEPT = b'{"command": "accept", "cause": "power_chain"}'
SEND_AS_OTHER_USER = (
    "import socket, sys\n"
    "s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
    "for d in sys.argv[2:]: s.sendto(d.encode(), sys.argv[1])\n"
)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to send as another user")
def test_accept_needs_a_permitted_unix_peer_and_is_refused_over_udp(sock_dir: Path) -> None:
    """`nobody` can reach a too-open socket, but its accept is refused; its hint still counts."""
    import subprocess
    import sys

    path = sock_dir / "stage.sock"
    port = free_port(socket.SOCK_DGRAM)
    commands: list[object] = []

    async def main() -> dict[str, int]:
        _timeline, intake, listener = build_stage_input(
            StagesSection(socket_path=path, udp_port=port), on_command=commands.append
        )
        async with listener:
            os.chmod(sock_dir, 0o755)
            os.chmod(path, 0o666)  # a misconfigured socket: any local user can write to it
            proc = await asyncio.to_thread(
                subprocess.run,
                [sys.executable, "-c", SEND_AS_OTHER_USER, str(path), ACCEPT.decode(), '{"stage":"eval"}'],
                user=65534, group=65534, capture_output=True, timeout=20,
            )
            assert proc.returncode == 0, proc.stderr
            await _wait_for(lambda: intake.counters["accepted"] == 1)
            assert intake.counters["unauthorized"] == 1 and not commands
            assert "uid 65534" in intake.last_error
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(ACCEPT, ("127.0.0.1", port))
            await _wait_for(lambda: intake.counters["unauthorized"] == 2)
            assert not commands
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:  # root, unbound: permitted
                s.sendto(ACCEPT, str(path))
            await _wait_for(lambda: len(commands) == 1)
            return intake.counters

    counters = asyncio.run(asyncio.wait_for(main(), 30))
    assert counters["commands"] == 1 and counters["unauthorized"] == 2


def _proc_udp_drops(port: int) -> int:
    """The kernel's drop count for the UDP socket on 127.0.0.1:port (/proc/net/udp, last column)."""
    local = f"0100007F:{port:04X}"
    with open("/proc/net/udp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[1] == local:
                return int(fields[-1])
    raise AssertionError(f"no UDP socket on {local}")


@pytest.mark.skipif(not Path("/proc/net/udp").exists(), reason="Linux /proc needed to cross-check")
def test_kernel_drops_on_the_udp_socket_are_counted(sock_dir: Path) -> None:
    """Datagrams the kernel dropped while the agent was busy show up in the hint counters."""
    port = free_port(socket.SOCK_DGRAM)

    async def main() -> tuple[int, int]:
        _timeline, intake, listener = build_stage_input(StagesSection(socket_path=None, udp_port=port))
        async with listener:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.setblocking(False)
                for _ in range(20000):  # the event loop is not reading: the queue overflows
                    with contextlib.suppress(BlockingIOError):
                        s.sendto(b'{"stage": "eval"}', ("127.0.0.1", port))
            kernel = _proc_udp_drops(port)
            assert kernel > 0
            await _drained(intake)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:  # carries the final count
                s.sendto(b'{"stage": "eval"}', ("127.0.0.1", port))
            await _wait_for(lambda: intake.counters.get("kernel_drops_udp", 0) >= kernel)
            return intake.counters["kernel_drops_udp"], kernel

    seen, kernel = asyncio.run(asyncio.wait_for(main(), 30))
    assert seen == kernel
