"""Sparkplug B output (issue 20 item 7): the rack as a Sparkplug B edge node, bridged from the
agent's own MQTT contract (``payload`` encodes, ``node`` keeps the session, ``bridge_cmd`` runs it).
See docs/sparkplug.md."""
