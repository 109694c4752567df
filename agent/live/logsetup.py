"""Logging for the long-running commands: stderr, one line per event, journald-friendly, no secrets.

Under systemd (``JOURNAL_STREAM`` set) lines carry a ``<N>`` syslog priority prefix and no
timestamp (journald adds both); elsewhere an ISO timestamp. Registered secrets become ``***`` in
every line. Third-party libraries (paho, pymodbus, pysnmp, pyasn1) log errors during ordinary
reconnects without naming the device, which the agent's own lines do; so their lines are demoted
(``library_priority``: error → info, warning → debug, tracebacks folded), their level kept in the text.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import TextIO

_SECRETS: set[str] = set()
_scrubber: re.Pattern[str] | None = None
_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}
# A secret this long or longer is scrubbed wherever it occurs. A shorter one would also match
# inside ordinary words ("pw" in "pwd"), so it is scrubbed where it stands alone, between
# non-alphanumerics (key=pw, "pw", user:pw@host): the only places it can be told apart as a secret.
SUBSTRING_MIN_CHARS = 4
LIBRARY_LOGGERS = ("paho", "rackwatt.mqtt.paho", "pymodbus", "pysnmp", "pyasn1")
_DEMOTED = {logging.CRITICAL: logging.WARNING, logging.ERROR: logging.INFO, logging.WARNING: logging.DEBUG}


def worth_logging(count: int) -> bool:
    """Log the 1st, 10th, 100th and every 1000th time a condition repeats: the journal shows that
    it goes on (and how often) without one line per occurrence."""
    return count in (1, 10, 100) or count % 1000 == 0


def register_secret(secret: str) -> None:
    """Never print ``secret``: every log line is scrubbed of it, whatever its length."""
    global _scrubber
    if not secret or secret in _SECRETS:
        return
    _SECRETS.add(secret)
    parts = []
    for known in sorted(_SECRETS, key=len, reverse=True):  # longest first: no partial scrubs
        escaped = re.escape(known)
        if len(known) >= SUBSTRING_MIN_CHARS:
            parts.append(escaped)
        else:
            parts.append(rf"(?<![A-Za-z0-9]){escaped}(?![A-Za-z0-9])")
    _scrubber = re.compile("|".join(parts))


def scrub(text: str) -> str:
    if _scrubber is None:
        return text
    return _scrubber.sub("***", text)


def library_priority(record: logging.LogRecord) -> logging.LogRecord:
    """Demote a third-party library's record (see the module docstring); others pass unchanged."""
    name = record.name
    if not any(name == lib or name.startswith(lib + ".") for lib in LIBRARY_LOGGERS):
        return record
    level = _DEMOTED.get(record.levelno, record.levelno)
    text = f"{name} {record.levelname}: {record.getMessage()}"
    if record.exc_info and record.exc_info[1] is not None:
        exc = record.exc_info[1]
        text += f" ({type(exc).__name__}: {exc})"
    demoted = logging.makeLogRecord(record.__dict__)
    demoted.msg, demoted.args = text, None
    demoted.exc_info, demoted.exc_text, demoted.stack_info = None, None, None
    demoted.levelno, demoted.levelname = level, logging.getLevelName(level)
    return demoted


class _AgentHandler(logging.StreamHandler[TextIO]):
    """stderr handler that applies ``library_priority``, then the threshold to the demoted level
    (a copy is demoted, so other handlers, e.g. pytest's, see the library's record unchanged)."""

    def __init__(self, stream: TextIO, threshold: int) -> None:
        super().__init__(stream)
        self.threshold = threshold

    def handle(self, record: logging.LogRecord) -> bool:
        record = library_priority(record)
        if record.levelno < self.threshold:
            return False
        return bool(super().handle(record))


class _OneLineFormatter(logging.Formatter):
    """One event, one line: tracebacks are folded with `` | `` so journald keeps them together."""

    def __init__(self, journald: bool) -> None:
        fmt = "%(message)s" if journald else "%(asctime)s %(levelname)s %(message)s"
        super().__init__(fmt, datefmt="%Y-%m-%dT%H:%M:%S%z")
        self.journald = journald

    def format(self, record: logging.LogRecord) -> str:
        text = scrub(super().format(record)).replace("\r", "").replace("\n", " | ")
        if self.journald:
            return f"<{_PRIORITY.get(record.levelno, 6)}>{text}"
        return text


def setup_logging(verbose: bool = False, stream: TextIO | None = None) -> None:
    """Configure the root logger once for a command (idempotent: replaces earlier handlers)."""
    journald = bool(os.environ.get("JOURNAL_STREAM"))
    handler = _AgentHandler(stream or sys.stderr, logging.DEBUG if verbose else logging.INFO)
    handler.setFormatter(_OneLineFormatter(journald))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    # below warning a library only chatters; from warning up it is shown, demoted (library_priority)
    for noisy in (*LIBRARY_LOGGERS, "asyncio"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose else logging.WARNING)
