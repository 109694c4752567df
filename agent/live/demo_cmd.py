"""``rackwatt demo``: a simulated rack on loopback devices, and the real agent learning it (docs/demo.md).

Publishes to ``--mqtt HOST:PORT`` or a broker answering on localhost:1883, else shows what it would
publish. Exit 0 after ``--duration`` seconds or Ctrl-C, with everything cleaned up.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from agent.config.model import MqttSection
from agent.config.rules import SITE_NAME
from agent.live.cli_types import MqttTarget, host_port, interactive_terminal, non_negative, positive
from agent.live.demo.session import (
    FAULT_CHOICES,
    FAULT_WARMUP_H,
    HEALTHY_WARMUP_H,
    RACK,
    SITE,
    DemoOptions,
    run_demo,
)
from agent.live.demo.setup import broker_answers

DEFAULT_SPEED = 60.0
LOCAL_BROKER = (MqttSection.host, MqttSection.port)  # [mqtt]'s defaults


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--mqtt",
        type=host_port,
        metavar="HOST:PORT",
        help="publish to this broker (default: localhost:1883 if one answers, else publish "
        "nothing and show what would be published)",
    )
    parser.add_argument("--no-mqtt", action="store_true",
                        help="never publish, even if a local broker answers")
    parser.add_argument("--speed", type=positive, default=DEFAULT_SPEED, metavar="N",
                        help=f"simulated seconds per real second (default {DEFAULT_SPEED:g})")
    parser.add_argument("--duration", type=positive, metavar="S",
                        help="stop after S real seconds (default: run until Ctrl-C)")
    parser.add_argument("--fault", choices=FAULT_CHOICES, metavar="CAUSE",
                        help=f"inject a fault shortly after the warm-up: {', '.join(FAULT_CHOICES)}")
    parser.add_argument(
        "--warmup",
        type=non_negative,
        metavar="H",
        help="replay the first H simulated hours through the engine before going live (default "
        f"{FAULT_WARMUP_H:g} with --fault, else {HEALTHY_WARMUP_H:g}, so predictions show from the start; "
        "0: watch the baselines form from scratch)",
    )
    parser.add_argument("--seed", type=int, default=0, metavar="N", help="the twin's random seed (default 0)")
    parser.add_argument("--no-hints", action="store_true",
                        help="the job sends no stage hints: the agent infers the stage from GPU telemetry")
    parser.add_argument(
        "--fine-polling",
        action="store_true",
        help="poll at a real rack's intervals (NVML 1 s, PDUs 5 s, cooling 10 s, simulated) instead of the "
        "lighter demo intervals: more CPU, and the engine sees small faults sooner",
    )
    parser.add_argument("--nodes", type=_node_count, default=0, metavar="N",
                        help="a rack of N GPU nodes (1-8), each a node agent sending its GPUs to the rack "
                        "agent over the node link, as with [agent] role = \"node\" (default: the rack agent "
                        "reads one local 8-GPU node)")
    parser.add_argument("--plain", action="store_true", help="plain lines even on a terminal")
    parser.add_argument("--site", type=_name, default=SITE, help=f"the site name (default {SITE})")
    parser.add_argument("--rack", type=_name, default=RACK,
                        help=f"the rack name (default {RACK}); several demos on one broker need their own")
    parser.add_argument("--metrics", type=host_port, metavar="HOST:PORT",
                        help="serve Prometheus /metrics there (docs/metrics.md)")


def _node_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number of nodes, got {text!r}") from None
    if not 1 <= value <= 8:  # a training rack holds 4-8 GPU nodes
        raise argparse.ArgumentTypeError(f"must be between 1 and 8, got {value}")
    return value


def _name(text: str) -> str:
    """Site and rack names go into MQTT topics: the config's own rule."""
    problem = SITE_NAME(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def run(args: argparse.Namespace) -> int:
    mqtt = args.mqtt
    if mqtt is None and not args.no_mqtt and broker_answers(*LOCAL_BROKER):
        mqtt = MqttTarget(*LOCAL_BROKER)
    opts = DemoOptions(speed=args.speed, duration_s=args.duration, fault=args.fault, seed=args.seed,
                       mqtt=mqtt, warmup_h=args.warmup, hints=not args.no_hints,
                       interactive=interactive_terminal() and not args.plain, fine_polling=args.fine_polling,
                       site=args.site, rack=args.rack, metrics=args.metrics, nodes=args.nodes)
    try:
        return asyncio.run(run_demo(opts, sys.stdout))
    except KeyboardInterrupt:  # a second Ctrl-C during the shutdown
        return 130
    except OSError as exc:
        print(f"rackwatt demo: {exc}", file=sys.stderr)
        return 1
