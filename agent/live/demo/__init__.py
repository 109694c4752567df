"""The parts of ``rackwatt demo``: the twin served as loopback devices, the generated
configuration, the engine feed, stage hints, and the terminal view.

``agent/live/demo_cmd.py`` is the command; ``session.py`` wires these parts around the real
``LiveAgent`` (docs/demo.md).
"""
