"""Property tests: any edit of a valid configuration gives a Config or a ConfigError whose every issue
names a key path or a line — never another exception."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.config.errors import ConfigError
from agent.config.loader import load_config

EXAMPLE = (Path(__file__).resolve().parents[2] / "packaging" / "agent.toml").read_text()
VALID = (Path(__file__).parent / "cases" / "valid" / "full.toml").read_text()
# The example with its commented device tables switched on: more keys for edits to hit.
UNCOMMENTED = "\n".join(
    line[2:] if line.startswith("# ") and "=" in line else line for line in EXAMPLE.splitlines()
)
SOURCES = [EXAMPLE, VALID, UNCOMMENTED]
TOKENS = [
    "=",
    "[",
    "]",
    "[[",
    "]]",
    "{",
    "}",
    ",",
    '"',
    "'",
    "#",
    "\n",
    ".",
    " ",
    "0",
    "-1",
    "1.5",
    "nan",
    "true",
    '"x"',
    "[pdu]",
    "[[crac]]",
    "[agent]",
    "id",
    "share",
    "port",
    "1e999",
    "\x00",
    "é",
    '"""',
    "'''",
]


def _edit(text: str, data: st.DataObject) -> str:
    for _ in range(data.draw(st.integers(1, 4))):
        if not text:
            break
        start = data.draw(st.integers(0, len(text)))
        end = data.draw(st.integers(start, min(len(text), start + 40)))
        kind = data.draw(st.sampled_from(["delete", "insert", "replace", "swap_lines", "duplicate_line"]))
        if kind == "delete":
            text = text[:start] + text[end:]
        elif kind in ("insert", "replace"):
            piece = data.draw(st.one_of(st.sampled_from(TOKENS), st.text(max_size=8)))
            text = text[:start] + piece + text[end if kind == "replace" else start :]
        else:
            lines = text.split("\n")
            i = data.draw(st.integers(0, len(lines) - 1))
            j = data.draw(st.integers(0, len(lines) - 1))
            if kind == "swap_lines":
                lines[i], lines[j] = lines[j], lines[i]
            else:
                lines.insert(j, lines[i])
            text = "\n".join(lines)
    return text


def _check(text: str) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "agent.toml"
        path.write_text(text, encoding="utf-8", errors="surrogatepass")
        for name in ("a.auth", "a.priv", "mqtt.pw", "agent.key", "ca.crt", "agent.crt"):
            secret = Path(folder) / name
            secret.write_text("secret\n")
            secret.chmod(0o600)
        try:
            config = load_config(path)
        except ConfigError as exc:
            assert exc.issues, "a ConfigError without issues"
            for issue in exc.issues:
                assert issue.key_path or issue.line is not None, f"issue names no place: {issue}"
                assert str(issue)
        else:
            assert config.agent.site and config.agent.rack


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=st.sampled_from(SOURCES), data=st.data())
def test_mutated_config_fails_cleanly(source: str, data: st.DataObject) -> None:
    _check(_edit(source, data))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=40).map("".join))
def test_token_soup_fails_cleanly(text: str) -> None:
    _check(text)
