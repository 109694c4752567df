"""Stage awareness: hints from the training job (socket, UDP, MQTT, CLI, client) feeding one
stage timeline, and inference of the stage from telemetry when no fresh hint exists.

Modules: ``hints`` (datagram parsing), ``timeline`` (the hint timeline with expiry),
``intake`` (rate limit + counting, shared by every transport), ``listener`` (asyncio datagram
endpoints), ``infer`` (the online classifier), ``client`` (stdlib-only client for training
scripts), ``stage_cmd`` (``rackwatt stage``).
"""
