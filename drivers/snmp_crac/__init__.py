"""Cooling units over SNMP (``[[crac]] protocol = "snmp"``): profiles as data, on the SNMP PDU
driver's engine. Import ``.driver``: this package itself stays light (no pysnmp import).
"""
