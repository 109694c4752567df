"""The live loop's thin view of the engine (``agent.engine``): process, payloads, accept, state.

Why a link: the loop must not care how the engine is constructed or how it serialises its
state; this module is the one place that knows. State files are written atomically (temp file,
fsync, rename, directory fsync); one that cannot be loaded is set aside with a clear message and
the engine starts fresh, so a crash can never cause a crash loop.
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.config.model import Config
from agent.engine.state import write_atomic
from agent.trace.model import TraceChunk

log = logging.getLogger("rackwatt.engine")


def set_aside(path: Path, why: str) -> Path:
    """Rename a bad state file out of the way (kept for a post-mortem) and say so."""
    aside = path.with_name(f"{path.name}.bad-{int(time.time())}")
    try:
        path.rename(aside)
    except OSError as exc:
        log.error("state file %s cannot be loaded (%s) nor moved aside (%s); starting fresh", path, why, exc)
        return path
    log.error("state file %s cannot be loaded (%s); kept it as %s and started fresh", path, why, aside.name)
    return aside


def _takes_argument(fn: Any) -> bool:
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return False
    return bool(params)


class EngineLink:
    """Adapter over an engine object offering ``process``; everything else is optional."""

    def __init__(self, engine: Any, loader: Callable[[bytes], Any] | None = None) -> None:
        self.engine = engine
        self._loader = loader  # bytes → a restored engine (when the engine restores by construction)

    @classmethod
    def from_config(cls, config: Config) -> EngineLink | None:
        """The real engine for ``config``, or None (logged) when it cannot be set up."""
        try:
            from agent.engine import Engine, rack_info
        except ImportError as exc:
            log.error(
                "engine: not available in this build (%s); the agent will poll and report status only", exc
            )
            return None
        rack = rack_info(config=config)
        kwargs = {
            "site": config.agent.site,
            "rack_name": config.agent.rack,
            "topic_root": config.mqtt.topic_root,
        }
        try:
            engine = Engine(config.engine, rack, **kwargs)
        except Exception as exc:  # a broken engine must not stop polling and status
            log.error(
                "engine: cannot be set up (%s: %s); the agent will poll and report status only",
                type(exc).__name__,
                exc,
            )
            return None
        return cls(engine, loader=lambda blob: Engine.load_state(blob, config.engine, rack, **kwargs))

    def process(self, chunk: TraceChunk) -> list[dict[str, Any]]:
        out = self.engine.process(chunk)
        return list(out) if out else []

    def summary_payload(self, ts: float) -> dict[str, Any] | None:
        fn = getattr(self.engine, "summary_payload", None)
        return fn(ts) if fn is not None else None

    def capabilities(self) -> dict[str, Any] | None:
        """What the rack's data lets the engine do now (see agent/engine/capabilities.py)."""
        from agent.engine.engine import Engine

        return self.engine.capabilities() if isinstance(self.engine, Engine) else None

    def baseline_payloads(self, ts: float) -> dict[str, dict[str, Any]]:
        """stage → retained baseline payload."""
        fn = getattr(self.engine, "baseline_payloads", None)
        if fn is None:
            return {}
        found = fn(ts)
        if isinstance(found, dict):
            return dict(found)
        return {str(p.get("stage")): p for p in found or () if isinstance(p, dict) and p.get("stage")}

    def accept(self, cause: str, ts: float, by: str) -> list[dict[str, Any]]:
        """Operator accepts the active deviation of ``cause`` (or component) as the new normal."""
        target = self.engine
        fn = getattr(target, "accept", None)
        if fn is None:
            target = getattr(self.engine, "drift", None) or getattr(self.engine, "monitor", None)
            fn = getattr(target, "accept", None)
        if fn is None:
            raise ValueError("this engine cannot accept deviations")
        out = fn(cause, ts, by=by)
        return list(out) if out else []

    # ---- state -----------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        fn = getattr(self.engine, "save_state", None)
        if fn is None:
            return
        if _takes_argument(fn):
            fn(path)  # the engine writes it (atomically, per its own contract)
            return
        data = fn()
        if isinstance(data, str):
            data = data.encode()
        elif not isinstance(data, bytes | bytearray):
            data = json.dumps(data, separators=(",", ":")).encode()
        write_atomic(path, bytes(data))

    def load(self, path: Path) -> bool:
        """Restore the state saved at ``path``; a bad file is set aside (never raises)."""
        fn = getattr(self.engine, "load_state", None)
        if fn is None or not path.exists():
            return False
        try:
            if self._loader is not None:
                restored = self._loader(path.read_bytes())
            else:
                params = list(inspect.signature(fn).parameters)
                if params and params[0] in ("path", "file", "filename", "state_path"):
                    restored = fn(path)
                else:
                    restored = fn(path.read_bytes())
            if restored is not None and hasattr(restored, "process"):
                self.engine = restored  # load_state built a new engine from the saved state
        except Exception as exc:
            set_aside(path, f"{type(exc).__name__}: {exc}")
            return False
        log.info("engine: state restored from %s", path)
        return True


class NullEngine:
    """Stands in when no engine is available (or for ``rackwatt record``): learns nothing."""

    def process(self, chunk: TraceChunk) -> list[dict[str, Any]]:
        return []
