"""SNMP rack PDU driver: vendor profiles as data, one shared pysnmp engine, GET/GETBULK only.

``SnmpPduDriver(cfg, engine)`` polls one ``[[pdu]]`` into ``pdu.<id>.power_w``, ``energy_kwh``,
``voltage_v``, ``current_a`` and ``pf``. See README.md for profiles, signals and troubleshooting.

Import the modules (``.driver`` for the driver, ``.config`` for the ``[[pdu]]`` section): this package
itself stays light, so loading the configuration does not import pysnmp.
"""
