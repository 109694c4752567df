"""The ``rackwatt`` command line: a thin dispatcher over one module per subcommand.

Each subcommand lives in its own module exposing ``configure(parser)`` and ``run(args) -> int``.
Modules are imported only when their command runs, so ``rackwatt --help`` stays fast and a
broken optional feature cannot stop the others. An exception a command did not handle is a bug:
it is reported in one line (under systemd, one journal line instead of a restart loop of
tracebacks) with exit 70; ``RACKWATT_TRACEBACK=1`` shows the traceback for the bug report.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from agent import __version__

EXIT_INTERNAL_ERROR = 70  # EX_SOFTWARE (sysexits.h): distinct from 1 (failed) and 2 (bad input)

# name → (module implementing it, one-line help). Order is the order shown in --help.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("agent.live.demo_cmd", "run a simulated rack on loopback devices and watch the agent learn"),
    "run": ("agent.live.run_cmd", "run the agent: poll devices, learn baselines, publish over MQTT"),
    "poll": ("agent.live.poll_cmd", "poll every configured device once and print the signals"),
    "record": ("agent.live.record_cmd", "poll live devices and write a replayable trace CSV"),
    "replay": ("agent.engine.replay_cmd", "run the engine over a trace and write a JSON Lines report"),
    "report": ("agent.report.report_cmd", "render a replay report (and trace) as one offline HTML page"),
    "sim": ("agent.sim.sim_cmd", "simulate a rack (the twin) and write trace.csv and truth.json"),
    "reload": ("agent.live.reload_cmd", "make the running agent re-read its configuration (ExecReload)"),
    "stage": ("agent.stages.stage_cmd", "send a stage hint to the local agent (for shell hooks)"),
    "accept": ("agent.engine.accept_cmd", "accept an active deviation as the new normal"),
    "check-config": ("agent.config.check_cmd", "validate a configuration file: prints OK or every error"),
    "watch": ("agent.watch.watch_cmd", "a live table of every rack of a site, from the site broker"),
    "sparkplug": ("agent.sparkplug.bridge_cmd", "republish a rack's MQTT topics as a Sparkplug B edge node"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rackwatt",
        description="Edge agent: per-training-stage facility energy baselines for GPU racks.",
    )
    parser.add_argument("--version", action="version", version=f"rackwatt {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.set_defaults(_module=module_name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    # The command is the first word that is not an option; its module adds its own arguments
    # before the real parse, so that `rackwatt CMD --help` lists them.
    command = next((arg for arg in argv if not arg.startswith("-")), None)
    if command not in COMMANDS:
        parser.parse_args(argv)  # --help, --version, or argparse's error for a bad command
        parser.print_help()
        return 2
    module_name = COMMANDS[command][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            print(f"rackwatt {command}: not available in this build", file=sys.stderr)
            return 2
        raise
    sub_action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    module.configure(sub_action.choices[command])
    args = parser.parse_args(argv)
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        if os.environ.get("RACKWATT_TRACEBACK"):
            raise
        reason = str(exc).splitlines()[0][:300] if str(exc) else ""
        print(f"rackwatt {command}: internal error: {type(exc).__name__}: {reason} "
              "(a bug: please report it; RACKWATT_TRACEBACK=1 shows where)", file=sys.stderr)
        return EXIT_INTERNAL_ERROR


if __name__ == "__main__":
    sys.exit(main())
