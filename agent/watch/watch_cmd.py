"""``rackwatt watch``: every rack of a site, live, from the site broker's MQTT topics (docs/mqtt.md).

A read-only client of ``<root>/<site>/+/{status,summary,event}``, one row per rack. On a terminal
the table is redrawn in place; otherwise a plain line per rack whose row changed; ``--json``: one
JSON line per refresh.
"""

from __future__ import annotations

import argparse
import queue
import sys
import time
from typing import Any, TextIO

from agent.live.cli_login import add_broker_options, cli_client
from agent.live.cli_types import interactive_terminal, positive
from agent.live.topics import Topics
from agent.watch.board import KINDS, SiteBoard
from agent.watch.table import SORT_KEYS, change_key, json_line, plain_line, sort_rows, table_lines

DEFAULT_INTERVAL_S = 2.0  # a summary comes every 2 min (or a window close): faster redraws add nothing


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--site", required=True, help="the site whose racks to show")
    add_broker_options(parser)
    parser.add_argument(
        "--sort",
        choices=sorted(SORT_KEYS),
        default="rack",
        help="row order: rack (default), deviation, drift, power or seen (longest silent first)",
    )
    parser.add_argument("--interval", type=positive, default=DEFAULT_INTERVAL_S, metavar="S",
                        help=f"refresh every S seconds (default {DEFAULT_INTERVAL_S:g})")
    parser.add_argument("--json", action="store_true", help="one JSON line with every rack per refresh")
    parser.add_argument("--plain", action="store_true", help="plain lines even on a terminal")
    parser.add_argument("--duration", type=positive, metavar="S", help="stop after S seconds")
    parser.add_argument(
        "--once",
        action="store_true",
        help="print once, one refresh interval after connecting (retained status arrives), and exit",
    )


class Feed:
    """A read-only MQTT client; messages land in a thread-safe queue for the main loop."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.messages: queue.Queue[tuple[str, bytes, float]] = queue.Queue()
        self.note = "connecting"
        self.connected = False
        every_rack = Topics.for_rack(args.topic_root, args.site, "+")
        self._filters = [(getattr(every_rack, kind), 1) for kind in KINDS]
        self.client = cli_client(args)
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        self.client.on_connect_fail = self._on_connect_fail
        self.client.on_message = self._on_message
        self.endpoint = f"{args.mqtt.host}:{args.mqtt.port}"
        self.client.connect_async(args.mqtt.host, args.mqtt.port, keepalive=30)
        self.client.loop_start()

    def _on_connect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        if reason.is_failure:
            self.note = f"broker refused the login: {reason} (check --username/--password-file)"
            return
        self.note, self.connected = "connected", True
        client.subscribe(self._filters)

    def _on_connect_fail(self, client: Any, userdata: Any) -> None:
        self.note = "cannot reach the broker; retrying"

    def _on_disconnect(self, client: Any, userdata: Any, flags: Any, reason: Any, props: Any) -> None:
        self.note, self.connected = f"disconnected ({reason}); reconnecting", False

    def _on_message(self, client: Any, userdata: Any, msg: Any) -> None:
        self.messages.put((msg.topic, msg.payload, time.time()))

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def run(args: argparse.Namespace) -> int:
    try:
        feed = Feed(args)
    except OSError as exc:  # a password or CA file that cannot be read
        print(f"rackwatt watch: {exc}", file=sys.stderr)
        return 2
    try:
        return _loop(args, feed, sys.stdout)
    except KeyboardInterrupt:
        return 0
    finally:
        feed.close()


def _loop(args: argparse.Namespace, feed: Feed, out: TextIO) -> int:
    from agent.live.demo.view import AnsiScreen

    board = SiteBoard(args.topic_root, args.site)
    screen = AnsiScreen(out) if interactive_terminal() and not (args.plain or args.json) else None
    printed: dict[str, Any] = {}
    started = time.monotonic()
    next_refresh = started + args.interval
    try:
        while True:
            timeout = max(0.0, next_refresh - time.monotonic())
            try:
                topic, payload, received = feed.messages.get(timeout=timeout)
                board.receive(topic, payload, received)
                continue
            except queue.Empty:
                pass
            next_refresh = time.monotonic() + args.interval
            now = time.time()
            rows = sort_rows(board.rows(now), args.sort)
            if args.json:
                out.write(json_line(args.site, rows, now) + "\n")
            elif screen is not None:
                header = (
                    f"rackwatt watch — site {args.site} on {feed.endpoint} ({feed.note}); "
                    f"{len(rows)} rack(s), sorted by {args.sort}; "
                    f"{time.strftime('%H:%M:%SZ', time.gmtime(now))}"
                )
                if board.ignored:
                    header += f"; {board.ignored} unreadable message(s) ignored"
                screen.draw(table_lines(rows, header))
            else:
                for row in rows:
                    key = change_key(row)
                    if printed.get(row.rack) != key or args.once:
                        printed[row.rack] = key
                        out.write(plain_line(row, now) + "\n")
                if not rows and args.once:
                    out.write(
                        f"rackwatt watch: no rack of site {args.site} seen on {feed.endpoint} ({feed.note})\n"
                    )
            out.flush()
            if args.once:
                return 0 if feed.connected else 1
            if args.duration is not None and time.monotonic() - started >= args.duration:
                return 0
    finally:
        if screen is not None:
            screen.close()
