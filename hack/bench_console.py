"""Time what the console and the per-NUMA gauges cost: building the view on the event loop (one
cache snapshot plus the view), drawing the overview, one node page and the pending page, and one
/metrics exposition (which runs in a worker thread), on hack/bench_snapshot.py's cluster (same
generator and seed).

    .venv/bin/python hack/bench_console.py --nodes 1000 --pods 10000 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_snapshot import build_cache  # type: ignore[import-not-found]

from numasched.scheduler.console import render
from numasched.scheduler.console.gauges import NumaGauges
from numasched.scheduler.console.server import CacheViews
from numasched.scheduler.metrics import SchedulerMetrics


def timed(action: Callable[[], object], rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        action()
        times.append(time.perf_counter() - started)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    cache, bound_pods, pending = build_cache(args.nodes, args.pods, args.seed)
    # max_age 0: every call builds the view again, as the first request after a second does.
    views = CacheViews(cache, max_age_s=0.0)
    view = views.view()
    node = view.nodes[0]
    metrics = SchedulerMetrics()
    metrics.watch_numa(NumaGauges(views.latest))
    results = {
        "cache snapshot alone": timed(cache.snapshot, args.rounds),
        "view (snapshot + view)": timed(views.view, args.rounds),
        "overview page": timed(lambda: render.overview(view, None), args.rounds),
        f"node page ({node.name})": timed(lambda: render.node_page(node), args.rounds),
        f"pending page ({len(view.pending)} pods)": timed(lambda: render.pending_page(view), args.rounds),
        "/metrics exposition (worker thread)": timed(metrics.exposition, args.rounds),
    }
    print(f"{args.nodes} nodes, {args.pods} pods ({len(bound_pods)} bound, {pending} pending), seed {args.seed}")
    for label, times in results.items():
        print(f"{label + ':':40s} median {statistics.median(times) * 1000:8.1f} ms, max {max(times) * 1000:8.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
