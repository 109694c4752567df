"""The systemd unit (verify, exposure) and the .deb (build, contents, lintian, install tests).

The deb tests build the package from this checkout: twice for amd64 (the upgrade test needs two
versions) and once for arm64, each ~20 s with ``--fast`` compression; the first build of a day
downloads Debian's interpreter packages and PyPI's wheels into the cache (``RACKWATT_CACHE``).
The install tests need root (chroot, unshare) and debootstrap; each Debian root is built once
(~1 min) and cached as a tarball outside the repo; a cached run takes ~1.5 min per suite.
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
def test_systemd_security_exposure_at_most_1_5(tmp_path: Path) -> None:
    unit = _unit_with_existing_binary(tmp_path)
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=true", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout + result.stderr)
    assert match, result.stdout[-2000:]
    assert float(match.group(1)) <= 1.5


def test_unit_has_the_required_directives() -> None:
    text = UNIT.read_text()
    for directive in (
        "Type=notify",
        "WatchdogSec=",
        "Restart=on-failure",
        "StartLimitBurst=",
        "ExecStartPre=/usr/bin/rackwatt check-config",
        "ExecReload=/usr/bin/rackwatt reload --pid $MAINPID",
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
    assert "/bin/kill" not in text, "minimal images have no procps"
    device_allows = re.findall(r"^DeviceAllow=(\S+)", text, re.MULTILINE)
    assert device_allows and all("nvidia" in d for d in device_allows)


PACKAGING = REPO_ROOT / "packaging"
BUILD_TOOLS = ("dpkg-deb", "patchelf", "readelf")
needs_build_tools = pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in BUILD_TOOLS), reason=f"needs {', '.join(BUILD_TOOLS)}"
)


def _build(out: Path, deb_version: str, arch: str = "amd64") -> Path:
    result = subprocess.run(
        [str(PACKAGING / "build-deb.sh"), "--fast", "--arch", arch, "--deb-version", deb_version,
         "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return Path(result.stdout.strip().splitlines()[-1])


def _file_list(deb: Path) -> list[str]:
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    return sorted(line.split(None, 5)[5] for line in listing.splitlines())


def _field(deb: Path, name: str) -> str:
    return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True,
                          check=True).stdout.strip()


def _extract(deb: Path, dest: Path) -> Path:
    subprocess.run(["dpkg-deb", "-x", str(deb), str(dest)], check=True)
    return dest


def _elfdeps(root: Path, arch: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(PACKAGING / "elfdeps.py"), str(root), "--arch", arch],
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def two_debs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("dpkg-deb") is None or shutil.which("patchelf") is None:
        pytest.skip(f"needs {', '.join(BUILD_TOOLS)}")
    out = tmp_path_factory.mktemp("debs")
    return _build(out, "0.0.0-1"), _build(out, "0.0.0-2")


@pytest.mark.slow
@needs_build_tools
def test_deb_metadata_and_reproducible_file_list(two_debs: tuple[Path, Path], tmp_path: Path) -> None:
    old, new = two_debs
    assert _file_list(old) == _file_list(new), "two builds of one commit must ship the same files"
    files = _file_list(old)
    for path in (
        "./usr/bin/rackwatt",
        "./etc/rackwatt/agent.toml",
        "./etc/rackwatt/conf.d/",
        "./usr/lib/systemd/system/rackwatt.service",
        "./usr/lib/rackwatt/bin/python3.11",
        "./usr/lib/rackwatt/lib/python3.11/os.py",
        "./usr/lib/rackwatt/lib/python3.11/dist-packages/agent/",
        "./usr/lib/rackwatt/lib/python3.11/dist-packages/numpy/",
        "./usr/share/doc/rackwatt/docs/drift-playbook.md",
        "./usr/share/doc/rackwatt/docs/deploy.md",
        "./usr/share/doc/rackwatt/BUNDLED",
        "./usr/share/doc/rackwatt/bundled/libpython3.11-stdlib/copyright",
    ):
        assert any(f.startswith(path) for f in files), path
    assert not any("__pycache__" in f or f.endswith(".pyc") for f in files)
    conffiles = subprocess.run(["dpkg-deb", "-I", str(old), "conffiles"], capture_output=True,
                               text=True).stdout
    assert conffiles.strip() == "/etc/rackwatt/agent.toml"
    # Depends: the C library at the floor the binaries themselves require, and no python at all.
    depends = _field(old, "Depends")
    assert "python" not in depends, depends
    root = _extract(old, tmp_path / "root")
    computed = _elfdeps(root, "amd64")
    assert computed.returncode == 0, computed.stderr
    assert depends.startswith(computed.stdout.strip() + ", "), (depends, computed.stdout)
    assert re.search(r"libc6 \(>= 2\.\d+\)", depends), depends
    # md5sums covers every shipped file except the conffile (debsums can verify the install).
    md5sums = subprocess.run(["dpkg-deb", "-I", str(old), "md5sums"], capture_output=True, text=True,
                             check=True).stdout
    listed = {line.split(None, 1)[1] for line in md5sums.splitlines()}
    shipped = {f[2:] for f in files if not f.endswith("/") and " -> " not in f}
    assert listed == shipped - {"etc/rackwatt/agent.toml"}
    check = subprocess.run(["md5sum", "--check", "--quiet", "-"], input=md5sums, cwd=root,
                           capture_output=True, text=True)
    assert check.returncode == 0, check.stdout[-2000:]


@pytest.mark.slow
@needs_build_tools
def test_the_interpreter_runs_from_the_package_alone(two_debs: tuple[Path, Path], tmp_path: Path) -> None:
    """The bundled interpreter finds its stdlib, libraries and packages from where it lies."""
    root = _extract(two_debs[0], tmp_path / "root")
    python = root / "usr/lib/rackwatt/bin/python3.11"
    code = ("import sys, ssl, sqlite3, ctypes, lzma, uuid, numpy, cryptography.hazmat.primitives.ciphers, "
            "pysnmp, pymodbus, paho.mqtt.client, agent; print(sys.prefix); print(ssl.OPENSSL_VERSION)")
    result = subprocess.run([str(python), "-I", "-c", code], capture_output=True, text=True, timeout=120,
                            env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[0] == str(root / "usr/lib/rackwatt")


def test_elfdeps_rejects_a_binary_of_another_architecture(tmp_path: Path) -> None:
    if shutil.which("readelf") is None:
        pytest.skip("no readelf")
    shutil.copy(Path(sys.executable).resolve(), tmp_path / "prog")
    wrong = "arm64" if os.uname().machine == "x86_64" else "amd64"
    result = _elfdeps(tmp_path, wrong)
    assert result.returncode == 1
    assert "prog: machine is" in result.stderr


@pytest.mark.slow
@needs_build_tools
def test_arm64_package_holds_only_aarch64_binaries(tmp_path: Path) -> None:
    deb = _build(tmp_path / "out", "0.0.0-1", arch="arm64")
    assert _field(deb, "Architecture") == "arm64"
    root = _extract(deb, tmp_path / "root")
    result = _elfdeps(root, "arm64")  # every ELF file's machine is AArch64, every library resolved
    assert result.returncode == 0, result.stderr
    elf_count = sum(1 for p in root.rglob("*.so*") if p.is_file() and p.read_bytes()[:4] == b"\x7fELF")
    assert elf_count > 50  # the stdlib modules, the bundled libraries and the wheels' extensions
    assert _field(deb, "Depends").startswith(result.stdout.strip())
    if shutil.which("qemu-aarch64-static") is None:
        return  # the contents check above is the whole test without user-mode emulation
    # qemu user-mode emulation needs no binfmt_misc: run the arm64 interpreter directly, with an
    # arm64 C library from Debian as its root for the dynamic loader.
    cache = Path(os.environ.get("RACKWATT_CACHE") or Path.home() / ".cache" / "rackwatt")
    libc_debs = subprocess.run(
        [str(PACKAGING / "fetch-debs.sh"), "arm64", "bookworm", str(cache / "debian-bookworm-arm64-libc"),
         "libc6", "libgcc-s1", "libstdc++6"], capture_output=True, text=True, timeout=300)
    assert libc_debs.returncode == 0, libc_debs.stderr[-2000:]
    for libc_deb in Path(libc_debs.stdout.strip()).glob("*.deb"):
        _extract(libc_deb, root)
    run = subprocess.run(
        ["qemu-aarch64-static", "-L", str(root), str(root / "usr/lib/rackwatt/bin/python3.11"), "-I", "-c",
         "import platform, numpy, cryptography.hazmat.primitives.ciphers, agent; "
         "print(platform.machine(), agent.__version__)"],
        capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split()[0] == "aarch64"


@pytest.mark.slow
@needs_build_tools
@pytest.mark.skipif(shutil.which("lintian") is None, reason="no lintian")
def test_lintian_clean_with_justified_overrides(two_debs: tuple[Path, Path]) -> None:
    overrides = (PACKAGING / "debian" / "lintian-overrides").read_text().splitlines()
    for i, line in enumerate(overrides):
        if line.startswith("rackwatt:"):
            assert overrides[i - 1].startswith("#") or overrides[i - 1].startswith("rackwatt:"), line
    result = subprocess.run(
        ["lintian", "-I", "--fail-on", "error,warning,info", str(two_debs[0])],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert result.stdout.strip() == "", result.stdout[-3000:]


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    sim = subprocess.run(
        [sys.executable, "-m", "agent", "sim", "--scenario", "steady", "--days", "0.05", "--seed", "11",
         "--gpus", "8", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert sim.returncode == 0, sim.stderr[-2000:]
    return out / "trace.csv"


@pytest.mark.slow
@needs_build_tools
@pytest.mark.skipif(os.geteuid() != 0, reason="chroot install test needs root")
@pytest.mark.skipif(shutil.which("debootstrap") is None, reason="no debootstrap")
@pytest.mark.parametrize("suite", ["bookworm", "trixie"])  # Debian 12 and 13
def test_install_upgrade_purge_on_minimal_debian(
    suite: str, two_debs: tuple[Path, Path], trace: Path
) -> None:
    result = subprocess.run(
        [str(PACKAGING / "install-test.sh"), suite, str(two_debs[0]), str(two_debs[1]), str(trace)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert result.returncode == 0, result.stdout[-12000:] + result.stderr[-3000:]
    assert f"install-test[{suite}]: OK" in result.stderr
    assert "poll: 2 device(s) ok" in result.stderr


# serial: systemd judges the agent against its watchdog (wall clock); beside the other test workers
# on a 2-core machine it failed twice in .ci/run (an early restart) and passed alone and under a CPU load.
@pytest.mark.serial
@pytest.mark.slow
@needs_build_tools
@pytest.mark.skipif(os.geteuid() != 0, reason="booting systemd in namespaces needs root")
@pytest.mark.skipif(shutil.which("debootstrap") is None or shutil.which("nsenter") is None,
                    reason="needs debootstrap and nsenter")
def test_under_a_real_systemd_start_reload_watchdog(two_debs: tuple[Path, Path]) -> None:
    result = subprocess.run(
        [str(PACKAGING / "systemd-test.sh"), str(two_debs[0])],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-12000:] + result.stderr[-3000:]
    for step in ("start (Type=notify", "reload the agent rejects fails systemctl reload",
                 "killed by the watchdog and restarted", "systemd-test: OK"):
        assert step in result.stderr, step
