"""A loopback TCP hop between a client and the broker that a test can hold and cut.

Why: a real link can drop while messages are on the wire. The client then holds PUBLISHes the
broker never read and must send them again on the next connection; stopping the broker cannot
produce that on demand (a stopped mosquitto has usually read and acknowledged them). The hop
forwards bytes both ways between two real peers; ``hold()`` keeps what the client sends from
reaching the broker, ``hold_replies()`` what the broker sends from reaching the client (a slow
link mid-handshake), ``release()`` lets held bytes go on, and ``cut()`` closes every
connection, dropping what was held, as a link that dies does. It is not a broker stand-in:
both ends speak MQTT to each other.
"""

from __future__ import annotations

import contextlib
import socket
import threading

# How often a forwarding thread looks again at a hold or a cut it waits on; a short sleep, not
# a timing the tests depend on (they wait for what they check).
POLL_S = 0.02


class _Link:
    """One client connection and its broker connection."""

    def __init__(self, client: socket.socket, broker: socket.socket) -> None:
        self.client, self.broker = client, broker
        self.dead = threading.Event()

    def close(self) -> None:
        self.dead.set()
        for sock in (self.client, self.broker):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv (close() does not)
            with contextlib.suppress(OSError):
                sock.close()


class TcpHop:
    """Listens on a free loopback port and forwards each connection to ``target_port``."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._forwarding = {True: threading.Event(), False: threading.Event()}  # upstream?
        self.release()
        self.accepted = 0  # connections made through the hop so far
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        self._closed = False

    def start(self) -> TcpHop:
        threading.Thread(target=self._accept, name="hop-accept", daemon=True).start()
        return self

    def hold(self) -> None:
        """What clients send from now on is kept here, not forwarded (until ``cut``/``release``)."""
        self._forwarding[True].clear()

    def hold_replies(self) -> None:
        """What the broker sends from now on is kept here (until ``cut``/``release``)."""
        self._forwarding[False].clear()

    def release(self) -> None:
        for gate in self._forwarding.values():
            gate.set()

    def cut(self) -> None:
        """Close every connection, dropping what was held; new connections forward again."""
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.close()
        self.release()

    def close(self) -> None:
        self._closed = True
        with contextlib.suppress(OSError):
            self._server.close()
        self.cut()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                broker = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                client.close()
                continue
            broker.settimeout(None)
            link = _Link(client, broker)
            with self._lock:
                self._links.append(link)
                self.accepted += 1
            threading.Thread(target=self._pipe, args=(link, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(link, False), daemon=True).start()

    def _pipe(self, link: _Link, upstream: bool) -> None:
        src, dst = (link.client, link.broker) if upstream else (link.broker, link.client)
        try:
            while not link.dead.is_set():
                data = src.recv(65536)
                if not data:
                    break
                # held bytes wait here; a cut drops them with the connection
                while not self._forwarding[upstream].is_set() and not link.dead.is_set():
                    link.dead.wait(POLL_S)
                if link.dead.is_set():
                    break
                dst.sendall(data)
        except OSError:
            pass
        finally:
            link.close()
