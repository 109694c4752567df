"""A live SNMP rack PDU on loopback (GET, GETNEXT, GETBULK; no SET), for the demo, benches and tests.

It serves ``values_fn()`` (power_w, energy_kwh, voltage_v, current_a, pf) as one vendor's firmware
encodes them; the encoders are written from the vendor MIBs, independently of the driver's
profiles. v2c and, optionally, one SNMPv3 user (authPriv SHA/AES). Standalone:
``python -m agent.sim.devices.snmp_agent --vendor apc_rpdu2 --port 16161``.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pysnmp.carrier.asyncio.dgram import udp
from pysnmp.entity import config, engine
from pysnmp.entity.rfc3413 import cmdrsp, context
from pysnmp.proto.rfc1902 import Gauge32, Integer32, ObjectIdentifier, OctetString
from pysnmp.proto.rfc1905 import EndOfMibView, NoSuchInstance
from pysnmp.smi.instrum import AbstractMibInstrumController

from agent.trace.model import J_PER_KWH

Oid = tuple[int, ...]
ValuesFn = Callable[[], Mapping[str, float | None]]
# (snmprec type tag, value): 2 INTEGER, 4 OCTET STRING, 6 OID, 66 Gauge32
Cell = tuple[int, int | str | Oid]

SYS = (1, 3, 6, 1, 2, 1, 1)
APC = (1, 3, 6, 1, 4, 1, 318, 1, 1, 26)
RARITAN = (1, 3, 6, 1, 4, 1, 13742, 6)


def _system(descr: str, object_id: Oid) -> dict[Oid, Cell]:
    return {(*SYS, 1, 0): (4, descr), (*SYS, 2, 0): (6, object_id), (*SYS, 5, 0): (4, "rackwatt-sim-pdu")}


def _get(values: Mapping[str, float | None], name: str) -> float | None:
    value = values.get(name)
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _share(values: Mapping[str, float | None], units: int) -> dict[str, float | None]:
    """One unit's readings when the feed's load is spread evenly over a daisy-chain."""
    out = dict(values)
    for name in ("power_w", "energy_kwh", "current_a"):
        value = _get(values, name)
        out[name] = None if value is None else value / units
    return out


def _apc(values: Mapping[str, float | None], outlets: int, units: int = 1) -> dict[Oid, Cell]:
    """APC rPDU2 (PowerNet-MIB): device kW in hundredths, kWh in tenths, phase A in tenths, -1 = n/a;
    ``units`` > 1: a Network Port Sharing chain, one device and one phase row per unit."""
    each = _share(values, units)

    def enc(name: str, per_unit: float) -> int:
        value = _get(each, name)
        return -1 if value is None else round(value / per_unit)

    cells = _system(
        "APC Web/SNMP Management Card (MB:v4.1.0 PF:v6.8.2 PN:apc_hw05_aos_682.bin "
        "AF1:v6.8.2 AN1:apc_hw05_rpdu2g_682.bin MN:AP8853 HR:02)",
        (1, 3, 6, 1, 4, 1, 318, 1, 3, 4, 6),
    )
    device, phase, outlet = (*APC, 4, 3, 1), (*APC, 6, 3, 1), (*APC, 9, 4, 3, 1)
    for u in range(1, units + 1):
        cells.update(
            {
                (*device, 1, u): (2, u),
                (*device, 2, u): (2, u),  # Module: the unit's place in the chain
                (*device, 3, u): (4, f"rackwatt-sim-{u}"),
                (*device, 5, u): (2, enc("power_w", 10)),  # rPDU2DeviceStatusPower, 0.01 kW
                (*device, 9, u): (2, enc("energy_kwh", 0.1)),  # rPDU2DeviceStatusEnergy, 0.1 kWh
                (*device, 17, u): (2, enc("pf", 0.01)),  # rPDU2DeviceStatusPowerFactor, 0.01
                (*phase, 1, u): (2, u),
                (*phase, 2, u): (2, u),
                (*phase, 3, u): (2, 1),
                (*phase, 5, u): (2, enc("current_a", 0.1)),  # rPDU2PhaseStatusCurrent, 0.1 A
                (*phase, 6, u): (2, enc("voltage_v", 1)),  # rPDU2PhaseStatusVoltage, V
                (*phase, 7, u): (2, enc("power_w", 10)),
                (*phase, 9, u): (2, enc("pf", 0.01)),
            }
        )
    power_w, current_a = _get(each, "power_w"), _get(each, "current_a")
    for n in range(1, outlets + 1):  # rPDU2OutletMeteredStatus: W (not kW) and 0.1 A per outlet
        cells[(*outlet, 1, n)] = (2, n)
        cells[(*outlet, 6, n)] = (2, -1 if current_a is None else round(current_a / outlets / 0.1))
        cells[(*outlet, 7, n)] = (2, -1 if power_w is None else round(power_w / outlets))
    return cells


def _raritan(values: Mapping[str, float | None], outlets: int, units: int = 1) -> dict[Oid, Cell]:
    """Raritan PDU2-MIB: Unsigned32 values, each divided by 10^digits from the configuration table;
    ``units`` > 1: a cascade, inlet sensors of pduId 1…units."""
    each = _share(values, units)
    cells = _system("PX3-5493U-K2 rackwatt-sim", RARITAN)
    inlet_cfg, inlet_val = (*RARITAN, 3, 3, 4, 1), (*RARITAN, 5, 2, 3, 1)
    # sensor type → (signal, decimal digits, multiplier to the sensor unit)
    sensors = {1: ("current_a", 3, 1.0), 4: ("voltage_v", 0, 1.0), 5: ("power_w", 0, 1.0), 7: ("pf", 2, 1.0),
               8: ("energy_kwh", 0, 1000.0)}
    for pdu in range(1, units + 1):
        cells[(*RARITAN, 3, 2, 2, 1, 2, pdu)] = (2, 1)  # inletCount
        cells[(*RARITAN, 3, 2, 2, 1, 4, pdu)] = (2, outlets)  # outletCount
        for sensor, (name, digits, unit) in sensors.items():
            value = _get(each, name)
            index = (pdu, 1, sensor)
            cells[(*inlet_cfg, 7, *index)] = (66, digits)
            cells[(*inlet_val, 2, *index)] = (2, 2 if value is None else 1)  # IsAvailable (TruthValue)
            raw = 0 if value is None else round(value * unit * 10**digits) % 2**32  # Unsigned32 wraps
            cells[(*inlet_val, 4, *index)] = (66, raw)
    power_w = _get(each, "power_w")
    outlet_cfg, outlet_val = (*RARITAN, 3, 5, 4, 1), (*RARITAN, 5, 4, 3, 1)
    for n in range(1, outlets + 1):
        cells[(*outlet_cfg, 7, 1, n, 5)] = (66, 0)
        cells[(*outlet_val, 4, 1, n, 5)] = (66, 0 if power_w is None else round(power_w / outlets))
    return cells


ENCODERS: dict[str, Callable[[Mapping[str, float | None], int, int], dict[Oid, Cell]]] = {
    "apc_rpdu2": _apc, "raritan_pdu2": _raritan
}


def render(
    vendor: str, values: Mapping[str, float | None], outlets: int = 24, units: int = 1
) -> dict[Oid, Cell]:
    """Every OID the simulated PDU serves; ``units`` daisy-chained units share the load evenly."""
    if vendor not in ENCODERS:
        raise ValueError(f"unknown simulated PDU vendor {vendor!r}; known: {', '.join(ENCODERS)}")
    if units < 1:
        raise ValueError(f"units must be >= 1, got {units}")
    return ENCODERS[vendor](values, outlets, units)


def to_snmprec(cells: Mapping[Oid, Cell]) -> str:
    """The cells as snmpsim ``.snmprec`` text (sorted by OID)."""
    lines = []
    for oid in sorted(cells):
        tag, value = cells[oid]
        text = ".".join(map(str, value)) if isinstance(value, tuple) else str(value)
        lines.append(f"{'.'.join(map(str, oid))}|{tag}|{text}")
    return "\n".join(lines) + "\n"


def _pysnmp_value(cell: Cell) -> Any:
    tag, value = cell
    if tag == 6:
        return ObjectIdentifier(value)
    if tag == 4:
        return OctetString(str(value))
    if tag == 66:
        return Gauge32(int(value))  # type: ignore[arg-type]
    return Integer32(int(value))  # type: ignore[arg-type]


class _Instrum(AbstractMibInstrumController):  # type: ignore[misc,unused-ignore]  # pysnmp is untyped
    """Answers GET/GETNEXT from a snapshot of the rendered OIDs (refreshed every ``refresh_s``)."""

    def __init__(self, snapshot: Callable[[], tuple[list[Oid], dict[Oid, Cell]]]) -> None:
        self._snapshot = snapshot

    def read_variables(self, *var_binds: Any, **context: Any) -> list[tuple[Any, Any]]:
        _, cells = self._snapshot()
        out = []
        for name, _ in var_binds:
            cell = cells.get(tuple(name))
            out.append((name, NoSuchInstance() if cell is None else _pysnmp_value(cell)))
        return out

    def read_next_variables(self, *var_binds: Any, **context: Any) -> list[tuple[Any, Any]]:
        keys, cells = self._snapshot()
        out = []
        for name, _ in var_binds:
            i = bisect.bisect_right(keys, tuple(name))
            if i >= len(keys):
                out.append((name, EndOfMibView()))
            else:
                out.append((ObjectIdentifier(keys[i]), _pysnmp_value(cells[keys[i]])))
        return out

    def write_variables(self, *var_binds: Any, **context: Any) -> list[tuple[Any, Any]]:
        raise NotImplementedError("read-only simulated PDU")


@dataclass
class SimSnmpPdu:
    """Serve one simulated PDU until ``stop()``; use as ``async with``. Read-only (no SET responder)."""

    values_fn: ValuesFn
    port: int
    vendor: str = "apc_rpdu2"
    host: str = "127.0.0.1"
    community: str = "public"
    outlets: int = 24
    units: int = 1  # daisy-chained units; may be changed while serving (a unit joins or leaves)
    v3_user: str | None = None
    v3_auth_key: str | None = None  # SHA
    v3_priv_key: str | None = None  # AES-128
    refresh_s: float = 0.2
    requests: int = 0
    _engine: Any = field(default=None, repr=False)
    _cache: tuple[float, list[Oid], dict[Oid, Cell]] | None = field(default=None, repr=False)

    def _snapshot(self) -> tuple[list[Oid], dict[Oid, Cell]]:
        now = time.monotonic()
        self.requests += 1
        if self._cache is None or now - self._cache[0] > self.refresh_s:
            cells = render(self.vendor, self.values_fn(), self.outlets, self.units)
            self._cache = (now, sorted(cells), cells)
        return self._cache[1], self._cache[2]

    async def start(self) -> None:
        render(self.vendor, {}, self.outlets)  # unknown vendor → ValueError before binding
        snmp = engine.SnmpEngine()
        transport = udp.UdpAsyncioTransport().open_server_mode((self.host, self.port))
        config.add_transport(snmp, udp.DOMAIN_NAME, transport)
        config.add_v1_system(snmp, "sim-area", self.community)
        config.add_vacm_user(snmp, 2, "sim-area", "noAuthNoPriv", (1, 3, 6))
        if self.v3_user:
            config.add_v3_user(snmp, self.v3_user, config.USM_AUTH_HMAC96_SHA, self.v3_auth_key,
                               config.USM_PRIV_CFB128_AES, self.v3_priv_key)
            config.add_vacm_user(snmp, 3, self.v3_user, "authPriv", (1, 3, 6))
        snmp_context = context.SnmpContext(snmp)
        snmp_context.unregister_context_name(b"")
        snmp_context.register_context_name(b"", _Instrum(self._snapshot))
        cmdrsp.GetCommandResponder(snmp, snmp_context)
        cmdrsp.NextCommandResponder(snmp, snmp_context)
        cmdrsp.BulkCommandResponder(snmp, snmp_context)
        snmp.transport_dispatcher.job_started(1)
        self._engine = snmp
        if transport._lport is not None:  # wait until the socket is bound
            await transport._lport

    async def stop(self) -> None:
        if self._engine is not None:
            self._engine.transport_dispatcher.job_finished(1)
            self._engine.close_dispatcher()
            self._engine = None

    async def __aenter__(self) -> SimSnmpPdu:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


def demo_values(base_w: float = 1200.0, swing_w: float = 300.0, period_s: float = 60.0) -> ValuesFn:
    """A PDU load that swings like a training job, with an energy meter that integrates it."""
    state = {"t": time.monotonic(), "kwh": 1234.5}

    def values() -> dict[str, float | None]:
        now = time.monotonic()
        power = base_w + swing_w * math.sin(2 * math.pi * now / period_s)
        state["kwh"] += power * (now - state["t"]) / J_PER_KWH
        state["t"] = now
        return {"power_w": power, "energy_kwh": state["kwh"], "voltage_v": 230.0,
                "current_a": power / (230.0 * 0.95), "pf": 0.95}

    return values


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve a simulated rack PDU over SNMP on loopback.")
    parser.add_argument("--vendor", default="apc_rpdu2", choices=sorted(ENCODERS))
    parser.add_argument("--port", type=int, default=16161)
    parser.add_argument("--community", default="public")
    parser.add_argument("--outlets", type=int, default=24)
    parser.add_argument("--power-w", type=float, default=1200.0)
    args = parser.parse_args(argv)

    async def serve() -> None:
        pdu = SimSnmpPdu(demo_values(args.power_w), args.port, vendor=args.vendor, community=args.community,
                         outlets=args.outlets)
        async with pdu:
            where = f"udp://127.0.0.1:{args.port} community {args.community!r}"
            print(f"simulated {args.vendor} PDU on {where}", flush=True)
            await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
