"""What a configuration problem looks like: one ``ConfigIssue`` per problem, all raised together.

``str(issue)`` is the line a person reads, e.g.
``crac[1].share: must be in (0, 1], got 1.5 (agent.toml line 42)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ConfigIssue:
    """One problem (or warning): ``key_path`` ``""`` for a whole file (syntax, unreadable), ``line`` None
    when the position is unknown (e.g. a missing section)."""

    file: Path | None
    line: int | None
    key_path: str
    message: str

    def where(self) -> str:
        name = self.file.name if self.file is not None else "<config>"
        return f"{name} line {self.line}" if self.line is not None else name

    def __str__(self) -> str:
        if self.key_path:
            return f"{self.key_path}: {self.message} ({self.where()})"
        return f"{self.where()}: {self.message}"


class ConfigError(ValueError):
    """Every problem found in a configuration, not only the first."""

    def __init__(self, issues: Iterable[ConfigIssue], warnings: Iterable[ConfigIssue] = ()) -> None:
        self.issues: list[ConfigIssue] = list(issues)
        self.warnings: list[ConfigIssue] = list(warnings)  # found too, printed by check-config
        super().__init__("\n".join(str(issue) for issue in self.issues) or "invalid configuration")
