#!/usr/bin/env python3
"""What the bundled binaries of a staged package need from the target system, read from the ELF files.

The package brings its own interpreter and libraries, so the only things it takes from the
target are the C library and the compiler runtime. This script proves that from the binaries
themselves (no typed version): it walks every ELF file under a staging folder and

- checks each one's machine is the package's architecture (an x86-64 library in the arm64
  package would fail only on the gateway);
- checks every DT_NEEDED library is either bundled in the tree or one of ``SYSTEM_LIBRARIES``;
- computes the floor of each system package from the highest symbol version the files require
  (``GLIBC_2.35`` → ``libc6 (>= 2.35)``).

It prints the ``Depends`` fragment (e.g. ``libc6 (>= 2.35), libgcc-s1``) on stdout, or every
problem on stderr and exits 1. It uses ``readelf`` (binutils), which reads any architecture.

    packaging/elfdeps.py STAGE_DIR --arch arm64
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

# Debian architecture → the ``Machine:`` readelf prints for its ELF files.
MACHINES = {"amd64": "Advanced Micro Devices X86-64", "arm64": "AArch64"}

# Libraries every glibc system has, by the Debian package that ships them there. These are the
# only ones the package may take from the target: libc6 (glibc, incl. its split-out libm,
# libpthread, libdl, librt, libutil, libresolv and the dynamic loader) and libgcc-s1 (the GCC
# unwinder, which Rust and C++ code links) are both Priority: required in Debian and Ubuntu.
# libstdc++6 is in every Debian/Ubuntu base (apt links it); it is allowed for C++ wheels, whose
# manylinux policy caps the GLIBCXX version at one far older than any supported release.
SYSTEM_LIBRARIES = {
    "libc.so.6": "libc6",
    "libm.so.6": "libc6",
    "libpthread.so.0": "libc6",
    "libdl.so.2": "libc6",
    "librt.so.1": "libc6",
    "libutil.so.1": "libc6",
    "libresolv.so.2": "libc6",
    "ld-linux-x86-64.so.2": "libc6",
    "ld-linux-aarch64.so.1": "libc6",
    "libgcc_s.so.1": "libgcc-s1",
    "libstdc++.so.6": "libstdc++6",
}
# Symbol-version prefix → the package whose version it encodes (GLIBC_2.35 is glibc 2.35).
VERSIONED = {"GLIBC_": "libc6"}
ELF_MAGIC = b"\x7fELF"


def elf_files(root: Path) -> list[Path]:
    """Every regular ELF file under ``root`` (symlinks are counted once, at their target)."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as f:
                if f.read(4) == ELF_MAGIC:
                    found.append(path)
    return found


def readelf(*args: str) -> str:
    return subprocess.run(["readelf", "-W", *args], capture_output=True, text=True, check=True).stdout


def machine(path: Path) -> str:
    match = re.search(r"^\s*Machine:\s*(.+?)\s*$", readelf("-h", str(path)), re.MULTILINE)
    return match.group(1) if match else "?"


def needed(path: Path) -> list[str]:
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", readelf("-d", str(path)))


def required_versions(path: Path) -> list[str]:
    """The symbol versions this file requires of other libraries (its .gnu.version_r section)."""
    section = readelf("-V", str(path)).split("Version needs section", 1)
    return re.findall(r"Name: (\S+)\s+Flags", section[1]) if len(section) > 1 else []


def version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def analyse(root: Path, arch: str) -> tuple[dict[str, str], dict[str, str], list[str]]:
    """(system package → minimum version or "", package → the file that sets it, problems)."""
    files = elf_files(root)
    bundled = {p.name for p in root.rglob("*") if p.is_file() or p.is_symlink()}
    floors: dict[str, str] = {}
    set_by: dict[str, str] = {}
    problems = []
    if not files:
        problems.append(f"{root}: no ELF files found (wrong folder?)")
    for path in files:
        rel = path.relative_to(root)
        got = machine(path)
        if got != MACHINES[arch]:
            problems.append(f"{rel}: machine is {got}, not {MACHINES[arch]} ({arch})")
        for lib in needed(path):
            if lib in SYSTEM_LIBRARIES:
                floors.setdefault(SYSTEM_LIBRARIES[lib], "")
            elif lib not in bundled:
                problems.append(f"{rel}: needs {lib}, which is neither bundled nor in the C library")
        for version in required_versions(path):
            for prefix, package in VERSIONED.items():
                if version.startswith(prefix) and version[len(prefix):][:1].isdigit():
                    number = version[len(prefix):]
                    if version_key(number) > version_key(floors.get(package) or "0"):
                        floors[package] = number
                        set_by[package] = str(rel)
    return floors, set_by, problems


def depends(floors: dict[str, str]) -> str:
    return ", ".join(f"{pkg} (>= {floors[pkg]})" if floors[pkg] else pkg for pkg in sorted(floors))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="staging folder of the package")
    parser.add_argument("--arch", required=True, choices=sorted(MACHINES))
    args = parser.parse_args(argv)
    floors, set_by, problems = analyse(args.root, args.arch)
    for problem in problems:
        print(f"elfdeps: {problem}", file=sys.stderr)
    if problems:
        return 1
    for package, path in sorted(set_by.items()):
        print(f"elfdeps: {package} (>= {floors[package]}) is set by {path}", file=sys.stderr)
    print(depends(floors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
