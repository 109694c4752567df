"""SNMP rack PDU driver: vendor profiles as data, one shared pysnmp engine, GET/GETBULK only.

``SnmpPduDriver(cfg, engine)`` polls one ``[[pdu]]`` into ``pdu.<id>.power_w``, ``energy_kwh``,
``voltage_v``, ``current_a`` and ``pf``. See README.md for profiles, signals and troubleshooting.
"""

from .driver import SnmpPduDriver
from .profile import Profile, ProfileError, builtin_profiles, get_profile

__all__ = ["Profile", "ProfileError", "SnmpPduDriver", "builtin_profiles", "get_profile"]
