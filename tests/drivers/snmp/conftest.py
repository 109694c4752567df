"""snmpsim as a real SNMP peer: one simulator per test module, serving .snmprec files from tmp.

``start_snmpsim(tmp_dir, recordings)`` writes each recording as ``<community>.snmprec``, starts
``snmpsim-command-responder`` on a free loopback UDP port (v2c: community = file name; v3: user
``rackwatt`` SHA/AES with context = file name) and waits until it answers.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pysnmp.hlapi.v3arch.asyncio import (
    CommunityData,
    ContextData,
    ObjectIdentity,
    ObjectType,
    SnmpEngine,
    UdpTransportTarget,
    get_cmd,
)

from agent.config.model import PduConfig
from tests.conftest import free_port

V3_USER, V3_AUTH_KEY, V3_PRIV_KEY = "rackwatt", "authpass123", "privpass123"
# Further v3 users served by every simulator: (user, auth protocol, auth key, priv protocol, priv key)
V3_MORE_USERS = (
    ("strong", "SHA512", "authpass456", "AES256", "privpass456"),
    ("authonly", "SHA256", "authpass789", "none", None),
    ("legacy", "MD5", "authpass000", "AES192", "privpass000"),
)


@dataclass
class Snmpsim:
    port: int
    secrets: Path  # one file per community, plus the v3 keys
    process: subprocess.Popen[bytes]

    def pdu(self, community: str, **overrides: Any) -> PduConfig:
        """A v2c ``[[pdu]]`` for one served recording."""
        secret = self.secrets / f"{community}.community"
        secret.write_text(community + "\n")
        fields: dict[str, Any] = dict(id=community.replace("-", "_"), host="127.0.0.1", port=self.port,
                                      community_file=secret, timeout_s=1.0, retries=1, interval_s=5.0)
        fields.update(overrides)
        return PduConfig(**fields)

    def pdu_v3(self, community: str, user: str = V3_USER, **overrides: Any) -> PduConfig:
        users = {V3_USER: (V3_USER, "SHA", V3_AUTH_KEY, "AES", V3_PRIV_KEY)}
        users.update({u[0]: u for u in V3_MORE_USERS})
        _, auth_proto, auth_key, priv_proto, priv_key = users[user]
        auth, priv = self.secrets / f"{user}.auth", self.secrets / f"{user}.priv"
        auth.write_text(auth_key + "\n")
        if priv_key:
            priv.write_text(priv_key + "\n")
        fields: dict[str, Any] = dict(id="v3", host="127.0.0.1", port=self.port, version="3", user=user,
                                      auth_protocol=auth_proto, auth_key_file=auth, priv_protocol=priv_proto,
                                      priv_key_file=priv if priv_key else None, context=community,
                                      timeout_s=1.0, retries=1)
        fields.update(overrides)
        return PduConfig(**fields)


def _responder() -> str:
    exe = Path(sys.executable).with_name("snmpsim-command-responder")
    found = str(exe) if exe.exists() else shutil.which("snmpsim-command-responder")
    if not found:
        pytest.fail("snmpsim-command-responder not found: install the test extras (pip install -e .[test])")
    return found


async def _answers(port: int, community: str) -> bool:
    engine = SnmpEngine()
    try:
        target = await UdpTransportTarget.create(("127.0.0.1", port), timeout=1.0, retries=0)
        err, _, _, _ = await get_cmd(engine, CommunityData(community), target, ContextData(),
                                     ObjectType(ObjectIdentity("1.3.6.1.2.1.1.2.0")), lookupMib=False)
        return not err
    finally:
        engine.close_dispatcher()


def start_snmpsim(tmp: Path, recordings: Mapping[str, str], timeout_s: float = 20.0) -> Snmpsim:
    data, cache, secrets = tmp / "data", tmp / "cache", tmp / "secrets"
    for d in (data, cache, secrets):
        d.mkdir(parents=True, exist_ok=True)
    for community, text in recordings.items():
        (data / f"{community}.snmprec").write_text(text)
    port = free_port(socket.SOCK_DGRAM)
    log = (tmp / "snmpsim.log").open("wb")
    process = subprocess.Popen(
        [_responder(), "--log-level=error", "--v3-engine-id=auto",
         f"--data-dir={data}", f"--cache-dir={cache}",
         f"--v3-user={V3_USER}", f"--v3-auth-key={V3_AUTH_KEY}", "--v3-auth-proto=SHA",
         f"--v3-priv-key={V3_PRIV_KEY}", "--v3-priv-proto=AES", *_more_users(),
         f"--agent-udpv4-endpoint=127.0.0.1:{port}"],
        env={**os.environ, "SNMPSIM_ALLOW_ROOT": "true"}, stdout=log, stderr=subprocess.STDOUT)
    first = next(iter(recordings))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"snmpsim exited: {(tmp / 'snmpsim.log').read_text()[-2000:]}")
        if asyncio.run(_answers(port, first)):
            return Snmpsim(port, secrets, process)
    process.terminate()
    raise RuntimeError(f"snmpsim did not answer within {timeout_s} s")


def _more_users() -> list[str]:
    args = []
    for user, auth_proto, auth_key, priv_proto, priv_key in V3_MORE_USERS:
        args += [f"--v3-user={user}", f"--v3-auth-key={auth_key}", f"--v3-auth-proto={auth_proto}"]
        if priv_key:  # no privacy options at all → authNoPriv
            args += [f"--v3-priv-key={priv_key}", f"--v3-priv-proto={priv_proto}"]
    return args


def stop_snmpsim(sim: Snmpsim) -> None:
    sim.process.terminate()
    try:
        sim.process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        sim.process.kill()
        sim.process.wait(timeout=5)


@pytest.fixture(scope="module")
def snmpsim_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Call with {community: snmprec text}; the simulator is stopped when the module ends."""
    started: list[Snmpsim] = []

    def start(recordings: Mapping[str, str]) -> Snmpsim:
        sim = start_snmpsim(tmp_path_factory.mktemp("snmpsim"), recordings)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        stop_snmpsim(sim)
