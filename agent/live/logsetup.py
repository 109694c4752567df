"""Logging for the long-running commands: stderr, one line per event, journald-friendly, no secrets.

Under systemd (``JOURNAL_STREAM`` set) lines carry no timestamp (journald adds its own) and start
with a ``<N>`` syslog priority prefix, which journald turns into the entry's priority. Elsewhere
lines start with an ISO timestamp. Secrets read by the agent (``register_secret``) are replaced by
``***`` in every line, whatever logged them.
"""

from __future__ import annotations

import logging
import os
import sys

_SECRETS: set[str] = set()
_PRIORITY = {logging.DEBUG: 7, logging.INFO: 6, logging.WARNING: 4, logging.ERROR: 3, logging.CRITICAL: 2}


def register_secret(secret: str) -> None:
    """Never print ``secret``: every log line is scrubbed of it (short strings are ignored)."""
    if len(secret) >= 4:
        _SECRETS.add(secret)


def scrub(text: str) -> str:
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, "***")
    return text


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


def setup_logging(verbose: bool = False, stream: object = None) -> None:
    """Configure the root logger once for a command (idempotent: replaces earlier handlers)."""
    journald = bool(os.environ.get("JOURNAL_STREAM"))
    handler = logging.StreamHandler(stream or sys.stderr)  # type: ignore[arg-type]
    handler.setFormatter(_OneLineFormatter(journald))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(logging.DEBUG if verbose else logging.INFO)
    for noisy in ("pymodbus", "pysnmp", "asyncio", "rackwatt.mqtt.paho"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if verbose else logging.WARNING)
