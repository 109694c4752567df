"""Stage awareness: hints from the training job (socket, UDP, MQTT, CLI, client) feeding one
stage timeline, and inference of the stage from telemetry when no fresh hint exists.
"""
