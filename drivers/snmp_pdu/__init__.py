"""SNMP rack PDU driver: vendor profiles as data, one shared pysnmp engine, GET/GETBULK only.

See README.md. Import the modules (``.driver``, ``.config``): this package itself stays light, so
loading the configuration does not import pysnmp.
"""
