"""``python -m agent`` is the same as the ``rackwatt`` command."""

import sys

from agent.cli import main

sys.exit(main())
