"""JSON Schemas of the MQTT payloads (docs/mqtt.md), shipped with the package for subscribers' tests."""
