"""Turn merged TOML tables into the frozen dataclasses of ``agent.config.model``, collecting problems.

Types come from the dataclass annotations, so a new field needs no change here; value rules are
data (``Spec``) owned by each section.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.config.errors import ConfigIssue
from agent.config.merge import Merged
from agent.config.paths import path_text_problem
from agent.config.toml_lines import KeyPath

Check = Callable[[Any], str | None]  # value → problem message, or None when fine
MISSING = object()


def format_path(path: KeyPath) -> str:
    """``("crac", 1, "share")`` → ``crac[1].share``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


def show(value: object) -> str:
    """A value as the user wrote it in TOML, shortened."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
    elif isinstance(value, dict | list):
        text = kind_of(value)
    else:
        text = str(value)
    return text if len(text) <= 60 else text[:57] + "..."


# The TOML kinds by name, bool before int (a bool is an int to isinstance); dates and times go by
# their type's name.
_KINDS = ((bool, "a boolean"), (int, "an integer"), (float, "a float"), (str, "a string"), (list, "an array"),
          (dict, "a table"))


def kind_of(value: object) -> str:
    return next((name for kind, name in _KINDS if isinstance(value, kind)), type(value).__name__)


def described(value: object) -> str:
    """``"5" (a string)``, ``3 (an integer)``; tables and arrays by kind only."""
    if isinstance(value, dict | list):
        return kind_of(value)
    return f"{show(value)} ({kind_of(value)})"


def suggest(word: str, candidates: list[str]) -> str:
    """``; did you mean "x"?`` or nothing."""
    close = difflib.get_close_matches(word, candidates, n=1, cutoff=0.6)
    return f'; did you mean "{close[0]}"?' if close else ""


@dataclass
class Context:
    """Where problems are collected while converting; every problem gets the file and line of its key."""

    merged: Merged
    issues: list[ConfigIssue] = field(default_factory=list)
    warnings: list[ConfigIssue] = field(default_factory=list)

    def _issue(self, path: KeyPath, message: str) -> ConfigIssue:
        file, line = self.merged.where(path)
        return ConfigIssue(file, line, format_path(path), message)

    def error(self, path: KeyPath, message: str) -> None:
        self.issues.append(self._issue(path, message))

    def warn(self, path: KeyPath, message: str) -> None:
        self.warnings.append(self._issue(path, message))

    def base_dir(self, path: KeyPath) -> Path:
        """The folder of the file that set ``path``: relative paths are relative to it."""
        return self.merged.where(path)[0].parent


@dataclass(frozen=True)
class Spec:
    """How the loader treats one dataclass: value rules per field and special keys."""

    checks: dict[str, list[Check]] = field(default_factory=dict)
    converters: dict[str, Callable[[Context, KeyPath, Any], Any]] = field(default_factory=dict)
    literal_secrets: dict[str, str] = field(default_factory=dict)  # forbidden key → the *_file key to use
    nested: dict[type, Spec] = field(default_factory=dict)
    on_value: Callable[[Context, KeyPath, Any], None] | None = None  # sees every accepted value (file checks)
    # keys earlier releases documented and no build reads: a warning, so an upgraded file still loads
    retired: dict[str, str] = field(default_factory=dict)


def _expected(hint: Any) -> str:
    names = {
        str: "a string", int: "an integer", float: "a number", bool: "true or false", Path: "a path string"
    }
    if hint in names:
        return names[hint]
    if dataclasses.is_dataclass(hint):
        return "a table"
    return "an array"


def convert_value(ctx: Context, path: KeyPath, value: Any, hint: Any, spec: Spec) -> Any:
    """``value`` as type ``hint``, or ``MISSING`` after recording why it cannot be."""
    origin = typing.get_origin(hint)
    if origin in (types.UnionType, typing.Union):
        inner = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        if value is False:  # `false` turns an optional feature off
            return None
        return convert_value(ctx, path, value, inner[0], spec)
    if origin is tuple:
        item_hint = typing.get_args(hint)[0]
        if not isinstance(value, list):
            ctx.error(path, f"must be an array, got {described(value)}")
            return MISSING
        items = [convert_value(ctx, (*path, i), item, item_hint, spec) for i, item in enumerate(value)]
        return MISSING if any(item is MISSING for item in items) else tuple(items)
    if dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            ctx.error(path, f"must be a table {{...}}, got {described(value)}")
            return MISSING
        cls = typing.cast(type, hint)
        built = build(ctx, path, value, cls, spec.nested.get(cls, Spec()))
        return MISSING if built is None else built
    ok = {
        str: isinstance(value, str),
        bool: isinstance(value, bool),
        int: isinstance(value, int) and not isinstance(value, bool),
        float: isinstance(value, int | float) and not isinstance(value, bool),
        Path: isinstance(value, str),
    }.get(hint, False)
    if not ok:
        ctx.error(path, f"must be {_expected(hint)}, got {described(value)}")
        return MISSING
    if hint is float:
        if not math.isfinite(value):
            ctx.error(path, f"must be a finite number, got {show(value)}")
            return MISSING
        return float(value)
    if hint is Path:
        if not value.strip():
            ctx.error(path, "must be a path, got an empty string")
            return MISSING
        resolved = ctx.base_dir(path) / value
        problem = path_text_problem(value) or path_text_problem(str(resolved))
        if problem:
            ctx.error(path, f"{problem}, got {show(value)}")
            return MISSING
        return resolved
    return value


# get_type_hints compiles every string annotation on each call (most of the time of a configuration with
# many devices): each model class's field types are evaluated once.
_type_hints = functools.cache(typing.get_type_hints)


def build(ctx: Context, path: KeyPath, table: dict[str, Any], cls: type, spec: Spec) -> Any:
    """An instance of ``cls`` from ``table``, or None when any field had a problem (all recorded)."""
    before = len(ctx.issues)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = _type_hints(cls)
    for key in table:
        if key in fields:
            continue
        if key in spec.retired:
            ctx.warn((*path, key), f"read by no part of the agent ({spec.retired[key]}): remove it")
        elif key in spec.literal_secrets:
            use = spec.literal_secrets[key]
            ctx.error((*path, key), "secrets are not written in the configuration: put the value in a file "
                      "only the agent can read (root:rackwatt, mode 0640) and set "
                      f"{use} = \"/etc/rackwatt/...\"")
        else:
            ctx.error((*path, key), "unknown key" + suggest(key, list(fields)))
    kwargs: dict[str, Any] = {}
    for name, f in fields.items():
        key_path = (*path, name)
        if name not in table:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                ctx.error(key_path, "required key is missing")
            continue
        if name in spec.converters:
            value = spec.converters[name](ctx, key_path, table[name])
        else:
            value = convert_value(ctx, key_path, table[name], hints[name], spec)
        if value is MISSING:
            continue
        for check in spec.checks.get(name, []) if value is not None else []:
            problem = check(value)
            if problem:
                ctx.error(key_path, problem)
                break
        else:
            if spec.on_value is not None:
                spec.on_value(ctx, key_path, value)
        kwargs[name] = value
    if len(ctx.issues) > before:
        return None
    return cls(**kwargs)

