"""The live agent: poll loop, outbox, durable store, MQTT publisher, systemd notification.

Modules: ``topics`` (the MQTT topic contract), ``outbox`` (engine records → numbered messages),
``store`` (sqlite: messages, ``seq`` and engine state in one file), ``publisher`` (paho-mqtt
client draining the store), ``loop`` (drivers → frames → engine → outbox),
``run_cmd`` / ``record_cmd`` (the ``rackwatt run`` / ``rackwatt record`` commands),
``sdnotify`` and ``logsetup`` (systemd integration).
"""
