"""Where a benchmark run's scheduling time goes: CPU seconds per phase, per call and per pod.

Runs one configuration on the benchmark's generated cluster (hack/bench_run.py, the same batches
and cycles) with the scheduler's phases timed in CPU time of this process (so other work on a
shared machine does not count): the snapshot, session open, job ordering, the predicate scan
(feasible_nodes), node choice (choose_node, and inside it the batch scores), placing
(Statement.allocate), numa-aware's choice of ids for node states it has not completed before
(allocate_admitted, called while scoring and while placing), and the whole cycle.

    .venv/bin/python hack/bench_phases.py --nodes 1000 --config numasched
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

HACK = Path(__file__).resolve().parent
if str(HACK) not in sys.path:
    sys.path.insert(0, str(HACK))

import bench_run  # type: ignore[import-not-found]  # noqa: E402

import numasched.cache.cache as cache_module  # noqa: E402
import numasched.plugins.numaaware.plugin as numa_plugin_module  # noqa: E402
import numasched.scheduler.actions.allocate as allocate_module  # noqa: E402
import numasched.scheduler.framework.session as session_module  # noqa: E402
import numasched.scheduler.framework.statement as statement_module  # noqa: E402
from numasched.logconfig import configure_logging  # noqa: E402

# (owner, attribute, label); indented labels are parts of the one above.
PHASES = (
    (cache_module.Cache, "snapshot", "snapshot"),
    (session_module.Session, "open", "session open"),
    (session_module.Session, "sorted_jobs", "job order"),
    (allocate_module, "feasible_nodes", "predicate scan (feasible_nodes)"),
    (allocate_module, "choose_node", "node choice (choose_node)"),
    (session_module.Session, "batch_node_order", "  of which batch scores"),
    (statement_module.Statement, "allocate", "placing (Statement.allocate)"),
    # Inside node choice (a GPU set's quality score) and placing.
    (numa_plugin_module, "allocate_admitted", "numa-aware's ids (allocate_admitted)"),
)


class PhaseClock:
    def __init__(self) -> None:
        self.seconds: collections.defaultdict[str, float] = collections.defaultdict(float)
        self.calls: collections.Counter[str] = collections.Counter()

    def wrap(self, function: Callable[..., Any], label: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[label] += time.process_time() - started
                self.calls[label] += 1

        return timed

    def wrap_async(self, function: Callable[..., Awaitable[Any]], label: str) -> Callable[..., Awaitable[Any]]:
        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.process_time()
            try:
                return await function(*args, **kwargs)
            finally:
                self.seconds[label] += time.process_time() - started
                self.calls[label] += 1

        return timed


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--config", choices=list(bench_run.CONFIGS), default="numasched")
    parser.add_argument("--mix", default="balanced")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    configure_logging("warning")
    clock = PhaseClock()
    loop = bench_run.scheduler_loop
    originals = [(owner, attribute, getattr(owner, attribute)) for owner, attribute, _ in PHASES]
    originals.append((loop, "schedule_cycle", loop.schedule_cycle))
    try:
        for owner, attribute, label in PHASES:
            setattr(owner, attribute, clock.wrap(getattr(owner, attribute), label))
        loop.schedule_cycle = clock.wrap_async(loop.schedule_cycle, "cycle")
        spec = bench_run.RunSpec(args.nodes, args.nodes * 10, args.config, args.mix, args.seed, 10, 3600.0)
        result = bench_run.run(spec, with_quality=False)
    finally:
        for owner, attribute, original in originals:
            setattr(owner, attribute, original)
    total = clock.seconds["cycle"]
    bound = max(result.bound, 1)
    print(f"{spec.label()}: {result.bound} bound in {total:.2f} CPU-s, {result.bound / total:,.0f} pods per CPU-s")
    print("| phase | CPU s | share | calls | ms per call | µs per bound pod |")
    print("|---|---:|---:|---:|---:|---:|")
    for label in ["cycle", *(label for _, _, label in PHASES)]:
        seconds, calls = clock.seconds[label], clock.calls[label]
        print(
            f"| {label} | {seconds:.2f} | {seconds / total:.0%} | {calls:,} | {seconds / max(calls, 1) * 1e3:.3f} "
            f"| {seconds / bound * 1e6:,.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
