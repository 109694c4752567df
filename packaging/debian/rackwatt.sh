#!/bin/sh
# /usr/bin/rackwatt: run the agent from its private venv. -I: ignore PYTHON* variables and the
# current directory, so nothing outside the package can shadow its modules.
exec /usr/lib/rackwatt/venv/bin/python -I -m agent "$@"
