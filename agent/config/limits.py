"""Bounds on configuration input, checked before any parsing: size, number of drop-ins, nesting.

Why before parsing: ``tomllib`` recurses once per nesting level (thousands of ``[[[[`` raise
``RecursionError``) and a dotted header with thousands of parts costs time and memory quadratic in
its length (a 42 KB file with a 20 000-part header took 52 s and 3.9 GB); a linear scan finds both
in milliseconds.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

# A whole rack's configuration, with a generic register map for every device, is tens of KB (the
# commented example is 8 KB). 128 KiB per file and 256 KiB for the main file and all drop-ins
# together is several times that, and is validated within about a second on one busy gateway
# core (measured on a shared 2-core machine: 6 000 [[pdu]] tables, 240 KB, took 1.3-2.3 s with
# every table in error; a 1 MiB file of keys took 3-5 s), well inside the 2 s per-file budget.
MAX_FILE_BYTES = 128 << 10
MAX_TOTAL_BYTES = 256 << 10
# conf.d holds one file per concern (a device group, a site override); hundreds of files means a
# generator gone wrong, and each file costs an open and a parse.
MAX_DROPINS = 256
# The deepest key path the schema has is 4 levels (pdu[0].oids[1].oid); 16 leaves room for any
# spelling of it (dotted keys, inline tables) and keeps the parser's recursion (a few frames per
# level, limit ~1000) and its quadratic cost on long dotted headers negligible.
MAX_NESTING = 16
MAX_DOTTED_PARTS = 16

_BARE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


@dataclass(frozen=True)
class Shape:
    """What the scan measured: the deepest ``[``/``{`` nesting and the longest dotted name, with lines."""

    nesting: int = 0
    nesting_line: int = 0
    dotted_parts: int = 0
    dotted_line: int = 0


def string_end(text: str, pos: int) -> int:
    """Index just after the TOML string starting at ``pos`` (basic, literal, or multi-line); at an
    unterminated one, the end of its line (single-line) or of the text (multi-line)."""
    quote = text[pos]
    if text.startswith(quote * 3, pos):
        close = quote * 3
        i = pos + 3
        while True:
            j = text.find(close, i)
            if j < 0:
                return len(text)
            if quote == '"' and _escaped(text, j, pos + 3):
                i = j + 1
                continue
            j += 3
            while j < len(text) and text[j] == quote:  # up to two more quotes belong to the content
                j += 1
            return j
    i = pos + 1
    while i < len(text):
        char = text[i]
        if char == "\n":
            return i
        if char == "\\" and quote == '"':
            i += 2
            continue
        if char == quote:
            return i + 1
        i += 1
    return len(text)


def _escaped(text: str, index: int, start: int) -> bool:
    """Whether the character at ``index`` is preceded by an odd number of backslashes."""
    count = 0
    while index - 1 - count >= start and text[index - 1 - count] == "\\":
        count += 1
    return count % 2 == 1


def measure(text: str) -> Shape:
    """One linear pass: skip strings and comments, track bracket depth and dotted-name length (bare
    words or strings joined by dots, ``a.b."c"``; a float such as ``1.5`` counts as two parts)."""
    depth = max_depth = depth_line = 0
    parts = max_parts = parts_line = 0
    after_dot = False
    line = 1
    pos = 0
    n = len(text)
    while pos < n:
        char = text[pos]
        if char in "'\"" or char in _BARE:  # one part of a dotted name: a string or a bare word
            if char in _BARE:
                end = pos + 1
                while end < n and text[end] in _BARE:
                    end += 1
            else:
                end = string_end(text, pos)
            parts = parts + 1 if after_dot else 1
            after_dot = False
            if parts > max_parts:
                max_parts, parts_line = parts, line
            line += text.count("\n", pos, end)
            pos = end
            continue
        if char == ".":
            after_dot = parts > 0
        elif char in " \t":
            pass
        else:
            parts, after_dot = 0, False
            if char == "#":
                end = text.find("\n", pos)
                pos = n if end < 0 else end
                continue
            if char == "\n":
                line += 1
            elif char in "[{":
                depth += 1
                if depth > max_depth:
                    max_depth, depth_line = depth, line
            elif char in "]}":
                depth = max(0, depth - 1)
        pos += 1
    return Shape(max_depth, depth_line, max_parts, parts_line)


def shape_problem(text: str) -> tuple[int, str] | None:
    """``(line, message)`` when the text nests deeper or dots longer than any configuration needs."""
    shape = measure(text)
    if shape.nesting > MAX_NESTING:
        return shape.nesting_line, (
            f"nested {shape.nesting} levels deep ([ or {{ inside each other); a configuration "
            f"needs at most {MAX_NESTING}"
        )
    if shape.dotted_parts > MAX_DOTTED_PARTS:
        return shape.dotted_line, (
            f"a dotted name with {shape.dotted_parts} parts (a.b.c...); a configuration needs at most "
            f"{MAX_DOTTED_PARTS}"
        )
    return None


def read_bounded(path: Path, limit: int = MAX_FILE_BYTES) -> bytes | str:
    """The bytes of a regular file of at most ``limit`` bytes, or why not (a message). Non-blocking (a
    FIFO cannot hang the command) and bounded (``/dev/zero`` cannot exhaust memory)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return f"cannot read {path}: file does not exist"
    except ValueError:
        return f"cannot read {str(path)!r}: the path contains a NUL byte"
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            return f"cannot read {path}: it is a directory"
        if not stat.S_ISREG(info.st_mode):
            return f"cannot read {path}: not a regular file (a device, pipe or socket)"
        if info.st_size > limit:
            return _too_big(path, info.st_size, limit)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:  # the file may grow while read: never past the bound
            chunk = os.read(fd, limit + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:
            return _too_big(path, size, limit)
        return b"".join(chunks)
    except OSError as exc:
        return f"cannot read {path}: {exc.strerror or exc}"
    finally:
        os.close(fd)


def _too_big(path: Path, size: int, limit: int) -> str:
    if limit < MAX_FILE_BYTES:
        return (f"cannot read {path}: {size} bytes; the main file and its drop-ins together are at most "
                f"{MAX_TOTAL_BYTES} bytes, and {limit} were left for this one")
    return (f"cannot read {path}: {size} bytes; a configuration file is at most {limit} bytes "
            "(is this the right file?)")
