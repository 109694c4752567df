"""``rackwatt watch``: a live table of every rack of a site, from the site broker (docs/metrics.md).

``board`` keeps what the MQTT messages say per rack (no I/O); ``table`` renders it (terminal,
plain lines, JSON); ``watch_cmd`` subscribes and refreshes.
"""
