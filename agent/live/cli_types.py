"""Argument types and the terminal test shared by the command-line tools (``demo``, ``watch``,
``sparkplug``).

Light on purpose: stdlib only, so ``rackwatt watch`` and ``rackwatt sparkplug`` load neither the
demo (twin, fake devices, engine) nor a driver library just to parse ``--mqtt HOST:PORT``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class MqttTarget:
    host: str
    port: int


def host_port(text: str) -> MqttTarget:
    host, sep, port = text.rpartition(":")
    if not sep or not host:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    try:
        number = int(port)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port must be a number, got {port!r}") from None
    if not 1 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"port must be in 1..65535, got {number}")
    return MqttTarget(host, number)


def positive(text: str) -> float:
    return _number(text, "> 0", lambda value: value > 0)


def non_negative(text: str) -> float:
    return _number(text, ">= 0", lambda value: value >= 0)


def _number(text: str, rule: str, holds: Callable[[float], bool]) -> float:
    """``text`` as a number the rule holds for (never NaN: no comparison holds for it)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not holds(value):
        raise argparse.ArgumentTypeError(f"must be {rule}, got {text}")
    return value


def interactive_terminal() -> bool:
    """A full-screen view only on a real terminal (not pipes, CI, or TERM=dumb)."""
    if os.environ.get("CI") or os.environ.get("TERM", "") in ("", "dumb"):
        return False
    return sys.stdout.isatty() and sys.stderr.isatty()
