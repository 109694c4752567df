#!/bin/sh
# /usr/bin/rackwatt: run the agent on the interpreter the package brings. -I: ignore PYTHON*
# variables and the current directory, so nothing outside the package can shadow its modules.
exec /usr/lib/rackwatt/bin/python3.11 -I -m agent "$@"
