"""Device drivers: one sub-package per device family (SNMP PDUs, Modbus cooling units, NVML GPUs).

Every driver maps its device's values onto the canonical signal names of
``shared/spec/trace-format.md`` (``pdu.<id>.power_w``, ``crac.<id>.power_w``, ``gpu.<i>.power_w`` …),
so the engine never knows a vendor. Registration is the explicit table in ``drivers.registry``.
"""
