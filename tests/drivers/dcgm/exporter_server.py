"""A local HTTP server standing in for a node's dcgm-exporter, and a writer of its text format.

The server serves whatever body the test sets (a recorded exporter output, or one rendered by
``render``), with an optional delay or status, on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Served:
    body: bytes = b""
    status: int = 200
    delay_s: float = 0.0
    requests: int = 0
    auth_headers: list[str | None] = field(default_factory=list)


@contextmanager
def exporter(served: Served) -> Iterator[str]:
    """Serve ``served`` at the yielded URL until the block ends."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            served.requests += 1
            served.auth_headers.append(self.headers.get("Authorization"))
            if served.delay_s:
                time.sleep(served.delay_s)
            self.send_response(served.status)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(served.body)))
            self.end_headers()
            # the scraper may have given up at its deadline (what the delay tests provoke)
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(served.body)

        def log_message(self, format: str, *args: object) -> None:  # quiet
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.block_on_close = False  # a test that hung the handler on purpose need not wait for it
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    finally:
        server.shutdown()
        server.server_close()


HELP = {
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": ("counter", "Total energy consumption since boot (in mJ)."),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("gauge", "Memory utilization (in %)."),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
}


def render(gpus: list[dict[str, float]], *, host: str = "node-1", mig_on: tuple[int, ...] = (),
           pod_on: tuple[int, ...] = ()) -> bytes:
    """dcgm-exporter text for ``gpus`` (field name → value), in the exporter's layout: one
    HELP/TYPE block per field, one series per GPU, per MIG instance on ``mig_on`` GPUs, and
    Kubernetes pod labels on ``pod_on`` GPUs."""
    lines: list[str] = []
    for name, (kind, text) in HELP.items():
        lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
        for index, values in enumerate(gpus):
            if name not in values:
                continue
            base = (f'gpu="{index}",UUID="GPU-{index:08x}-0000-0000-0000-000000000000",'
                    f'device="nvidia{index}",modelName="NVIDIA H100 80GB HBM3",Hostname="{host}"')
            if index in pod_on:
                base += ',container="main",namespace="train",pod="trainer-0"'
            series = [base]
            if index in mig_on:
                series = [f'{base},GPU_I_PROFILE="3g.40gb",GPU_I_ID="{i}"' for i in (1, 2)]
            value = values[name]
            lines += [f"{name}{{{labels}}} {value:f}" for labels in series]
    return ("\n".join(lines) + "\n").encode()
