"""``SnmpCracDriver``: one cooling unit over SNMP (``[[crac]] protocol = "snmp"``) on the SNMP PDU
driver, pointed at ``snmp_crac/profiles`` and named ``crac.<id>``; where the unit reports no
electrical power, it adds the Modbus driver's estimate (``drivers.modbus_crac.estimate``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pysnmp.hlapi.v3arch.asyncio import SnmpEngine

from drivers.modbus_crac.estimate import estimate_inputs, estimate_power_w
from drivers.modbus_crac.profiles import DEFAULT_COP  # the Modbus maps' default
from drivers.snmp_pdu.driver import SnmpPduDriver
from drivers.snmp_pdu.plan import Decoded

PROFILES = Path(__file__).with_name("profiles")


class SnmpCracDriver(SnmpPduDriver):
    """Polls one cooling unit's SNMP agent into ``crac.<id>.*`` signals; ``poll`` never raises."""

    KIND = "crac"
    WHAT = "SNMP cooling-unit"
    PROFILES = PROFILES
    FALLBACK = None  # no generic MIB describes a cooling unit
    # A single room unit draws at most ~100 kW electrical (large CRAH fan walls, DX CRACs); twice that
    # is no reading of one unit.
    MAX_POWER_W = 200_000.0

    def __init__(self, cfg: Any, engine: SnmpEngine | None = None, *, detail: bool | None = None) -> None:
        if cfg.profile == "generic":
            raise ValueError(f"crac '{cfg.id}': profile \"generic\" is Modbus-only; with protocol = \"snmp\" "
                             'use profile = "auto" or a profile name')
        self.estimate_inputs = estimate_inputs(cfg, cfg.cooling_kind or "unknown", DEFAULT_COP)
        super().__init__(cfg, engine, detail=detail)

    def _nothing_found(self, why_not: str, probed: int) -> str:
        return (f"no cooling-unit readings: {why_not}; none of the key OIDs of {probed} cooling-unit "
                'profiles answered. Set profile = "<name>" if it is one of them')

    def _signals(self, ts: float, decoded: Decoded) -> tuple[dict[str, float], set[str]]:
        signals, estimated = super()._signals(ts, decoded)
        power = f"{self.device}.power_w"
        if power not in signals:
            values = {name.removeprefix(f"{self.device}."): v for name, v in signals.items()}
            estimate = estimate_power_w(values, self.estimate_inputs)
            if estimate is not None:
                signals[power] = estimate
                estimated.add(power)
        return signals, estimated
