"""Hand-built .snmprec recordings for the committed tests (no dependency on ../shared).

Each builder writes raw device numbers the way the vendor's MIB encodes them (tenths, mV, digits,
0-based straps, -1 sentinels), written from the MIB facts, not from the driver's profiles, and
returns ``(snmprec text, expected decoded totals)``. APC and Raritan come from the simulated PDU's
encoders (``agent.sim.devices.snmp_agent.render``), which is also what the live demo serves.
"""

from __future__ import annotations

from agent.sim.devices.snmp_agent import Cell, Oid, render, to_snmprec

Expected = dict[str, float]
SYS_OID = (1, 3, 6, 1, 2, 1, 1, 2, 0)


def _oid(text: str) -> Oid:
    return tuple(int(a) for a in text.split("."))


def _cells(sys_object_id: str, rows: dict[str, tuple[int, int]]) -> dict[Oid, Cell]:
    cells: dict[Oid, Cell] = {SYS_OID: (6, _oid(sys_object_id))}
    cells.update({_oid(k): v for k, v in rows.items()})
    return cells


LIVE_VALUES = {"power_w": 1234.0, "energy_kwh": 4321.5, "voltage_v": 231.0, "current_a": 5.6, "pf": 0.95}


def apc_24_outlets() -> tuple[str, Expected]:
    """APC rPDU2 with 24 metered outlets; power is stored in hundredths of kW (1234 W → 123 → 1230 W)."""
    text = to_snmprec(render("apc_rpdu2", LIVE_VALUES, outlets=24))
    return text, {"power_w": 1230.0, "energy_kwh": 4321.5, "voltage_v": 231.0, "current_a": 5.6, "pf": 0.95}


def raritan_px3() -> tuple[str, Expected]:
    text = to_snmprec(render("raritan_pdu2", LIVE_VALUES, outlets=24))
    return text, dict(LIVE_VALUES)


def apc_switched_only() -> tuple[str, Expected]:
    """An AP7902B-like unit: rPDU2 power/energy read -1; legacy rPDUIdentDevicePowerWatts = 192 W."""
    apc = "1.3.6.1.4.1.318.1.1.26"
    rows = {
        f"{apc}.4.3.1.1.1": (2, 1), f"{apc}.4.3.1.2.1": (2, 1),
        f"{apc}.4.3.1.5.1": (2, -1), f"{apc}.4.3.1.9.1": (2, -1), f"{apc}.4.3.1.17.1": (2, -1),
        f"{apc}.6.3.1.1.1": (2, 1), f"{apc}.6.3.1.2.1": (2, 1), f"{apc}.6.3.1.3.1": (2, 1),
        f"{apc}.6.3.1.5.1": (2, 16), f"{apc}.6.3.1.6.1": (2, -1), f"{apc}.6.3.1.7.1": (2, -1),
        f"{apc}.6.3.1.9.1": (2, -1),
        "1.3.6.1.4.1.318.1.1.12.1.16.0": (2, 192),
    }
    return to_snmprec(_cells("1.3.6.1.4.1.318.1.3.4.5", rows)), {"power_w": 192.0, "current_a": 1.6}


def sentry4_two_units() -> tuple[str, Expected]:
    """Master + link unit, one 3-phase cord each; the link's energy reads -1 (not supported)."""
    s = "1.3.6.1.4.1.1718.4.1"
    rows: dict[str, tuple[int, int]] = {}
    for unit, power, pf, energy in ((1, 1701, 95, 8937), (2, 900, 90, -1)):
        rows[f"{s}.3.3.1.3.{unit}.1"] = (2, power)
        rows[f"{s}.3.3.1.8.{unit}.1"] = (2, pf)
        rows[f"{s}.3.3.1.10.{unit}.1"] = (2, energy)
        for phase, (dv, ca) in enumerate(((2079, 560), (2089, 369), (2094, 560)), start=1):
            rows[f"{s}.4.3.1.3.{unit}.1.{phase}"] = (2, ca)
            rows[f"{s}.5.3.1.3.{unit}.1.{phase}"] = (2, dv)
            rows[f"{s}.5.3.1.6.{unit}.1.{phase}"] = (2, ca)
    rows[f"{s}.9.3.1.1.1.1"] = (2, -410)  # temperature: no probe
    expected = {"power_w": 2601.0, "pf": 0.925, "voltage_v": (2079 + 2089 + 2094) / 30,
                "current_a": 2 * (5.60 + 3.69 + 5.60)}
    return to_snmprec(_cells("1.3.6.1.4.1.1718.4", rows)), expected


def eaton_chain() -> tuple[str, Expected]:
    """Strap 0 (master) + strap 1; mV/mA; negative PF; a neutral current row that must not count."""
    e = "1.3.6.1.4.1.534.6.6.7.3"
    rows = {
        f"{e}.5.1.4.0.1": (2, 1584), f"{e}.5.1.5.0.1": (66, 8185493), f"{e}.5.1.7.0.1": (2, 946),
        f"{e}.5.1.4.1.1": (2, 500), f"{e}.5.1.5.1.1": (66, 1000000), f"{e}.5.1.7.1.1": (2, -900),
        f"{e}.2.1.2.0.1.1": (2, 1), f"{e}.2.1.3.0.1.1": (2, 118450),
        f"{e}.2.1.2.1.1.1": (2, 1), f"{e}.2.1.3.1.1.1": (2, 119000),
        f"{e}.3.1.2.0.1.1": (2, 1), f"{e}.3.1.4.0.1.1": (2, 14108),
        f"{e}.3.1.2.0.1.2": (2, 2), f"{e}.3.1.4.0.1.2": (2, 9999),  # neutral
        f"{e}.3.1.2.1.1.1": (2, 1), f"{e}.3.1.4.1.1.1": (2, 4200),
    }
    expected = {"power_w": 2084.0, "energy_kwh": 9185.493, "pf": 0.923, "voltage_v": 118.725,
                "current_a": 18.308}
    return to_snmprec(_cells("1.3.6.1.4.1.534.6.6.7", rows)), expected


def vertiv_delta() -> tuple[str, Expected]:
    """3-phase delta without pduTotal rows: W and Wh are the sums of the phases."""
    v = "1.3.6.1.4.1.21239.5.2.3.2.1"
    rows: dict[str, tuple[int, int]] = {}
    for phase, (dv, ca, w, wh) in enumerate(((2068, 725, 1464, 5207918), (2079, 728, 1477, 5284954),
                                             (2063, 723, 1458, 5191126)), start=1):
        rows.update({f"{v}.4.{phase}": (66, dv), f"{v}.8.{phase}": (66, ca), f"{v}.12.{phase}": (66, w),
                     f"{v}.14.{phase}": (66, 97), f"{v}.15.{phase}": (66, wh)})
    expected = {"power_w": 4399.0, "energy_kwh": 15683.998, "pf": 0.97, "voltage_v": 207.0,
                "current_a": 21.76}
    return to_snmprec(_cells("1.3.6.1.4.1.21239.42.1.53", rows)), expected


def entity_sensor_only() -> tuple[str, Expected]:
    """Unknown vendor exposing ENTITY-SENSOR-MIB: watts (precision 1), volts, milliamps, a dead sensor.

    Sensors 1-5 are sensor(8) entities inside the inlet, a powerSupply(6) entity (index 100). Sensors
    6-8 must never count: a transceiver's optical watts and laser-bias amperes (inside a module(9)),
    and a watts reading on a power-supply entity itself rather than on a sensor (RFC 3433 §2).
    """
    t, e = "1.3.6.1.2.1.99.1.1.1", "1.3.6.1.2.1.47.1.1.1.1"
    sensors = {1: (6, 9, 1, 12345, 1, 100), 2: (3, 9, 0, 230, 1, 100), 3: (5, 8, 0, 5300, 1, 100),
               4: (8, 9, 0, 25, 1, 100), 5: (6, 9, 0, 999, 3, 100),
               6: (6, 8, 0, 500, 1, 200), 7: (5, 8, 0, 40, 1, 200), 8: (6, 9, 0, 90, 1, None)}
    # index: (type, scale, precision, value, oper status, container or None for the PSU's own row)
    rows: dict[str, tuple[int, int]] = {f"{e}.5.100": (2, 6), f"{e}.5.200": (2, 9),
                                        f"{e}.4.100": (2, 1), f"{e}.4.200": (2, 1)}
    for index, (kind, scale, precision, value, status, parent) in sensors.items():
        rows.update({f"{t}.1.{index}": (2, kind), f"{t}.2.{index}": (2, scale),
                     f"{t}.3.{index}": (2, precision),
                     f"{t}.4.{index}": (2, value), f"{t}.5.{index}": (2, status)})
        rows.update({f"{e}.5.{index}": (2, 8 if parent else 6), f"{e}.4.{index}": (2, parent or 1)})
    return (to_snmprec(_cells("1.3.6.1.4.1.99999.1", rows)),
            {"power_w": 1234.5, "voltage_v": 230.0, "current_a": 5.3})


def unknown_device() -> str:
    return to_snmprec(_cells("1.3.6.1.4.1.99998.1", {"1.3.6.1.2.1.1.5.0": (4, 0)}))


BUILDERS = {
    "apc": apc_24_outlets,
    "raritan": raritan_px3,
    "apc-switched": apc_switched_only,
    "sentry4": sentry4_two_units,
    "eaton": eaton_chain,
    "vertiv-delta": vertiv_delta,
    "entity": entity_sensor_only,
}


def hpe_chain_without_sys_object_id() -> tuple[str, Expected]:
    """Two HPE pdu2 units daisy-chained (0-based: units 0 and 1), mV/mA, and no sysObjectID at all."""
    h = "1.3.6.1.4.1.232.165.7.2"
    rows = {f"{h}.1.1.5.0": (2, 97), f"{h}.1.1.5.1": (2, 1200), f"{h}.1.1.6.0": (2, 91819),
            f"{h}.1.1.6.1": (2, 500000), f"{h}.1.1.8.0": (2, 751), f"{h}.1.1.8.1": (2, 949),
            f"{h}.2.1.3.0.1": (2, 242440), f"{h}.2.1.11.0.1": (2, 535),
            f"{h}.2.1.3.1.1": (2, 241000), f"{h}.2.1.11.1.1": (2, 5200)}
    cells: dict[Oid, Cell] = {_oid(k): v for k, v in rows.items()}
    cells[_oid("1.3.6.1.2.1.1.5.0")] = (4, 0)
    expected = {"power_w": 1297.0, "energy_kwh": 591.819, "pf": 0.85, "voltage_v": 241.72, "current_a": 5.735}
    return to_snmprec(cells), expected


def masterswitch_8_outlets() -> str:
    """A switched-only APC MasterSwitch: the outlet control table and nothing metered."""
    rows = {f"1.3.6.1.4.1.318.1.1.4.4.2.1.3.{n}": (2, 1) for n in range(1, 9)}
    return to_snmprec(_cells("1.3.6.1.4.1.318.1.3.4.2", rows))


def apc_cooling_unit(metered: bool) -> str:
    """An APC coolingUnit analog table (PowerNet-MIB): description, value, units, scale; each temperature in
    °C and °F. ``metered`` adds the compressor (kW, scale 100) and condenser-fan (W) power rows."""
    rows = [("Supply Temperature", 194, "C", 10), ("Supply Temperature", 671, "F", 10),
            ("Return Temperature", 280, "C", 10), ("Return Temperature", 825, "F", 10),
            ("Cool Output", 108, "kW", 10), ("Commanded Evap. Fan Speed", 80, "%", 1)]
    if metered:
        rows += [("Compressor Power", 144, "kW", 100), ("Condenser Fan Power", 24, "W", 1)]
    t = "1.3.6.1.4.1.318.1.1.27.1.4.1.2.1"
    cells: dict[Oid, Cell] = {SYS_OID: (6, _oid("1.3.6.1.4.1.318.1.3.14.23"))}
    for n, (text, value, units, scale) in enumerate(rows, start=1):
        cells.update({_oid(f"{t}.2.1.{n}"): (4, text), _oid(f"{t}.3.1.{n}"): (2, value),
                      _oid(f"{t}.4.1.{n}"): (4, units), _oid(f"{t}.5.1.{n}"): (2, scale)})
    return to_snmprec(cells)
