"""The rule for ``host`` values (PDUs, cooling units, the MQTT broker): a name or an address, nothing else.

Why strict: ``10.0.3.700``, ``10.0.3.7:161``, ``${PDU_HOST}`` or ``http://broker`` would otherwise
fail only at the first poll, deep in a driver's log; each common slip gets a message saying what to
write instead. ``_`` is tolerated in DNS labels: internal DNS and /etc/hosts use it.
"""

from __future__ import annotations

import ipaddress
import re

from agent.config.convert import show

# RFC 1035 2.3.4: a label is at most 63 octets and a name at most 255 on the wire, i.e. 253
# characters written as text without the trailing dot.
MAX_LABEL = 63
MAX_NAME = 253
_LABEL = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_-]*[A-Za-z0-9_])?")
_HOST_PORT = re.compile(r"(?P<host>[^:\[\]]+):(?P<port>[0-9]+)")
_BRACKETED = re.compile(r"\[(?P<host>[^\]]*)\](:(?P<port>[0-9]+))?")
_TEMPLATE = ("${", "$(", "{{", "}}", "%(")  # shell, Jinja/Ansible, Python/systemd-style placeholders


def host_problem(value: str) -> str | None:
    """Why ``value`` is not a host name or address, with what to write instead; None when it is."""
    text = value.strip()
    if not text:
        return "must not be empty"
    if "://" in text:
        return (f"is a URL, got {show(value)}: write only the host name or address "
                '(e.g. host = "broker.example") and the port in port = ...')
    if any(mark in text for mark in _TEMPLATE) or text.startswith("$"):
        return (f"looks like an unexpanded variable, got {show(value)}: the configuration does not "
                "expand variables; write the address itself (render the file with your config management)")
    if text != value or any(char.isspace() or not char.isprintable() for char in text):
        return f"must not contain spaces or control characters, got {show(value)}"
    bracketed = _BRACKETED.fullmatch(text)
    if bracketed:
        port = f" and port = {bracketed.group('port')}" if bracketed.group("port") else ""
        inner = bracketed.group("host")
        return f'write an IPv6 address without brackets, got {show(value)}: host = "{inner}"{port}'
    with_port = _HOST_PORT.fullmatch(text)
    if with_port:
        return (f"includes a port, got {show(value)}: write host = \"{with_port.group('host')}\" and "
                f"port = {with_port.group('port')}")
    if ":" in text:
        try:
            ipaddress.IPv6Address(text)
        except ValueError:
            return f"is not a valid IPv6 address, got {show(value)}"
        return None
    name = text[:-1] if text.endswith(".") else text
    labels = name.split(".")
    if all(label.isdigit() for label in labels):
        try:
            ipaddress.IPv4Address(name)
        except ValueError:
            return (f"is not a valid IPv4 address, got {show(value)}: four numbers 0-255 without leading "
                    "zeros, e.g. 10.0.3.7")
        return None
    if len(name) > MAX_NAME:
        return f"is {len(name)} characters long; a host name is at most {MAX_NAME}"
    for label in labels:
        if len(label) > MAX_LABEL:
            return f"has a {len(label)}-character part; each part of a host name is at most {MAX_LABEL}"
        if not _LABEL.fullmatch(label):
            return (f"is not a valid host name, got {show(value)}: letters, digits and - between dots, "
                    "not starting or ending with -")
    if labels[-1].isdigit():
        return f"is neither an IPv4 address nor a host name (its last part is a number), got {show(value)}"
    return None
