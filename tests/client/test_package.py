"""The client package stands alone: standard library only, one owner of the stage client."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import rackwatt_client
import rackwatt_client.stage_hints


def test_every_module_imports_only_the_standard_library() -> None:
    root = Path(rackwatt_client.__file__).parent
    modules: set[str] = set()
    files = sorted(root.glob("*.py"))
    assert len(files) >= 5
    for path in files:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                modules |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module:
                modules.add(node.module.split(".")[0])
    assert "socket" in modules  # the walk found the imports
    assert modules <= set(sys.stdlib_module_names) | {"__future__", "rackwatt_client"}, modules


def test_the_agents_old_import_path_is_the_same_module() -> None:
    import agent.stages.client as old
    from agent.stages.client import DEFAULT_SOCKET, StageClient

    assert old is rackwatt_client.stage_hints
    assert StageClient is rackwatt_client.StageClient and DEFAULT_SOCKET == "/run/rackwatt/stage.sock"
