"""The client is one stdlib-only file a training repository can copy."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import agent.stages.client as client_module


def test_client_imports_only_the_standard_library() -> None:
    tree = ast.parse(Path(client_module.__file__).read_text())
    modules = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module.split(".")[0])
    assert modules, "no imports found: the check itself is broken"
    assert modules <= set(sys.stdlib_module_names) | {"__future__"}, modules


def test_a_vendored_copy_works_in_an_isolated_interpreter(tmp_path: Path, sock_dir: Path) -> None:
    shutil.copy(client_module.__file__, tmp_path / "rackwatt_stage.py")
    path = sock_dir / "agent.sock"
    script = (
        "import socket, sys\n"
        "rx = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM); rx.bind(sys.argv[1]); rx.settimeout(5)\n"
        "import rackwatt_stage as rs\n"
        "with rs.stage('eval'):\n"
        "    print(rx.recv(2048).decode())\n"
        "rs.stage('NOT OK')\n"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(tmp_path)!r})\n" + script,
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        cwd=tmp_path,
        env={**os.environ, "RACKWATT_STAGE_SOCKET": str(path)},
    )
    assert proc.returncode == 0, proc.stderr
    assert '"stage":"eval"' in proc.stdout
    assert "invalid stage label" in proc.stderr  # warned once, did not raise


def test_user_exceptions_pass_through_a_stage_block(sock_dir: Path) -> None:
    client = client_module.StageClient(socket_path=str(sock_dir / "none.sock"))
    try:
        with client.stage("eval"):
            raise KeyError("from the training code")
    except KeyError as exc:
        assert "training code" in str(exc)
    else:
        raise AssertionError("the exception was swallowed")
    client.close()
