"""The live node tests reuse the live-agent tests' real peers: a mosquitto broker and a subscriber."""

from tests.live.conftest import make_broker, subscribe  # noqa: F401 (fixtures)
