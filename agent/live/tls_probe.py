"""Why a TLS connection to the broker fails, in words an operator can act on.

paho swallows a failed connect's exception, so "wrong CA", "hostname mismatch" and "expired" would
all read "cannot reach broker". ``tls_failure`` (run by the publisher in a worker thread) makes one
handshake with the same files and checks as paho (``PROTOCOL_TLS_CLIENT``: chain and hostname).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from pathlib import Path

# OpenSSL X509_V_ERR_* codes (x509_vfy.h) the operator can fix, and how
_EXPIRED = 10
_NOT_YET_VALID = 9
_UNKNOWN_ISSUER = frozenset({2, 18, 19, 20, 21})  # no issuer / self-signed / not under ca_file
_HOSTNAME_MISMATCH = frozenset({62, 64})  # host name / IP address not in the certificate


def tls_failure(
    host: str,
    port: int,
    ca_file: Path,
    cert_file: Path | None = None,
    key_file: Path | None = None,
    timeout_s: float = 5.0,
) -> str | None:
    """The reason a TLS handshake with ``host:port`` fails, or None (it works, or TCP fails)."""
    try:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(cafile=str(ca_file))
        if cert_file is not None:
            context.load_cert_chain(str(cert_file), str(key_file) if key_file else None)
    except (OSError, ssl.SSLError, ValueError) as exc:
        return f"cannot load the TLS files (ca_file={ca_file}, cert_file={cert_file}): {exc}"
    try:
        raw = socket.create_connection((host, port), timeout=timeout_s)
    except OSError:
        return None  # not a TLS problem: the caller's "cannot reach" stands
    with raw:
        try:
            with context.wrap_socket(raw, server_hostname=host) as tls:
                # TLS 1.3 brokers reject a client certificate after the handshake, with an alert
                # on the first read; a healthy broker sends nothing before CONNECT (timeout = ok)
                tls.settimeout(min(1.0, timeout_s))
                with contextlib.suppress(TimeoutError):
                    tls.recv(1)
        except ssl.SSLCertVerificationError as exc:
            return describe_verify_error(exc, host, ca_file)
        except ssl.SSLError as exc:
            return describe_ssl_error(exc, cert_file)
        except OSError:
            return None
    return None


def describe_verify_error(exc: ssl.SSLCertVerificationError, host: str, ca_file: Path) -> str:
    code = getattr(exc, "verify_code", None)
    message = getattr(exc, "verify_message", None) or str(exc)
    if code == _EXPIRED:
        hint = "the broker's certificate has expired (renew it, or check this gateway's clock)"
    elif code == _NOT_YET_VALID:
        hint = "the broker's certificate is not valid yet (check this gateway's clock)"
    elif code in _UNKNOWN_ISSUER:
        hint = f"the broker's certificate is not signed by mqtt.ca_file ({ca_file})"
    elif code in _HOSTNAME_MISMATCH:
        hint = f"the broker's certificate does not name {host!r}: use a mqtt.host its subjectAltName lists"
    else:
        hint = "the broker's certificate was rejected"
    return f"certificate verify failed: {message} — {hint}"


def describe_ssl_error(exc: ssl.SSLError, cert_file: Path | None) -> str:
    reason = exc.reason or str(exc)
    text = str(reason)
    if "UNKNOWN_CA" in text or "BAD_CERTIFICATE" in text or "CERTIFICATE_REQUIRED" in text:
        where = f"mqtt.cert_file ({cert_file})" if cert_file else "no mqtt.cert_file is set"
        return f"the broker refused our client certificate ({text}; {where})"
    return f"TLS handshake failed: {text}"
