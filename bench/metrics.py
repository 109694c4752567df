"""What one Prometheus scrape of a rack agent costs, against the work the agent does anyway.

A real engine learns ``--hours`` of the twin's steady scenario (8 GPUs, seed ``--seed``); then a
scrape's work (the snapshot's summary payload, the families, the text exposition) is timed
``--scrapes`` times and set against the reference measured in the same run: one engine summary
payload, which the agent computes at every summary anyway. Prints the median times, the ratio,
the exposition's size and series count, and the CPU share of one core at a 30 s scrape interval.

    .venv/bin/python bench/metrics.py                 # 6 simulated hours, 200 scrapes, seed 0
    .venv/bin/python bench/metrics.py --hours 2 --scrapes 50 --seed 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from prometheus_client import CollectorRegistry, generate_latest  # noqa: E402
from prometheus_client.registry import Collector  # noqa: E402

from agent.config.model import AgentSection, Config  # noqa: E402
from agent.live.demo.engine_feed import prewarm  # noqa: E402
from agent.live.engine_link import EngineLink  # noqa: E402
from agent.metrics.families import build_families  # noqa: E402
from agent.metrics.jobs import JobEnergyLedger  # noqa: E402
from agent.metrics.snapshot import RackSnapshot, active_drifts  # noqa: E402
from agent.metrics.tap import MessageTap  # noqa: E402
from agent.sim import make_scenario  # noqa: E402

SCRAPE_INTERVAL_S = 30.0  # the interval docs/metrics.md suggests


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    scenario = make_scenario("steady", days=1, seed=args.seed, gpus=8, start_ts=1.8e9)
    config = Config(agent=AgentSection(site="bench", rack="r1"))
    link = EngineLink.from_config(config)
    assert link is not None
    prewarm(link, scenario, args.hours)
    now = scenario.start_ts + args.hours * 3600.0
    tap = MessageTap(JobEnergyLedger(8))
    status = {
        "started": scenario.start_ts,
        "devices": {
            d: {"ok": True, "polls": 1, "failures": 0, "elapsed_ms": 5.0, "interval_s": 5.0, "last_ok": now}
            for d in ("pdu.a", "pdu.b", "crac.1", "nvml")
        },
    }

    class Scrape(Collector):
        def collect(self):  # type: ignore[no-untyped-def]
            snap = RackSnapshot(
                labels={"site": "bench", "rack": "r1", "node": "gw1"},
                info={"version": "x", "row": "", "hall": ""},
                summary=link.summary_payload(now),
                status=status,
                drifts=active_drifts(link.engine, tap),
            )
            yield from build_families(snap)

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Scrape())
    ref, scrape = [], []
    text = b""
    for _ in range(args.scrapes):
        t0 = time.perf_counter()
        link.summary_payload(now)
        t1 = time.perf_counter()
        text = generate_latest(registry)
        t2 = time.perf_counter()
        ref.append(t1 - t0)
        scrape.append(t2 - t1)
    ref_ms, scrape_ms = statistics.median(ref) * 1e3, statistics.median(scrape) * 1e3
    series = sum(1 for line in text.decode().splitlines() if line and not line.startswith("#"))
    print(
        f"engine learned {args.hours:g} simulated h (steady, 8 GPUs, seed {args.seed}); "
        f"{args.scrapes} scrapes"
    )
    print(f"reference: one summary payload  {ref_ms:8.3f} ms (median)")
    print(
        f"one scrape (snapshot + text)     {scrape_ms:8.3f} ms (median) = "
        f"{scrape_ms / ref_ms:.1f}x the reference"
    )
    print(f"exposition: {len(text)} bytes, {series} series")
    print(
        f"CPU at one scrape per {SCRAPE_INTERVAL_S:g} s: "
        f"{100 * scrape_ms / 1e3 / SCRAPE_INTERVAL_S:.3f} % of a core"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
