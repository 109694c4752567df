"""``rackwatt poll --config FILE --once [--json]``: poll every configured device once, print the result.

The operator's first command on a new rack (like ``telegraf --test``): every device polled once,
concurrently; the signals with their units, then each device's timing, profile and error. Nothing
is stored. Exit 0 when at least one device answered (even partly), 1 when none did (or none is
configured), 2 when the configuration is invalid: scripts read the per-device ``ok`` from ``--json``.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import math
import sys
import time
from typing import Any

from agent.config.cli_args import add_config_arguments, load_or_report
from agent.config.model import Config
from agent.live.poller import guarded_poll
from drivers.base import Driver, PollResult

HARD_CAP_S = 60.0  # a driver's own deadline ends its poll long before this; belt and braces

# signal suffix → unit shown after the value, first match wins ("_kwh" before "_w")
UNITS = (("_kwh", "kWh"), ("_w", "W"), ("_j", "J"), ("_pct", "%"), ("_c", "°C"), ("_mhz", "MHz"),
         ("_v", "V"), ("_a", "A"), ("_hz", "Hz"), ("_va", "VA"))


def configure(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, required=True)
    parser.add_argument("--once", action="store_true",
                        help="poll each device once and exit (the only mode; `rackwatt run` polls on)")
    parser.add_argument("--json", action="store_true",
                        help='print one JSON object: {"signals": {...}, "devices": {...}}')
    parser.add_argument("--timeout-s", type=float, default=None, metavar="S",
                        help="override every PDU's and cooling unit's timeout_s")


def run(args: argparse.Namespace) -> int:
    config = load_or_report(args.config, args, lambda line: print(line, file=sys.stderr))
    if config is None:
        return 2
    if args.timeout_s is not None:
        config = _with_timeout(config, args.timeout_s)
    from drivers.registry import build_drivers

    drivers = build_drivers(config)
    if not drivers:
        print("rackwatt poll: no devices configured ([[pdu]], [[crac]], [[dcgm]] or [nvml] enabled)",
              file=sys.stderr)
        return 1
    results = asyncio.run(poll_all(drivers))
    if args.json:
        print(json.dumps(as_json(results), indent=2, ensure_ascii=False))
    else:
        print(as_text(results, config))
    return 0 if any(answered(result) for result in results) else 1


def answered(result: PollResult) -> bool:
    return result.ok or bool(result.signals)


def _with_timeout(config: Config, timeout_s: float) -> Config:
    return dataclasses.replace(config,
                               pdus=tuple(dataclasses.replace(p, timeout_s=timeout_s) for p in config.pdus),
                               cracs=tuple(dataclasses.replace(c, timeout_s=timeout_s) for c in config.cracs),
                               dcgms=tuple(dataclasses.replace(d, timeout_s=timeout_s) for d in config.dcgms))


async def poll_all(drivers: list[Driver]) -> list[PollResult]:
    """Poll every driver once, concurrently, then close them all; results in driver order."""
    try:
        return list(await asyncio.gather(*(guarded_poll(d, HARD_CAP_S, time.time) for d in drivers)))
    finally:
        await asyncio.gather(*(_close_one(driver) for driver in drivers))


async def _close_one(driver: Driver) -> None:
    try:
        await asyncio.wait_for(driver.close(), timeout=5.0)
    except Exception as exc:
        print(f"warning: {driver.device}: close failed: {exc}", file=sys.stderr)


def unit_of(signal: str) -> str:
    for suffix, unit in UNITS:
        if signal.endswith(suffix):
            return unit
    return ""


def _finite(signals: dict[str, float]) -> dict[str, float]:
    return {name: float(value) for name, value in signals.items() if math.isfinite(value)}


def as_json(results: list[PollResult]) -> dict[str, Any]:
    signals: dict[str, float] = {}
    devices: dict[str, dict[str, Any]] = {}
    for result in results:
        signals.update(_finite(result.signals))
        devices[result.device] = {
            "ok": result.ok,
            "ms": round(result.elapsed_ms, 1),
            "profile": result.profile,
            "error": result.error,
            "estimated": sorted(result.estimated),
        }
        if result.profile_reason:
            devices[result.device]["profile_reason"] = result.profile_reason
        if result.unverified:
            devices[result.device]["unverified"] = sorted(result.unverified)
    return {"signals": signals, "devices": devices}


def as_text(results: list[PollResult], config: Config) -> str:
    lines = [f"rackwatt poll: site {config.agent.site}, rack {config.agent.rack}: {len(results)} device(s)"]
    for result in results:
        status = "ok" if result.ok else "PARTIAL" if answered(result) else "FAILED"
        profile = f"  profile {result.profile}" if result.profile else ""
        lines.append(f"{result.device:<14} {status:<7} {result.elapsed_ms:8.1f} ms{profile}")
        if result.profile_reason:
            lines.append(f"    profile chosen: {result.profile_reason}")
        if result.error:
            lines.append(f"    {'warning' if result.ok else 'error'}: {result.error}")
        signals = _finite(result.signals)
        width = max((len(name) for name in signals), default=0)
        for name, value in signals.items():
            flag = "  (estimated)" if name in result.estimated else ""
            if name in result.unverified:
                flag += "  (unverified address)"
            lines.append(f"    {name:<{width}}  {value:>12.6g} {unit_of(name)}{flag}".rstrip())
    n_answered = sum(answered(result) for result in results)
    n_errors = sum(result.error is not None for result in results)
    lines.append(f"{n_answered} of {len(results)} device(s) answered, {n_errors} with errors")
    return "\n".join(lines)
