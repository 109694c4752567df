"""Host values: names and addresses pass; issue 21's first-day slips get a message saying what to write."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.config.errors import ConfigError
from agent.config.hosts import host_problem
from agent.config.loader import load_config

GOOD = [
    "10.0.3.7",
    "pdu-a.row3.example",
    "broker.example.",
    "localhost",
    "::1",
    "fe80::1%eth0",
    "2001:db8::7",
    "pdu_a",
    "a" * 63 + ".example",
]
BAD = {
    "10.0.3.700": "is not a valid IPv4 address",
    "10.0.3": "is not a valid IPv4 address",
    "010.0.3.7": "is not a valid IPv4 address",
    "10.0.3.7:161": 'includes a port, got "10.0.3.7:161": write host = "10.0.3.7" and port = 161',
    "pdu-a:161": 'write host = "pdu-a" and port = 161',
    "[::1]:1883": 'write an IPv6 address without brackets, got "[::1]:1883": host = "::1" and port = 1883',
    "${PDU_HOST}": "looks like an unexpanded variable",
    "$PDU_HOST": "looks like an unexpanded variable",
    "{{ pdu_host }}": "looks like an unexpanded variable",
    "http://10.0.3.7": "is a URL",
    "mqtts://broker.example:8883": "is a URL",
    " 10.0.3.7": "must not contain spaces",
    "pdu a": "must not contain spaces",
    "": "must not be empty",
    "-pdu.example": "is not a valid host name",
    "a..b": "is not a valid host name",
    "::g": "is not a valid IPv6 address",
    "1.2.3.4.5": "is not a valid IPv4 address",
    "host.123": "its last part is a number",
    "a" * 64 + ".example": "64-character part",
}


@pytest.mark.parametrize("host", GOOD)
def test_names_and_addresses_pass(host: str) -> None:
    assert host_problem(host) is None


@pytest.mark.parametrize(("host", "message"), BAD.items(), ids=list(BAD))
def test_slips_are_refused_with_what_to_write(host: str, message: str) -> None:
    problem = host_problem(host)
    assert problem is not None and message in problem


@pytest.mark.parametrize("section", ["mqtt", "pdu", "crac"])
def test_every_host_key_is_checked(tmp_path: Path, section: str) -> None:
    (tmp_path / "c").write_text("public\n")
    (tmp_path / "c").chmod(0o600)
    table = {
        "mqtt": "[mqtt]\n",
        "pdu": '[[pdu]]\nid = "a"\ncommunity_file = "c"\n',
        "crac": '[[crac]]\nid = "c1"\nprofile = "apc_inrow_sc"\n',
    }[section]
    path = tmp_path / "agent.toml"
    path.write_text('[agent]\nsite = "lab"\nrack = "r1"\n' + table + 'host = "${HOST}"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    (issue,) = info.value.issues
    assert issue.key_path.endswith("host") and "unexpanded variable" in issue.message
