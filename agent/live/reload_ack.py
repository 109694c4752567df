"""The agent's verdict on a reload, so that ``systemctl reload`` fails when the agent rejects it.

A SIGHUP always "succeeds", so ``ExecReload=/usr/bin/rackwatt reload --pid $MAINPID`` (``request``)
signals the agent and waits for the verdict its reload (``report``) writes to
``$RUNTIME_DIRECTORY/reload-status``, one JSON object ``{"pid", "seq", "ok", "detail"}``; ``seq``
counts this process's verdicts, so ``request`` knows which is for its signal. Outside systemd there
is no runtime directory: ``report`` does nothing and ``request`` says why it cannot wait.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

STATUS_NAME = "reload-status"
# How long `request` waits for the verdict: the agent's loop wakes at once on SIGHUP, so a
# verdict comes within a second or two; 30 s is the agent's watchdog ping period (half of the
# unit's WatchdogSec=60), beyond which its loop is stalled and systemd restarts it anyway.
WAIT_S = 30.0
POLL_S = 0.05  # the status file is re-read this often while waiting (cheap: one small file)

_seq = 0


@dataclass(frozen=True)
class Verdict:
    pid: int
    seq: int
    ok: bool
    detail: str


def status_path(environ: dict[str, str] | None = None) -> Path | None:
    """``$RUNTIME_DIRECTORY/reload-status`` (the first folder if systemd lists several), or None."""
    runtime = (os.environ if environ is None else environ).get("RUNTIME_DIRECTORY", "")
    first = runtime.split(":")[0]
    return Path(first) / STATUS_NAME if first else None


def report(ok: bool, detail: str) -> None:
    """Agent side: record this reload's verdict (atomically: a reader never sees half a file)."""
    global _seq
    path = status_path()
    if path is None:
        return
    _seq += 1
    record = {"pid": os.getpid(), "seq": _seq, "ok": ok, "detail": detail}
    tmp = path.with_name(f".{STATUS_NAME}.{os.getpid()}")
    try:
        tmp.write_text(json.dumps(record) + "\n")
        os.replace(tmp, path)
    except OSError:
        pass  # no verdict file: `systemctl reload` times out and fails, which is the safe side


def reject(path: Path, exc: Exception, log: logging.Logger) -> None:
    """Agent side: a new configuration that did not load; every problem logged, the verdict recorded."""
    issues = getattr(exc, "issues", None) or [exc]
    log.error("reload: %s is not valid; still running the previous configuration (%d problem(s))", path,
              len(issues))
    for issue in issues:
        log.error("reload: %s", issue)
    report(False, f"{path}: {len(issues)} problem(s), first: {issues[0]}")


def read(path: Path) -> Verdict | None:
    try:
        data = json.loads(path.read_text())
        return Verdict(int(data["pid"]), int(data["seq"]), bool(data["ok"]), str(data["detail"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def request(pid: int, path: Path, wait_s: float = WAIT_S) -> Verdict:
    """Helper side: SIGHUP ``pid`` and wait for its next verdict. Raises TimeoutError, OSError."""
    before = read(path)
    last_seq = before.seq if before is not None and before.pid == pid else 0
    os.kill(pid, signal.SIGHUP)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        verdict = read(path)
        if verdict is not None and verdict.pid == pid and verdict.seq > last_seq:
            return verdict
        time.sleep(POLL_S)
    raise TimeoutError(f"the agent (pid {pid}) gave no verdict on the reload within {wait_s:.0f} s")
