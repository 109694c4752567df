"""A bounded HTTP GET on asyncio streams: enough for a metrics endpoint, nothing more.

The agent's fixed dependencies have no HTTP client, and a scrape needs only one request with a
deadline and a size bound: HTTP/1.0 with ``Connection: close`` (so the server sends the body
plain, not chunked, and closes at its end), optional basic auth and TLS.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from dataclasses import dataclass
from urllib.parse import urlsplit

HEADER_LIMIT = 64 * 1024  # status line + headers; real exporters send a few hundred bytes


class HttpError(Exception):
    """The request failed; the message says how (refused, timed out, HTTP status, too large)."""


@dataclass(frozen=True)
class Target:
    scheme: str
    host: str
    port: int
    path: str

    @property
    def where(self) -> str:
        return f"{self.host}:{self.port}"


def parse_url(url: str) -> Target:
    """``http(s)://host[:port]/path`` → ``Target``; raises ``ValueError`` naming what is wrong."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"must start with http:// or https://, got {url!r}")
    if not parts.hostname:
        raise ValueError(f"has no host, got {url!r}")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError as exc:
        raise ValueError(f"has a bad port, got {url!r}") from exc
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Target(parts.scheme, parts.hostname, port, path)


async def http_get(
    target: Target,
    *,
    timeout_s: float,
    max_body_bytes: int,
    basic_auth: tuple[str, str] | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> bytes:
    """The body of a 200 answer; raises ``HttpError`` for anything else, within ``timeout_s``."""
    try:
        async with asyncio.timeout(timeout_s):
            return await _get(target, max_body_bytes, basic_auth, ssl_context)
    except TimeoutError as exc:
        raise HttpError(f"no answer within {timeout_s:g} s") from exc
    except ssl.SSLError as exc:
        raise HttpError(f"TLS failed: {exc.reason or exc}") from exc
    except ConnectionRefusedError as exc:
        raise HttpError("connection refused (exporter not running?)") from exc
    except OSError as exc:
        raise HttpError(f"cannot connect: {exc.strerror or exc}") from exc


async def _get(
    target: Target,
    max_body_bytes: int,
    basic_auth: tuple[str, str] | None,
    ssl_context: ssl.SSLContext | None,
) -> bytes:
    tls = ssl_context if target.scheme == "https" else None
    if target.scheme == "https" and tls is None:
        tls = ssl.create_default_context()
    reader, writer = await asyncio.open_connection(target.host, target.port, ssl=tls, limit=HEADER_LIMIT)
    try:
        lines = [
            f"GET {target.path} HTTP/1.0",
            f"Host: {target.where}",
            "User-Agent: rackwatt",
            "Accept: text/plain",
            "Connection: close",
        ]
        if basic_auth is not None:
            token = base64.b64encode(f"{basic_auth[0]}:{basic_auth[1]}".encode()).decode("ascii")
            lines.append(f"Authorization: Basic {token}")
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
        await writer.drain()
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.IncompleteReadError as exc:
            raise HttpError("the server closed the connection without an HTTP answer") from exc
        except asyncio.LimitOverrunError as exc:
            raise HttpError(f"HTTP headers longer than {HEADER_LIMIT} bytes") from exc
        status, headers = _parse_head(head)
        if status != 200:
            raise HttpError(f"HTTP {status}" + (" (check username/password_file)" if status == 401 else ""))
        if headers.get("transfer-encoding", "").lower() == "chunked":
            raise HttpError("chunked answer to an HTTP/1.0 request (not a metrics endpoint?)")
        try:
            await reader.readexactly(max_body_bytes + 1)
        except asyncio.IncompleteReadError as exc:  # the server closed the connection: the whole body
            return exc.partial
        raise HttpError(f"answer larger than {max_body_bytes} bytes")
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    text = head.decode("latin-1")
    status_line, *header_lines = text.split("\r\n")
    parts = status_line.split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise HttpError(f"not an HTTP answer: {status_line[:60]!r}")
    headers = {}
    for line in header_lines:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    return int(parts[1]), headers
