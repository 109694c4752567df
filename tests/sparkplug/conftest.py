"""The Sparkplug tests reuse the live-agent tests' real peers: a mosquitto broker and a subscriber."""

from tests.live.conftest import broker, make_broker, subscribe  # noqa: F401 (fixtures)
