"""Headless Chromium for the report tests (Debian's chromium, installed by .ci/setup)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--enable-logging=stderr",
    "--v=0",
    "--virtual-time-budget=15000",
]


@dataclass
class Rendered:
    dom: str
    log: str


@dataclass
class Chromium:
    binary: str
    profile_dir: Path

    def _run(self, extra: list[str], page: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.binary, *CHROMIUM_FLAGS, f"--user-data-dir={self.profile_dir}", *extra, page.as_uri()],
            capture_output=True,
            text=True,
            timeout=120,
        )

    def dump_dom(self, page: Path) -> Rendered:
        result = self._run(["--dump-dom"], page)
        return Rendered(result.stdout, result.stderr)

    def screenshot(self, page: Path, out: Path, size: str = "1400,2200") -> Rendered:
        result = self._run([f"--screenshot={out}", f"--window-size={size}", "--hide-scrollbars"], page)
        return Rendered(result.stdout, result.stderr)


@pytest.fixture(scope="session")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Chromium:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.skip("Debian's chromium is not installed (.ci/setup installs it)")
    return Chromium(binary, tmp_path_factory.mktemp("chromium-profile"))
