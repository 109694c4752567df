"""Read the main TOML file and its drop-ins, and merge them while remembering where each key came from.

Rules (docs/configuration.md): files apply in order; tables merge key by key; items of the
``ARRAY_SECTIONS`` append, or replace the earlier item with the same ``id``; any other value replaces.
"""

from __future__ import annotations

import re
import tomllib  # stdlib from Python 3.11, the oldest supported (pyproject.toml requires-python)
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.config.errors import ConfigIssue
from agent.config.limits import MAX_DROPINS, MAX_FILE_BYTES, read_bounded, shape_problem
from agent.config.toml_lines import KeyPath, locate_keys

# arrays of tables whose items are identified by `id` (rules.SECTIONS marks the same ones as many;
# tests/config/test_dropins.py keeps the two in step, as rules imports this module through convert)
ARRAY_SECTIONS = ("pdu", "crac", "dcgm", "node")
_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")


@dataclass
class Document:
    """One parsed file and the line of each key path in it."""

    path: Path
    data: dict[str, Any]
    lines: dict[KeyPath, int]
    size: int = 0  # bytes read, counted against the bound on all files together


@dataclass
class Merged:
    """The merged tables, and for each key path the file and line that set it."""

    main: Path
    data: dict[str, Any] = field(default_factory=dict)
    origins: dict[KeyPath, tuple[Path, int | None]] = field(default_factory=dict)

    def where(self, path: KeyPath) -> tuple[Path, int | None]:
        """File and line of a key path, falling back to its nearest located parent."""
        for end in range(len(path), 0, -1):
            found = self.origins.get(path[:end])
            if found is not None:
                return found
        return self.main, None


def read_document(path: Path, limit: int = MAX_FILE_BYTES) -> tuple[Document | None, ConfigIssue | None]:
    """Parse one file (size and nesting bounded first); a problem becomes a ``ConfigIssue`` naming it."""
    raw = read_bounded(path, limit)
    if isinstance(raw, str):
        return None, ConfigIssue(path, None, "", raw)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return None, ConfigIssue(path, line, "", "invalid TOML: file is not UTF-8 text")
    too_deep = shape_problem(text)
    if too_deep is not None:
        line, reason = too_deep
        return None, ConfigIssue(path, line, "", f"refused before parsing: {reason}")
    try:
        data = tomllib.loads(text)
    except RecursionError:  # not reachable within the nesting bound; never a traceback if it is
        return None, ConfigIssue(path, None, "", "invalid TOML: nested too deeply to parse")
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        match = _POSITION.search(message)
        reason = _POSITION.sub("", message).replace("(at end of document)", "").strip()
        if match:
            line = int(match.group(1))
            reason += f" (column {match.group(2)})"
        else:  # "(at end of document)": the parser ran to the end looking for the closing part
            line = text.count("\n") + (0 if text.endswith("\n") else 1)
            reason += " (at end of file)"
        return None, ConfigIssue(path, line, "", f"invalid TOML: {reason}")
    return Document(path, data, locate_keys(text), len(raw)), None


def _has_prefix(path: KeyPath, prefix: KeyPath) -> bool:
    return path[: len(prefix)] == prefix


def _place(merged: Merged, doc: Document, doc_path: KeyPath, merged_path: KeyPath) -> None:
    """Record the origins of a subtree of ``doc`` now living at ``merged_path``."""
    for old in [p for p in merged.origins if _has_prefix(p, merged_path)]:
        del merged.origins[old]
    for path, line in doc.lines.items():
        if _has_prefix(path, doc_path):
            merged.origins[merged_path + path[len(doc_path) :]] = (doc.path, line)
    merged.origins.setdefault(merged_path, (doc.path, None))


def _item_id(item: object) -> object:
    return item.get("id") if isinstance(item, dict) else None


def _merge_table(merged: Merged, doc: Document, target: dict[str, Any], source: dict[str, Any],
                 path: KeyPath) -> None:
    for key, value in source.items():
        key_path = (*path, key)
        old = target.get(key)
        if isinstance(old, dict) and isinstance(value, dict):
            merged.origins.setdefault(key_path, (doc.path, doc.lines.get(key_path)))
            _merge_table(merged, doc, old, value, key_path)
        elif path == () and key in ARRAY_SECTIONS and isinstance(old, list) and isinstance(value, list):
            for doc_index, item in enumerate(value):
                ids = [_item_id(existing) for existing in old]
                item_id = _item_id(item)
                if item_id is not None and item_id in ids:
                    index = ids.index(item_id)
                    old[index] = item
                else:
                    index = len(old)
                    old.append(item)
                _place(merged, doc, (key, doc_index), (key, index))
        else:
            target[key] = value
            _place(merged, doc, key_path, key_path)


def merge_documents(docs: list[Document]) -> Merged:
    """Apply ``docs`` in order onto an empty configuration."""
    merged = Merged(main=docs[0].path if docs else Path("agent.toml"))
    for doc in docs:
        _merge_table(merged, doc, merged.data, doc.data, ())
    return merged


def dropin_files(directory: Path) -> tuple[list[Path], ConfigIssue | None]:
    """The ``*.toml`` files of a drop-in directory in name order (other files are ignored)."""
    try:
        if not directory.exists():
            return [], ConfigIssue(directory, None, "", f"drop-in directory {directory} does not exist")
        if not directory.is_dir():
            return [], ConfigIssue(directory, None, "", f"drop-in path {directory} is not a directory")
        names = sorted(p for p in directory.iterdir() if p.suffix == ".toml" and not p.name.startswith("."))
    except ValueError:
        message = f"drop-in directory {str(directory)!r}: the path contains a NUL byte"
        return [], ConfigIssue(directory, None, "", message)
    except OSError as exc:
        return [], ConfigIssue(directory, None, "", f"cannot list {directory}: {exc.strerror or exc}")
    if len(names) > MAX_DROPINS:
        return [], ConfigIssue(directory, None, "", (
            f"{len(names)} drop-in files in {directory}; at most {MAX_DROPINS} are read (is a generator "
            "writing one file per item?)"))
    return names, None
