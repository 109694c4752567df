"""The systemd unit (verify, exposure) and the .deb (build, lintian, clean-Debian install test).

The deb tests build the package twice from this checkout (pip needs PyPI), so they are slow;
the install test also needs root (chroot) and debootstrap, and runs in CI where both exist.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
UNIT = REPO_ROOT / "systemd" / "rackwatt.service"

needs_systemd_analyze = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="no systemd-analyze"
)


def _unit_with_existing_binary(tmp_path: Path) -> Path:
    """The unit with /usr/bin/rackwatt pointed at a file that exists here (verify checks it)."""
    fake_bin = tmp_path / "rackwatt"
    fake_bin.write_text("#!/bin/sh\nexit 0\n")
    fake_bin.chmod(0o755)
    unit = tmp_path / "rackwatt.service"
    unit.write_text(UNIT.read_text().replace("/usr/bin/rackwatt", str(fake_bin)))
    return unit


@needs_systemd_analyze
def test_systemd_verify_prints_nothing(tmp_path: Path) -> None:
    unit = _unit_with_existing_binary(tmp_path)
    result = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout + result.stderr == "", "verify exits 0 on warnings: any output is a failure"


@needs_systemd_analyze
def test_systemd_security_exposure_at_most_2_5(tmp_path: Path) -> None:
    unit = _unit_with_existing_binary(tmp_path)
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout + result.stderr)
    assert match, result.stdout[-2000:]
    assert float(match.group(1)) <= 2.5


def test_unit_has_the_required_directives() -> None:
    text = UNIT.read_text()
    for directive in (
        "Type=notify",
        "WatchdogSec=",
        "Restart=on-failure",
        "StartLimitBurst=",
        "ExecStartPre=/usr/bin/rackwatt check-config",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "ExecStart=/usr/bin/rackwatt run --config /etc/rackwatt/agent.toml --conf-d /etc/rackwatt/conf.d",
        "User=rackwatt",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "StateDirectory=rackwatt",
        "RuntimeDirectory=rackwatt",
        "ProtectHome=yes",
        "PrivateTmp=yes",
        "RestrictAddressFamilies=",
        "SystemCallFilter=@system-service",
        "DevicePolicy=closed",
    ):
        assert directive in text, directive
    assert re.search(r"^CapabilityBoundingSet=$", text, re.MULTILINE)
    device_allows = re.findall(r"^DeviceAllow=(\S+)", text, re.MULTILINE)
    assert device_allows and all("nvidia" in d for d in device_allows)


def _build(out: Path, deb_version: str) -> Path:
    result = subprocess.run(
        [str(REPO_ROOT / "packaging" / "build-deb.sh"), "--deb-version", deb_version, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return Path(result.stdout.strip().splitlines()[-1])


def _file_list(deb: Path) -> list[str]:
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    return sorted(line.split(None, 5)[5] for line in listing.splitlines())


@pytest.fixture(scope="module")
def two_debs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("dpkg-deb") is None or not Path("/usr/bin/python3.11").exists():
        pytest.skip("needs dpkg-deb and Debian's /usr/bin/python3.11")
    out = tmp_path_factory.mktemp("debs")
    return _build(out, "0.0.0-1"), _build(out, "0.0.0-2")


@pytest.mark.slow
def test_deb_metadata_and_reproducible_file_list(two_debs: tuple[Path, Path]) -> None:
    old, new = two_debs
    assert _file_list(old) == _file_list(new), "two builds of one commit must ship the same files"
    files = _file_list(old)
    for path in (
        "./usr/bin/rackwatt",
        "./etc/rackwatt/agent.toml",
        "./etc/rackwatt/conf.d/",
        "./lib/systemd/system/rackwatt.service",
        "./usr/lib/rackwatt/venv/bin/python",
    ):
        assert any(f.startswith(path) for f in files), path
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in files)
    fields = subprocess.run(["dpkg-deb", "-f", str(old), "Depends"], capture_output=True, text=True).stdout
    minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert minor in fields
    conffiles = subprocess.run(
        ["dpkg-deb", "-I", str(old), "conffiles"], capture_output=True, text=True
    ).stdout
    assert conffiles.strip() == "/etc/rackwatt/agent.toml"


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("lintian") is None, reason="no lintian")
def test_lintian_clean_with_justified_overrides(two_debs: tuple[Path, Path]) -> None:
    overrides = (REPO_ROOT / "packaging" / "debian" / "lintian-overrides").read_text().splitlines()
    for i, line in enumerate(overrides):
        if line.startswith("rackwatt:"):
            assert overrides[i - 1].startswith("#") or overrides[i - 1].startswith("rackwatt:"), line
    result = subprocess.run(
        ["lintian", "--fail-on", "error,warning", str(two_debs[0])],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="chroot install test needs root")
@pytest.mark.skipif(shutil.which("debootstrap") is None, reason="no debootstrap")
def test_install_upgrade_purge_on_clean_debian(two_debs: tuple[Path, Path], tmp_path: Path) -> None:
    sim = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent",
            "sim",
            "--scenario",
            "steady",
            "--days",
            "0.05",
            "--seed",
            "11",
            "--gpus",
            "8",
            "--out",
            str(tmp_path / "sim"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert sim.returncode == 0, sim.stderr[-2000:]
    result = subprocess.run(
        [
            str(REPO_ROOT / "packaging" / "install-test.sh"),
            str(two_debs[0]),
            str(two_debs[1]),
            str(tmp_path / "sim" / "trace.csv"),
        ],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "install-test: OK" in result.stderr
