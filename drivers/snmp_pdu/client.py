"""A read-only SNMP session to one PDU: targeted GETs and GETBULK table walks, pysnmp 7 asyncio.

Only GET and GETBULK are ever sent. OIDs stay numeric (``lookupMib=False``): MIB resolution costs
~105 µs of CPU per value in pysnmp. Values come back as Python ``int``/``float``/``str``, or
``None`` for NoSuchObject / NoSuchInstance / EndOfMibView, so nothing above this module sees pysnmp.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from pyasn1.type.univ import Null, ObjectIdentifier
from pysnmp.entity.rfc3413 import cmdgen
from pysnmp.hlapi.v3arch.asyncio import CommunityData, SnmpEngine, UdpTransportTarget, UsmUserData
from pysnmp.hlapi.v3arch.asyncio import auth as _auth
from pysnmp.hlapi.v3arch.asyncio.lcd import CommandGeneratorLcdConfigurator
from pysnmp.proto.rfc1902 import Integer, ObjectName, OctetString
from pysnmp.proto.rfc1905 import EndOfMibView, NoSuchInstance, NoSuchObject

Oid = tuple[int, ...]
Value = int | float | str | Oid | None

AUTH_PROTOCOLS: dict[str, Any] = {
    "none": _auth.USM_AUTH_NONE, "MD5": _auth.USM_AUTH_HMAC96_MD5, "SHA": _auth.USM_AUTH_HMAC96_SHA,
    "SHA224": _auth.USM_AUTH_HMAC128_SHA224, "SHA256": _auth.USM_AUTH_HMAC192_SHA256,
    "SHA384": _auth.USM_AUTH_HMAC256_SHA384, "SHA512": _auth.USM_AUTH_HMAC384_SHA512,
}
PRIV_PROTOCOLS: dict[str, Any] = {
    "none": _auth.USM_PRIV_NONE, "DES": _auth.USM_PRIV_CBC56_DES, "3DES": _auth.USM_PRIV_CBC168_3DES,
    "AES": _auth.USM_PRIV_CFB128_AES, "AES128": _auth.USM_PRIV_CFB128_AES,
    "AES192": _auth.USM_PRIV_CFB192_AES, "AES256": _auth.USM_PRIV_CFB256_AES,
    # Cisco-style key extension
    "AES192C": _auth.USM_PRIV_CFB192_AES_BLUMENTHAL, "AES256C": _auth.USM_PRIV_CFB256_AES_BLUMENTHAL,
}
TOO_BIG = 1  # SNMP errorStatus tooBig: the response would not fit one message
MAX_OIDS_PER_GET = 24  # a request of this many numeric varbinds fits any agent's message size
_LCD = CommandGeneratorLcdConfigurator()
_GET = cmdgen.GetCommandGenerator()
_BULK = cmdgen.BulkCommandGeneratorSingleRun()


class SnmpError(Exception):
    """A request failed (timeout, auth, agent error); the message is what an operator reads."""


def protocol(table: dict[str, Any], name: str, what: str) -> Any:
    """Look up a USM protocol by its configuration name, case-insensitively."""
    for key, value in table.items():
        if key.lower() == name.strip().lower():
            return value
    raise SnmpError(f"unknown {what} protocol {name!r}; known: {', '.join(table)}")


def v3_auth(user: str, auth_key: str | None, priv_key: str | None, auth_protocol: str,
            priv_protocol: str) -> UsmUserData:
    """USM credentials; no auth key → noAuthNoPriv, no priv key → authNoPriv."""
    if auth_key is None:
        return UsmUserData(user)
    auth_proto = protocol(AUTH_PROTOCOLS, auth_protocol, "SNMPv3 auth")
    if priv_key is None or priv_protocol.strip().lower() == "none":
        return UsmUserData(user, authKey=auth_key, authProtocol=auth_proto)
    return UsmUserData(user, authKey=auth_key, privKey=priv_key, authProtocol=auth_proto,
                       privProtocol=protocol(PRIV_PROTOCOLS, priv_protocol, "SNMPv3 privacy"))


def to_python(value: Any) -> Value:
    """A pysnmp value as plain Python; the "no value" markers become None."""
    if isinstance(value, NoSuchObject | NoSuchInstance | EndOfMibView) or value is None:
        return None
    if isinstance(value, ObjectIdentifier):
        return tuple(value)
    if isinstance(value, OctetString):
        raw = bytes(value.asOctets())
        return raw.decode() if raw.isascii() else raw.hex()
    if isinstance(value, Integer):
        return int(value)
    try:
        return int(value)  # Gauge32, Counter32/64, Unsigned32, TimeTicks
    except (TypeError, ValueError):
        return str(value)


def _describe(error_indication: Any) -> str:
    name = type(error_indication).__name__
    if name == "RequestTimedOut":
        return "timeout"
    text = str(error_indication)
    return f"{name}: {text}" if text and text != name else name


class SnmpSession:
    """Requests to one agent over a shared engine: ``get`` in batches and ``walk`` one column.

    Requests go straight to pysnmp's command generators with numeric varbinds: the hlapi
    wrappers resolve every OID through a MIB view first (CPU per value, and with pysmi installed
    a MIB compiler set-up that blocks the event loop for seconds on first use).
    """

    def __init__(self, engine: SnmpEngine, auth: CommunityData | UsmUserData, host: str, port: int,
                 timeout_s: float, retries: int, context: str = "") -> None:
        self.engine = engine
        self.auth = auth
        self.address = (host, port)
        self.timeout_s = timeout_s
        self.retries = retries
        self.context = context.encode()
        self._target: UdpTransportTarget | None = None
        self.requests = 0  # sent request PDUs, for the bench and health

    async def _transport(self) -> UdpTransportTarget:
        if self._target is None:
            try:
                self._target = await UdpTransportTarget.create(self.address, timeout=self.timeout_s,
                                                               retries=self.retries)
            except Exception as exc:  # DNS failure etc.
                raise SnmpError(f"cannot resolve {self.address[0]}: {exc}") from None
        return self._target

    async def _get_batch(self, oids: Sequence[Oid]) -> list[Value]:
        err_stat, err_idx, var_binds = await self._request(oids)
        if int(err_stat):
            if int(err_stat) == TOO_BIG and len(oids) > 1:
                half = len(oids) // 2
                return await self._get_batch(oids[:half]) + await self._get_batch(oids[half:])
            bad = oids[int(err_idx) - 1] if 0 < int(err_idx) <= len(oids) else None
            where = f" at {'.'.join(map(str, bad))}" if bad else ""
            raise SnmpError(f"agent error {err_stat.prettyPrint()}{where}")
        return [to_python(value) for _, value in var_binds]

    async def _request(self, oids: Sequence[Oid], bulk_repetitions: int = 0) -> tuple[Any, Any, Any]:
        """One GET (or GETBULK when ``bulk_repetitions``) PDU: (errorStatus, errorIndex, varbinds).

        The engine handles timeout and retries; what still fails (timeout, auth) is an SnmpError."""
        target = await self._transport()
        self.requests += 1
        future: asyncio.Future[tuple[Any, Any, Any, Any]] = asyncio.get_running_loop().create_future()

        def done(_engine: Any, _handle: Any, err_ind: Any, err_stat: Any, err_idx: Any, var_binds: Any,
                 _ctx: Any) -> None:
            if not future.done():  # cancelled by the poll deadline: drop the late answer
                future.set_result((err_ind, err_stat, err_idx, var_binds))

        var_binds = [(ObjectName(oid), Null("")) for oid in oids]
        try:
            addr_name, _ = _LCD.configure(self.engine, self.auth, target, self.context)
            if bulk_repetitions:
                _BULK.send_varbinds(self.engine, addr_name, None, self.context, 0, bulk_repetitions,
                                    var_binds, done)
            else:
                _GET.send_varbinds(self.engine, addr_name, None, self.context, var_binds, done)
        except Exception as exc:  # pysnmp raises for some v3 key problems instead of reporting them
            raise SnmpError(f"{type(exc).__name__}: {exc}") from None
        err_ind, err_stat, err_idx, answer = await future
        if err_ind:
            msg = _describe(err_ind)
            raise SnmpError(f"{msg} after {self.retries + 1} tries" if msg == "timeout" else msg)
        return err_stat, err_idx, answer

    async def get(self, oids: Sequence[Oid]) -> list[Value]:
        """Values of exactly these OIDs, in order; batched so each request stays small."""
        values: list[Value] = []
        for start in range(0, len(oids), MAX_OIDS_PER_GET):
            values.extend(await self._get_batch(oids[start:start + MAX_OIDS_PER_GET]))
        return values

    async def has_rows(self, column: Oid) -> bool:
        """Whether anything lies under ``column``: one GETBULK of one row (probing a MIB's key column)."""
        err_stat, _, var_binds = await self._request([column], 1)
        if int(err_stat) or not var_binds:
            return False
        name, value = var_binds[0]
        return not isinstance(value, EndOfMibView) and tuple(name)[: len(column)] == column

    async def walk(self, column: Oid, max_repetitions: int = 25) -> list[tuple[Oid, Value]]:
        """Every (index suffix, value) under ``column``, by GETBULK, in order."""
        rows: list[tuple[Oid, Value]] = []
        cursor = ObjectName(column)
        prefix_len = len(column)
        while True:
            err_stat, _, var_binds = await self._request([tuple(cursor)], max_repetitions)
            if int(err_stat):
                raise SnmpError(f"agent error {err_stat.prettyPrint()}")
            if not var_binds:
                return rows
            for name, value in var_binds:
                arcs = tuple(name)
                if isinstance(value, EndOfMibView) or arcs[:prefix_len] != column:
                    return rows
                rows.append((arcs[prefix_len:], to_python(value)))
            last = tuple(var_binds[-1][0])
            if last <= tuple(cursor):  # a broken agent that does not advance
                return rows
            cursor = ObjectName(last)
