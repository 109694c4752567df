"""The shipped packaging/agent.toml documents every option of model.py, is refused as shipped only for its
placeholder identities, and loads once they are set."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from agent.config import model
from agent.config.check_cmd import run as check_run
from agent.config.loader import load_config

EXAMPLE = Path(__file__).resolve().parents[2] / "packaging" / "agent.toml"
PLACEHOLDERS = ('site = "my-site"', 'rack = "my-rack"')


def _named_example(tmp_path: Path) -> Path:
    """The example with a real site and rack, as an operator writes it on the first day."""
    text = EXAMPLE.read_text()
    for placeholder in PLACEHOLDERS:
        assert placeholder in text
    path = tmp_path / "agent.toml"
    path.write_text(text.replace('"my-site"', '"fra1"').replace('"my-rack"', '"r07"'))
    return path
NOT_OPTIONS = {("Config", "source"), ("Config", "warnings")}  # set by the loader, not by the file
SECTION_OF_FIELD = {"pdus": "pdu", "cracs": "crac", "dcgms": "dcgm", "nodes": "node"}


def test_example_loads_with_documented_defaults(tmp_path: Path) -> None:
    config = load_config(_named_example(tmp_path))
    assert config.warnings == ()
    # Apart from the placeholders of the required keys, the example states the code's defaults.
    assert config.mqtt == model.MqttSection()
    assert config.nvml == model.NvmlSection()
    assert config.stages == model.StagesSection()
    assert config.engine == model.EngineSection()
    assert config.agent == model.AgentSection(site="fra1", rack="r07")
    assert config.pdus == () and config.cracs == ()


def test_example_passes_check_config_once_named(tmp_path: Path, capsys) -> None:
    import argparse

    assert check_run(argparse.Namespace(file=_named_example(tmp_path), conf_d=None)) == 0
    assert capsys.readouterr().out.strip() == "OK"


def test_example_as_shipped_is_refused_for_its_placeholders(capsys) -> None:
    """Two agents left on my-site/my-rack share one MQTT client id and knock each other off the broker."""
    import argparse

    assert check_run(argparse.Namespace(file=EXAMPLE, conf_d=None)) == 2
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["agent.site", "agent.rack"]
    assert all("placeholder" in line for line in lines)


def test_every_model_field_appears_in_the_example() -> None:
    text = EXAMPLE.read_text()
    missing = []
    for cls in vars(model).values():
        if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
            continue
        for f in dataclasses.fields(cls):
            if (cls.__name__, f.name) in NOT_OPTIONS:
                continue
            name = SECTION_OF_FIELD.get(f.name, f.name)
            pattern = rf"^\[\[{name}\]\]|^#? ?\[\[{name}\]\]" if cls is model.Config else rf"\b{name}\s*="
            if not re.search(pattern, text, re.MULTILINE) and not re.search(
                rf"^#? ?\[{name}\]", text, re.MULTILINE
            ):
                missing.append(f"{cls.__name__}.{f.name}")
    assert missing == [], f"options missing from packaging/agent.toml: {missing}"


def test_every_default_in_the_example_matches_the_code() -> None:
    """Each `key = value  # ...` line, commented or not, shows the model's default when there is one."""
    import tomllib

    sections = {
        "agent": model.AgentSection,
        "mqtt": model.MqttSection,
        "pdu": model.PduConfig,
        "crac": model.CracConfig,
        "nvml": model.NvmlSection,
        "dcgm": model.DcgmSection,
        "stages": model.StagesSection,
        "engine": model.EngineSection,
        "metrics": model.MetricsSection,
        "node": model.NodeSection,
        "node_link": model.NodeLinkSection,
        "uplink": model.UplinkSection,
    }
    current = None
    checked = 0
    for raw in EXAMPLE.read_text().splitlines():
        line = raw.lstrip("# ").rstrip()
        header = re.fullmatch(r"\[\[?([a-z_]+)\]\]?", line)
        if header:
            current = sections.get(header.group(1))
            continue
        match = re.match(r"([a-z_]+) = (.+?)\s+# (.*)$", line)
        if not (current and match):
            continue
        key, value_text, comment = match.groups()
        f = {f.name: f for f in dataclasses.fields(current)}.get(key)
        assert f is not None, f"{current.__name__} has no option {key!r} (example line: {raw!r})"
        if f.default is None and key != "gpus":
            assert re.search(r"default: (unset|false)|false = (off|never)", comment), (
                f"{current.__name__}.{key}: the example must say what leaving it unset means: {raw!r}"
            )
            continue
        if f.default is dataclasses.MISSING or "REQUIRED" in comment or value_text == "[":
            continue
        value = tomllib.loads(f"v = {value_text}")["v"]
        default = f.default
        if isinstance(default, Path):
            default = str(default)
        if key == "gpus":
            default = "all"  # the TOML spelling of None
        assert value == default, f"{current.__name__}.{key}: example says {value!r}, code says {default!r}"
        checked += 1
    assert checked > 40


def _uncommented_block(header: str) -> str:
    lines = EXAMPLE.read_text().splitlines()
    start = lines.index(f"# {header}")
    block = []
    for line in lines[start:]:
        if not line.startswith("#") or line.startswith("# ---"):
            break
        block.append(line[2:] if line.startswith("# ") else "")
    return "\n".join(block) + "\n"


def test_commented_crac_example_is_valid_when_uncommented(tmp_path: Path) -> None:
    config_path = tmp_path / "agent.toml"
    config_path.write_text('[agent]\nsite = "s"\nrack = "r"\n' + _uncommented_block("[[crac]]"))
    config = load_config(config_path)
    assert config.cracs[0].registers[1].signal == "supply_temp_c"


def test_commented_pdu_example_is_valid_when_uncommented(tmp_path: Path) -> None:
    block = _uncommented_block("[[pdu]]")
    # The example lists v2c and v3 keys together and a generic OID list: keep the v2c/auto subset.
    block = "\n".join(
        line
        for line in block.splitlines()
        if not re.match(r"(user|auth_key_file|priv_key_file|oids|  \{|\])\b", line)
        and not line.startswith(("  {", "]"))
    )
    secret = tmp_path / "pdu-a.community"
    secret.write_text("public\n")
    secret.chmod(0o600)
    block = block.replace("/etc/rackwatt/pdu-a.community", str(secret))
    config_path = tmp_path / "agent.toml"
    config_path.write_text('[agent]\nsite = "s"\nrack = "r"\n' + block + "\n")
    config = load_config(config_path)
    assert config.pdus[0].community_file == secret and config.pdus[0].deadline_s == 4.0
