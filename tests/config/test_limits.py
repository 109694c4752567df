"""Input bounds checked before parsing: size, drop-in count, nesting, dotted names, non-regular files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.config import limits
from agent.config.errors import ConfigError
from agent.config.loader import load_config

HEAD = '[agent]\nsite = "lab"\nrack = "r1"\n'


def _issues(path: Path, dropins: bool = True) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_config(path, dropins=dropins)
    return [str(issue) for issue in info.value.issues]


@pytest.mark.parametrize(
    ("text", "nesting", "parts"),
    [
        ('a = "[[[[{{{{ . . ."\n', 0, 1),  # brackets and dots inside strings do not count
        ("a = '''[[[\n[[['''\n", 0, 1),
        ('a = """x\\"""[[[""" # [[[[\n', 0, 1),
        ("[a.b.c]\nx = [[1, 2], [3]]\n", 2, 3),
        ('a."b c".d = {e = {f = 1.5}}\n', 2, 3),
    ],
)
def test_measure_skips_strings_and_comments(text: str, nesting: int, parts: int) -> None:
    shape = limits.measure(text)
    assert (shape.nesting, shape.dotted_parts) == (nesting, parts)


def test_the_bounds_are_exact(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(HEAD + "[" + ".".join(["a"] * limits.MAX_DOTTED_PARTS) + "]\n")
    assert "refused before parsing" not in " ".join(_issues(path))  # unknown section, parsed
    path.write_text(HEAD + "[" + ".".join(["a"] * (limits.MAX_DOTTED_PARTS + 1)) + "]\n")
    assert _issues(path) == [
        f"agent.toml line 4: refused before parsing: a dotted name with 17 parts (a.b.c...); "
        f"a configuration needs at most {limits.MAX_DOTTED_PARTS}"
    ]


def test_an_oversized_file_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(HEAD + "#" * limits.MAX_FILE_BYTES)
    (issue,) = _issues(path)
    assert f"a configuration file is at most {limits.MAX_FILE_BYTES} bytes" in issue


def test_drop_ins_share_one_budget(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(HEAD)
    conf_d = tmp_path / "conf.d"
    conf_d.mkdir()
    for name in ("10.toml", "20.toml", "30.toml"):
        (conf_d / name).write_text("#" * (limits.MAX_TOTAL_BYTES * 2 // 5) + "\n")  # the third is over
    (issue,) = _issues(path)
    assert issue.startswith("30.toml: cannot read") and "together are at most" in issue


def test_too_many_drop_ins(tmp_path: Path) -> None:
    path = tmp_path / "agent.toml"
    path.write_text(HEAD)
    conf_d = tmp_path / "conf.d"
    conf_d.mkdir()
    for i in range(limits.MAX_DROPINS + 1):
        (conf_d / f"{i:04d}.toml").write_text("")
    (issue,) = _issues(path)
    assert f"{limits.MAX_DROPINS + 1} drop-in files" in issue


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_fifo_or_device_is_refused_without_blocking(tmp_path: Path, kind: str) -> None:
    if kind == "fifo":
        target = tmp_path / "agent.toml"
        os.mkfifo(target)  # no writer: a blocking open would hang
    else:
        target = Path("/dev/zero")  # endless: an unbounded read would exhaust memory
    (issue,) = _issues(target, dropins=False)
    assert "not a regular file" in issue
