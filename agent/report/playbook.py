"""The drift playbook's per-cause sections, as HTML to embed in the report page.

Why embedded: a report is mailed and archived far from the repository, where a link to the docs is
dead. The playbook ships as package data (a copy of ``docs/drift-playbook.md`` a test keeps
identical); only the little Markdown it uses is rendered, and links become their text.
"""

from __future__ import annotations

import html
import re
from importlib import resources

PLAYBOOK_RESOURCE = "drift-playbook.md"


def playbook_text() -> str:
    return resources.files("agent.report").joinpath(PLAYBOOK_RESOURCE).read_text(encoding="utf-8")


def sections_by_heading(markdown: str) -> dict[str, str]:
    """``## name`` → the Markdown body under it (up to the next ``##``)."""
    parts = re.split(r"^## (.*)$", markdown, flags=re.MULTILINE)  # [before, name, body, name, body, …]
    return {parts[i].strip(): parts[i + 1].strip() for i in range(1, len(parts), 2)}


def _inline(text: str) -> str:
    out = html.escape(text, quote=False)
    out = re.sub(r"\[([^\]]+)\]\([^)]*\)", r"\1", out)  # a link's target is not in the page
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)


def markdown_to_html(markdown: str) -> str:
    """Paragraphs and lists; a list item's continuation lines are indented."""
    blocks: list[str] = []
    paragraph: list[str] = []
    items: list[str] = []
    list_tag = ""

    def flush_paragraph() -> None:
        if paragraph:
            blocks.append("<p>" + _inline(" ".join(paragraph)) + "</p>")
            paragraph.clear()

    def flush_list() -> None:
        nonlocal list_tag
        if items:
            listed = "".join(f"<li>{_inline(i)}</li>" for i in items)
            blocks.append(f"<{list_tag}>{listed}</{list_tag}>")
            items.clear()
        list_tag = ""

    for raw in markdown.splitlines():
        line = raw.strip()
        numbered = re.match(r"^\d+\.\s+(.*)", line)
        bullet = re.match(r"^[-*]\s+(.*)", line)
        if not line:
            flush_paragraph()
            flush_list()
        elif numbered or bullet:
            flush_paragraph()
            tag = "ol" if numbered else "ul"
            if list_tag and list_tag != tag:
                flush_list()
            list_tag = tag
            items.append((numbered or bullet).group(1))  # type: ignore[union-attr]
        elif items and raw.startswith(" "):
            items[-1] += " " + line
        else:
            flush_list()
            paragraph.append(line)
    flush_paragraph()
    flush_list()
    return "".join(blocks)


def playbook_sections(causes: list[str]) -> dict[str, str]:
    """HTML of the playbook section for each cause that has one."""
    sections = sections_by_heading(playbook_text())
    return {cause: markdown_to_html(sections[cause]) for cause in causes if cause in sections}
