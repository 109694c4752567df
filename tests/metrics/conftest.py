"""Helpers for the metrics tests: parse an exposition, run promtool on it."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """(sample name, labels) → value of every sample in an exposition."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def promtool_problems(text: str) -> str:
    """``promtool check metrics`` on an exposition: its complaints ('' when clean)."""
    if shutil.which("promtool") is None:
        pytest.fail("promtool is not installed (Debian package prometheus; run .ci/setup)")
    done = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    return (done.stdout + done.stderr).strip() if done.returncode else ""
