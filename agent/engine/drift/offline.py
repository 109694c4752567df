"""Accepting a deviation while the agent is stopped: edit the drift section of its state file.

Why not a side file: the agent restores the state file on start, so an acceptance written into it
cannot be lost or applied twice. Understood: the engine's state file (``agent.engine.state``, the
drift state a space-padded JSON blob under ``drift``) and plain JSON (the drift part recognised by
its keys wherever nested). Replaced atomically (temp file, fsync, rename).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.engine.drift.monitor import DriftMonitor
from agent.engine.state import write_atomic

DRIFT_KEYS = frozenset({"version", "channels", "context", "incidents"})
MAX_STATE_BYTES = 64 * 1024 * 1024


class StateFileError(Exception):
    """A state file that cannot be used for an offline accept; the message says which and why."""


def _find_drift(node: Any, depth: int = 0) -> dict[str, Any] | None:
    if depth > 8:
        return None
    if isinstance(node, dict):
        if node.keys() >= DRIFT_KEYS and isinstance(node.get("channels"), dict):
            return node
        children = list(node.values())
    elif isinstance(node, list):
        children = node[:64]
    else:
        return None
    for value in children:
        found = _find_drift(value, depth + 1)
        if found is not None:
            return found
    return None


def _read_json(path: Path) -> Any:
    try:
        if path.stat().st_size > MAX_STATE_BYTES:
            raise StateFileError(f"state file {path} is larger than {MAX_STATE_BYTES >> 20} MiB")
        return json.loads(path.read_bytes())
    except FileNotFoundError as exc:
        raise StateFileError(f"state file {path} does not exist") from exc
    except OSError as exc:
        raise StateFileError(f"cannot read state file {path}: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StateFileError(f"state file {path} is not JSON ({exc})") from exc


def _engine_arrays(path: Path) -> dict[str, Any] | None:
    """The engine state file's arrays, or None when ``path`` is not one."""
    from agent.engine.state import MAGIC, StateError, unpack

    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise StateFileError(f"cannot read state file {path}: {exc.strerror or exc}") from exc
    if not blob.startswith(MAGIC):
        return None
    try:
        return unpack(blob)
    except StateError as exc:
        raise StateFileError(f"state file {path}: {exc}") from exc


def _accept_in_engine_file(
    path: Path, arrays: dict[str, Any], cause: str, ts: float
) -> list[dict[str, object]]:
    import numpy as np

    from agent.engine.state import pack

    blob = arrays.get("drift")
    if blob is None:
        raise StateFileError(f"state file {path} holds no drift-monitor state")
    try:
        section = json.loads(blob.tobytes().decode().strip() or "null")
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StateFileError(f"state file {path}: drift section is not JSON ({exc})") from exc
    if not isinstance(section, dict):
        raise StateFileError(f"state file {path} holds no drift-monitor state")
    events, updated = _accept_section(path, section, cause, ts)
    if not events:
        return []
    raw = json.dumps(updated, separators=(",", ":"), allow_nan=True).encode()
    size = blob.size
    while size < len(raw):
        size *= 2
    arrays["drift"] = np.frombuffer(raw.ljust(size, b" "), dtype=np.uint8).copy()
    _write_atomically(path, pack(arrays))
    return events


def _accept_section(
    path: Path, section: dict[str, Any], cause: str, ts: float
) -> tuple[list[dict[str, object]], dict[str, object]]:
    monitor = DriftMonitor()
    try:
        monitor.load_state(section)
    except ValueError as exc:
        raise StateFileError(f"state file {path}: {exc}") from exc
    events = monitor.accept_offline(cause, ts)
    return events, monitor.save_state()


def find_state_file(state_dir: Path) -> Path:
    """The file in ``state_dir`` that holds drift-monitor state (newest first)."""
    try:
        candidates = sorted(
            (p for p in state_dir.iterdir() if p.is_file() and not p.name.startswith(".")),
            key=lambda p: p.stat().st_mtime, reverse=True,
        )
    except OSError as exc:
        raise StateFileError(f"cannot list state directory {state_dir}: {exc.strerror or exc}") from exc
    for path in candidates:
        try:
            arrays = _engine_arrays(path)
            if arrays is not None and "drift" in arrays:
                return path
            if arrays is None and _find_drift(_read_json(path)) is not None:
                return path
        except StateFileError:
            continue
    raise StateFileError(f"no state file with drift-monitor state in {state_dir} (is --state needed?)")


def accept_in_state_file(path: Path, cause: str, ts: float) -> list[dict[str, object]]:
    """Accept ``cause`` (or ``all``) in the drift state saved in ``path``; returns the events."""
    arrays = _engine_arrays(path)
    if arrays is not None:
        return _accept_in_engine_file(path, arrays, cause, ts)
    tree = _read_json(path)
    section = _find_drift(tree)
    if section is None:
        raise StateFileError(f"state file {path} holds no drift-monitor state")
    events, updated = _accept_section(path, section, cause, ts)
    if not events:
        return []
    section.clear()
    section.update(updated)
    _write_atomically(path, json.dumps(tree, separators=(",", ":")).encode())
    return events


def _write_atomically(path: Path, data: bytes) -> None:
    """The engine's atomic write, with its failure as this module's error."""
    try:
        write_atomic(path, data)
    except OSError as exc:
        raise StateFileError(f"cannot write state file {path}: {exc.strerror or exc}") from exc
