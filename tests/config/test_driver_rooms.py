"""Driver rooms own their configuration (issue 17): each ``drivers/<room>/config.py`` declares its
section's dataclass, value rules and cross-key rules; ``agent.config`` only assembles them, and
no driver imports ``agent.config.model``."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from agent.config.rules import SECTIONS

ROOT = Path(__file__).resolve().parents[2]
SHARED = ("agent.config.checks", "agent.config.hosts")  # value rules every section may use
DEVICE_SECTIONS = {"pdu": "snmp_pdu", "crac": "modbus_crac", "nvml": "nvml_gpu", "dcgm": "dcgm_exporter"}


def test_every_device_section_is_declared_in_its_driver_room() -> None:
    for section, room in DEVICE_SECTIONS.items():
        cls, _, _, spec, cross = SECTIONS[section]
        home = f"drivers.{room}.config"
        assert cls.__module__ == home, section
        for value_check in [c for checks in spec.checks.values() for c in checks]:
            assert value_check.__module__ in (home, *SHARED), (section, value_check)
        assert cross is None or cross.__module__ == home, section


def test_no_driver_imports_the_assembled_configuration() -> None:
    offenders = []
    for path in (ROOT / "drivers").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if any(n == "agent.config.model" or n.startswith("agent.config.loader") for n in names):
                offenders.append(str(path.relative_to(ROOT)))
    assert not offenders


def test_loading_a_configuration_imports_no_device_library(tmp_path: Path) -> None:
    """The rooms' packages stay light: checking ``[[pdu]]``/``[[crac]]``/``[nvml]`` keys never
    imports pysnmp, pymodbus or pynvml (a host without SNMP devices never loads pysnmp)."""
    (tmp_path / "community").write_text("public\n")
    (tmp_path / "community").chmod(0o600)
    config = tmp_path / "agent.toml"
    config.write_text(
        '[agent]\nsite = "s"\nrack = "r"\n'
        f'[[pdu]]\nid = "a"\nhost = "127.0.0.1"\ncommunity_file = "{tmp_path / "community"}"\n'
        '[[crac]]\nid = "c"\nhost = "127.0.0.1"\nprofile = "liebert_crv"\n[nvml]\ngpus = [0]\n'
    )
    code = (
        "import sys\nfrom agent.config.loader import load_config\n"
        f"load_config({str(config)!r})\n"
        "print(sorted(m for m in ('pysnmp', 'pymodbus', 'pynvml') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stderr
