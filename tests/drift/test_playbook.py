"""Every cause an event can name has its own section in the playbook the event links to."""

from __future__ import annotations

import re

from agent.engine.drift import CAUSES
from tests.conftest import REPO_ROOT


def test_each_cause_has_a_playbook_section() -> None:
    text = (REPO_ROOT / "docs" / "drift-playbook.md").read_text()
    headings = set(re.findall(r"^## (\S+)$", text, flags=re.MULTILINE))
    missing = [cause for cause in CAUSES if cause not in headings]
    assert missing == []
