"""Drop-in directory: name order, key-by-key tables, [[pdu]]/[[crac]] append or replace by id."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agent.config.errors import ConfigError
from agent.config.loader import load_config
from agent.config.merge import ARRAY_SECTIONS
from agent.config.rules import SECTIONS as SECTION_RULES

MAIN = """\
[agent]
site = "s"
rack = "r"

[mqtt]
host = "broker-main"
port = 1883

[[crac]]
id = "c1"
host = "10.0.0.1"
profile = "apc_inrow_sc"
share = 0.5
"""


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    main = tmp_path / "agent.toml"
    main.write_text(MAIN)
    conf_d = tmp_path / "conf.d"
    conf_d.mkdir()
    return main, conf_d


def test_tables_merge_key_by_key(layout: tuple[Path, Path]) -> None:
    main, conf_d = layout
    (conf_d / "10-mqtt.toml").write_text("[mqtt]\nport = 8883\n")
    config = load_config(main, conf_d)
    assert (config.mqtt.host, config.mqtt.port) == ("broker-main", 8883)


def test_later_file_in_name_order_wins(layout: tuple[Path, Path]) -> None:
    main, conf_d = layout
    (conf_d / "20-b.toml").write_text("[engine]\nwindow_s = 200.0\n")
    (conf_d / "10-a.toml").write_text("[engine]\nwindow_s = 100.0\nlearning_rate = 0.5\n")
    config = load_config(main, conf_d)
    assert config.engine.window_s == 200.0 and config.engine.learning_rate == 0.5


def test_array_items_append_and_same_id_replaces(layout: tuple[Path, Path]) -> None:
    main, conf_d = layout
    (conf_d / "10-more.toml").write_text(
        '[[crac]]\nid = "c2"\nhost = "10.0.0.2"\nprofile = "apc_inrow_sc"\n'
        '[[crac]]\nid = "c1"\nhost = "10.9.9.9"\nprofile = "apc_inrow_sc"\n'
    )
    config = load_config(main, conf_d)
    assert [c.id for c in config.cracs] == ["c1", "c2"]
    replaced = config.cracs[0]
    assert replaced.host == "10.9.9.9"
    assert replaced.share == 1.0  # the whole item is replaced: keys of the old one do not survive


def test_every_array_section_merges_by_id(layout: tuple[Path, Path]) -> None:
    assert set(ARRAY_SECTIONS) == {name for name, rule in SECTION_RULES.items() if rule[1]}
    main, conf_d = layout
    (conf_d / "10-n1.toml").write_text('[[dcgm]]\nid = "n1"\nurl = "http://10.0.0.11:9400/metrics"\n')
    (conf_d / "20-n2.toml").write_text('[[dcgm]]\nid = "n2"\nurl = "http://10.0.0.12:9400/metrics"\n')
    config = load_config(main, conf_d)
    assert [d.id for d in config.dcgms] == ["n1", "n2"]  # the second file used to replace the first


def test_errors_name_the_drop_in_file_and_line(layout: tuple[Path, Path]) -> None:
    main, conf_d = layout
    (conf_d / "10-more.toml").write_text(
        '# comment\n[[crac]]\nid = "c2"\nhost = "h"\nprofile = "liebert_crv"\nshare = 2.0\n'
    )
    with pytest.raises(ConfigError) as info:
        load_config(main, conf_d)
    assert [str(i) for i in info.value.issues] == [
        "crac[1].share: must be in (0, 1], got 2.0 (10-more.toml line 6)"
    ]


def test_replaced_item_errors_point_at_the_drop_in(layout: tuple[Path, Path]) -> None:
    main, conf_d = layout
    fix = '[[crac]]\nid = "c1"\nhost = "h"\nprofile = "liebert_crv"\nport = 0\n'
    (conf_d / "50-fix.toml").write_text(fix)
    with pytest.raises(ConfigError) as info:
        load_config(main, conf_d)
    assert [str(i) for i in info.value.issues] == [
        "crac[0].port: must be between 1 and 65535, got 0 (50-fix.toml line 5)"
    ]


def test_only_toml_files_are_read(layout: tuple[Path, Path]) -> None:
    main, conf_d = layout
    (conf_d / "10-mqtt.toml.dpkg-old").write_text("this is not toml [")
    (conf_d / "README").write_text("not toml either")
    assert load_config(main, conf_d).mqtt.port == 1883


def test_syntax_errors_of_every_file_are_reported(layout: tuple[Path, Path]) -> None:
    main, conf_d = layout
    main.write_text(MAIN + "oops\n")
    (conf_d / "10-a.toml").write_text("[mqtt\n")
    with pytest.raises(ConfigError) as info:
        load_config(main, conf_d)
    where = [(i.file.name if i.file else None, i.line) for i in info.value.issues]
    assert where == [("agent.toml", 14), ("10-a.toml", 1)]


def test_missing_drop_in_directory_is_an_error(layout: tuple[Path, Path]) -> None:
    main, conf_d = layout
    with pytest.raises(ConfigError, match=r"drop-in directory .* does not exist"):
        load_config(main, conf_d / "nope")


SECTIONS = {
    "agent": '[agent]\nsite = "s"\nrack = "r"\ntick_s = 0.5\n',
    "mqtt": '[mqtt]\nhost = "b"\nport = 8883\nqos = 0\n',
    "pdu": '[[pdu]]\nid = "a"\nhost = "h"\nversion = "3"\nuser = "u"\nprofile = "apc_rpdu2"\n',
    "crac": '[[crac]]\nid = "c"\nhost = "h"\nprofile = "liebert_crv"\nshare = 0.5\n',
    "nvml": "[nvml]\ngpus = [1, 3]\n",
    "stages": "[stages]\nudp_port = 9999\nhint_ttl_s = 300.0\n",
    "engine": "[engine]\nwindow_s = 300.0\n",
}


@pytest.mark.parametrize("split", range(16))
def test_splitting_a_file_into_drop_ins_changes_nothing(tmp_path: Path, split: int) -> None:
    """Tables spread over a main file and drop-ins merge to the same configuration."""
    whole = tmp_path / "whole.toml"
    whole.write_text("".join(SECTIONS.values()))
    reference = load_config(whole)
    main = tmp_path / "agent.toml"
    conf_d = tmp_path / "conf.d"
    conf_d.mkdir()
    parts: dict[str, str] = {}
    for i, (name, text) in enumerate(SECTIONS.items()):
        target = "main" if (split >> (i % 4)) & 1 else f"{(i * 7 + split) % 3}0-{name}.toml"
        parts[target] = parts.get(target, "") + text
    main.write_text(parts.pop("main", ""))
    for name, text in parts.items():
        (conf_d / name).write_text(text)
    merged = load_config(main, conf_d)
    assert dataclasses.replace(merged, source=None) == dataclasses.replace(reference, source=None)
