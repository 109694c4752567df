"""Cooling units over SNMP (read-only GET/GETBULK): profiles as data, on the SNMP PDU driver's engine."""

from .driver import SnmpCracDriver

__all__ = ["SnmpCracDriver"]
