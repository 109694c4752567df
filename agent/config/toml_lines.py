"""Where each key of a TOML document sits: a light scanner, because ``tomllib`` gives no positions.

``locate_keys(text)`` maps key paths such as ``("crac", 1, "share")`` or ``("pdu", 0, "oids", 2)`` to
1-based lines. It runs only on text ``tomllib`` accepted and stops at anything it does not understand.
"""

from __future__ import annotations

import bisect
import re

from agent.config.limits import string_end

KeyPath = tuple[str | int, ...]

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_SCALAR_END = re.compile(r"[,\]}\n#]")


class _Stop(Exception):
    """The scanner met something it does not handle; keep what was found."""


class _Scanner:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.found: dict[KeyPath, int] = {}
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self._array_counts: dict[KeyPath, int] = {}

    # -- positions -------------------------------------------------------------------------
    def line(self, pos: int | None = None) -> int:
        return bisect.bisect_right(self._line_starts, self.pos if pos is None else pos)

    def record(self, path: KeyPath, pos: int) -> None:
        for end in range(1, len(path) + 1):  # parents of a dotted key get the line too, if unseen
            self.found.setdefault(path[:end], self.line(pos))
        self.found[path] = self.line(pos)

    # -- lexical helpers -------------------------------------------------------------------
    def peek(self, count: int = 1) -> str:
        return self.text[self.pos : self.pos + count]

    def skip_space(self, newlines: bool) -> None:
        text = self.text
        while self.pos < len(text):
            char = text[self.pos]
            if char in " \t\r" or (newlines and char == "\n"):
                self.pos += 1
            elif newlines and char == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            else:
                return

    def parse_key(self) -> list[str]:
        parts: list[str] = []
        while True:
            self.skip_space(newlines=False)
            char = self.peek()
            if char in ("'", '"'):
                start = self.pos
                self.skip_string()
                raw = self.text[start + 1 : self.pos - 1]
                parts.append(raw.encode().decode("unicode_escape") if char == '"' and "\\" in raw else raw)
            else:
                match = _BARE_KEY.match(self.text, self.pos)
                if not match:
                    raise _Stop
                parts.append(match.group())
                self.pos = match.end()
            self.skip_space(newlines=False)
            if self.peek() != ".":
                return parts
            self.pos += 1

    def skip_string(self) -> None:
        """The scan runs on text tomllib accepted: every string is terminated."""
        self.pos = string_end(self.text, self.pos)

    # -- values ----------------------------------------------------------------------------
    def skip_value(self, path: KeyPath) -> None:
        self.skip_space(newlines=False)
        char = self.peek()
        if char in ("'", '"'):
            self.skip_string()
        elif char == "[":
            self.pos += 1
            index = 0
            while True:
                self.skip_space(newlines=True)
                if self.peek() == "]":
                    self.pos += 1
                    return
                self.record((*path, index), self.pos)
                self.skip_value((*path, index))
                self.skip_space(newlines=True)
                if self.peek() == ",":
                    self.pos += 1
                    index += 1
                elif self.peek() != "]":
                    raise _Stop
        elif char == "{":
            self.pos += 1
            while True:
                self.skip_space(newlines=False)
                if self.peek() == "}":
                    self.pos += 1
                    return
                start = self.pos
                key = (*path, *self.parse_key())
                if self.peek() != "=":
                    raise _Stop
                self.pos += 1
                self.record(key, start)
                self.skip_value(key)
                self.skip_space(newlines=False)
                if self.peek() == ",":
                    self.pos += 1
                elif self.peek() != "}":
                    raise _Stop
        else:
            match = _SCALAR_END.search(self.text, self.pos)
            end = len(self.text) if match is None else match.start()
            if end == self.pos:
                raise _Stop
            self.pos = end

    # -- document --------------------------------------------------------------------------
    def resolve(self, parts: list[str]) -> KeyPath:
        """A header name as a key path, with the current index of each array of tables in it."""
        out: list[str | int] = []
        for part in parts:
            out.append(part)
            count = self._array_counts.get(tuple(out))
            if count:
                out.append(count - 1)
        return tuple(out)

    def scan(self) -> dict[KeyPath, int]:
        prefix: KeyPath = ()
        text = self.text
        while True:
            self.skip_space(newlines=True)
            if self.pos >= len(text):
                return self.found
            start = self.pos
            if text.startswith("[[", self.pos):
                self.pos += 2
                parts = self.parse_key()
                if not text.startswith("]]", self.pos):
                    raise _Stop
                self.pos += 2
                base = (*self.resolve(parts[:-1]), parts[-1])
                index = self._array_counts.get(base, 0)
                self._array_counts[base] = index + 1
                prefix = (*base, index)
                self.record(prefix, start)
            elif text.startswith("[", self.pos):
                self.pos += 1
                parts = self.parse_key()
                if self.peek() != "]":
                    raise _Stop
                self.pos += 1
                prefix = self.resolve(parts)
                self.record(prefix, start)
            else:
                key = (*prefix, *self.parse_key())
                if self.peek() != "=":
                    raise _Stop
                self.pos += 1
                self.record(key, start)
                self.skip_value(key)


def locate_keys(text: str) -> dict[KeyPath, int]:
    """Key path → 1-based line number for every table header, key and array element found."""
    scanner = _Scanner(text)
    try:
        return scanner.scan()
    except (_Stop, IndexError, UnicodeDecodeError):
        return scanner.found
