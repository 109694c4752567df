"""Value rules shared by every section's rules (the driver rooms' and ``agent.config.rules``): ranges,
choices, patterns, file checks, profile names. Messages read as the end of ``<key path>: ...``.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

from agent.config.convert import MISSING, Check, Context, show, suggest
from agent.config.secrets import secret_file_problem
from agent.config.toml_lines import KeyPath

ID_PATTERN = r"[a-z0-9_]+"
NAME_PATTERN = r"[a-z][a-z0-9_]*"
# Keys holding files: secrets (warn when others can read them) and other files that must exist.
SECRET_FILE_KEYS = ("community_file", "auth_key_file", "priv_key_file", "password_file", "key_file")
OTHER_FILE_KEYS = ("ca_file", "cert_file", "client_ca_file")


def positive(value: float) -> str | None:
    return None if value > 0 else f"must be > 0, got {show(value)}"


def between(low: float, high: float) -> Check:
    def check(value: float) -> str | None:
        return None if low <= value <= high else f"must be between {low} and {high}, got {show(value)}"

    return check


def fraction(value: float) -> str | None:
    return None if 0 < value <= 1 else f"must be in (0, 1], got {show(value)}"


def nonzero(value: float) -> str | None:
    return None if value != 0 else "must not be 0"


def one_of(*choices: str) -> Check:
    listed = ", ".join(f'"{c}"' for c in choices)
    return lambda value: None if value in choices else f"must be one of {listed}, got {show(value)}"


def matches(pattern: str, why: str = "") -> Check:
    compiled = re.compile(pattern)
    note = f" ({why})" if why else ""
    return lambda value: (
        None if compiled.fullmatch(value) else f"must match {pattern}{note}, got {show(value)}"
    )


def not_empty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


PORT = between(1, 65535)


def snmp_version(ctx: Context, path: KeyPath, value: Any) -> Any:
    """``pdu.version`` is text: ``version = 3`` is a common slip worth a precise message."""
    if not isinstance(value, str):
        ctx.error(path, f'must be the string "2c" or "3", got {show(value)} (not a string)')
        return MISSING
    return value


def check_file(ctx: Context, path: KeyPath, value: Any) -> None:
    """Secret files must exist, be usable, and should be private; CA and certificate files must exist."""
    key = path[-1]
    if not isinstance(value, Path):
        return
    if key in SECRET_FILE_KEYS:
        problem = secret_file_problem(value)
        if problem:
            severity, message = problem
            (ctx.error if severity == "error" else ctx.warn)(path, message)
    elif key in OTHER_FILE_KEYS:
        try:
            exists = value.is_file()
        except OSError as exc:
            ctx.error(path, f"cannot check {value}: {exc.strerror or exc}")
            return
        if not exists:
            ctx.error(path, f"file {value} does not exist")


def profile_names(family: str, suffix: str) -> list[str] | None:
    """Names of the profiles a driver ships (file stems in ``drivers/<family>/profiles``; importing the
    driver would pull in pysnmp/pymodbus); None when it is not installed (only the form is checked)."""
    spec = importlib.util.find_spec("drivers")
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        folder = Path(location) / family / "profiles"
        if folder.is_dir():
            return sorted(p.stem for p in folder.glob(f"*{suffix}"))
    return None


def known_profile(family: str, suffix: str, extra: tuple[str, ...]) -> Check:
    def check(value: str) -> str | None:
        names = profile_names(family, suffix)
        if names is None or value in names or value in extra:
            return None
        known = sorted({*names, *extra})
        listed = ", ".join(f'"{n}"' for n in known)
        return f"unknown profile {show(value)}{suggest(value, known)} (known: {listed})"

    return check


def unique_signals(ctx: Context, path: KeyPath, signals: list[str]) -> None:
    for index, signal in enumerate(signals):
        if signal in signals[:index]:
            ctx.error((*path, index, "signal"), f"{show(signal)} appears twice")
