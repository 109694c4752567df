"""Cooling units (CRAC/CRAH/in-row) over Modbus TCP, read-only. See README.md. Import the modules
(``.driver``, ``.config``): this package itself stays light, so loading the config skips pymodbus.
"""
