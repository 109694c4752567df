"""The live agent: poll loop, MQTT publisher, on-disk spool, systemd notification.

Modules: ``topics`` (the MQTT topic contract), ``spool`` (store and forward on disk),
``publisher`` (paho-mqtt client), ``loop`` (drivers → frames → engine → publisher),
``run_cmd`` / ``record_cmd`` (the ``rackwatt run`` / ``rackwatt record`` commands),
``sdnotify`` and ``logsetup`` (systemd integration).
"""
