"""Cooling units over SNMP (read-only GET/GETBULK): profiles as data, on the SNMP PDU driver's engine.

Import ``.driver`` for the driver (its ``[[crac]] protocol = "snmp"`` keys are the ``[[pdu]]`` ones,
``drivers.snmp_pdu.config.SnmpAccess``, which the section inherits): this package itself stays
light, so loading the configuration does not import pysnmp.
"""
