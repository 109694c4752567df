"""Cooling units (CRAC/CRAH/in-row) over Modbus TCP, read-only. See README.md.

Import the modules (``.driver`` for the driver, ``.config`` for the ``[[crac]]`` section): this package
itself stays light, so loading the configuration does not import pymodbus.
"""
