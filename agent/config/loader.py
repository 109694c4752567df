"""``load_config(path, dropin_dir)``: the one way to turn TOML files into a validated ``Config``.

Every problem in every file is collected and raised together as one ``ConfigError``; warnings
(a secret file other users can read) come back in ``Config.warnings``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from agent.config.convert import Context, build, kind_of, suggest
from agent.config.errors import ConfigError, ConfigIssue
from agent.config.limits import MAX_FILE_BYTES, MAX_TOTAL_BYTES
from agent.config.merge import Document, dropin_files, merge_documents, read_document
from agent.config.model import Config
from agent.config.rules import SECTIONS, check_unique_ids
from agent.config.toml_lines import KeyPath
from agent.node.config import check_roles

DEFAULT_CONFIG_PATH = Path("/etc/rackwatt/agent.toml")


def load_config(path: Path | str, dropin_dir: Path | str | None = None, *, dropins: bool = True) -> Config:
    """Read ``path`` and the ``*.toml`` files of its drop-in directory (name order), validate, and build.
    ``dropin_dir`` None: ``conf.d`` next to the file, when it exists; one given explicitly must exist."""
    path = Path(path)
    files = [path]
    issues: list[ConfigIssue] = []
    if dropins:
        directory = path.parent / "conf.d" if dropin_dir is None else Path(dropin_dir)  # as the systemd unit
        if dropin_dir is not None or _is_dir(directory):
            extra, problem = dropin_files(directory)
            files += extra
            if problem:
                issues.append(problem)
    docs: list[Document] = []
    left = MAX_TOTAL_BYTES
    for file in files:
        doc, problem = read_document(file, min(MAX_FILE_BYTES, left))
        if problem:
            issues.append(problem)
        elif doc is not None:
            docs.append(doc)
            left -= doc.size
    if issues:
        raise ConfigError(issues)
    ctx = Context(merge_documents(docs))
    config = _build_config(ctx, path)
    order = {file: index for index, file in enumerate(files)}

    def position(issue: ConfigIssue) -> tuple[int, int]:
        return order.get(issue.file, -1) if issue.file else -1, issue.line or 0

    if ctx.issues or config is None:
        raise ConfigError(sorted(ctx.issues, key=position), sorted(ctx.warnings, key=position))
    return dataclasses.replace(config, warnings=tuple(str(w) for w in sorted(ctx.warnings, key=position)))


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _build_config(ctx: Context, path: Path) -> Config | None:
    data = ctx.merged.data
    for key, value in data.items():
        if key not in SECTIONS:
            ctx.error((key,), _unknown_section(key, value))
    kwargs: dict[str, Any] = {}
    for name, (cls, is_array, field_name, spec, cross_check) in SECTIONS.items():
        if name not in data:
            if name == "agent":
                ctx.error((name,), 'required section is missing: [agent] with site = "..." and rack = "..."')
            continue
        value = data[name]
        if is_array and not (isinstance(value, list) and all(isinstance(item, dict) for item in value)):
            hint = f"[{name}] (write [[{name}]])" if isinstance(value, dict) else kind_of(value)
            ctx.error((name,), f"must be an array of tables, got {hint}")
            continue
        if not is_array and not isinstance(value, dict):
            hint = f"[[{name}]] (write [{name}])" if isinstance(value, list) else kind_of(value)
            ctx.error((name,), f"must be a table, got {hint}")
            continue
        tables: dict[KeyPath, Any] = (
            {(name, i): table for i, table in enumerate(value)} if is_array else {(name,): value})
        built = {at: build(ctx, at, table, cls, spec) for at, table in tables.items()}
        for at, item in built.items():
            if item is not None and cross_check:
                cross_check(ctx, at, item)
        if is_array:
            check_unique_ids(ctx, name, value)
        kwargs[field_name] = tuple(built.values()) if is_array else built[(name,)]
    if not ctx.issues:
        check_roles(ctx, kwargs)  # [agent] role against the other sections
    if ctx.issues:
        return None
    return Config(**kwargs, source=path)


def _unknown_section(key: str, value: object) -> str:
    if not isinstance(value, dict | list):
        homes = [name for name, (cls, *_rest) in SECTIONS.items()
                 if key in {f.name for f in dataclasses.fields(cls)}]
        if homes:
            return f"unknown top-level key; it belongs in [{homes[0]}]"
        return "unknown top-level key" + suggest(key, list(SECTIONS))
    return "unknown section" + suggest(key, list(SECTIONS))
