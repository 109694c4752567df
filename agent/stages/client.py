"""``agent.stages.client`` *is* ``rackwatt_client.stage_hints`` (packaging/client/, the one owner):
the very same module object, so state, monkeypatching and ``__file__`` are the owner's.
"""

from __future__ import annotations

import sys

import rackwatt_client.stage_hints as _owner
from rackwatt_client.stage_hints import *  # noqa: F403  (the public names, for readers and type checkers)
from rackwatt_client.stage_hints import DEFAULT_SOCKET as DEFAULT_SOCKET

sys.modules[__name__] = _owner
