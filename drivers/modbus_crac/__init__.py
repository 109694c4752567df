"""Cooling units (CRAC/CRAH/in-row) over Modbus TCP, read-only. See README.md."""

from drivers.modbus_crac.driver import CracModbusDriver
from drivers.modbus_crac.profiles import ProfileError, available_profiles, load_profile

__all__ = ["CracModbusDriver", "ProfileError", "available_profiles", "load_profile"]
