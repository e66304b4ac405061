"""One benchmark run: the real scheduler, in-process, on a SimCluster, and what it measured.

The scheduler runs exactly as `numasched simulate` runs it (Cache, SimCluster as binder and status
reporter, schedule_cycle per cycle). Pods arrive in batches: a batch is added, cycles run until
one binds nothing new, then the next batch comes.

Per-pod decision latency is measured without touching scheduler code: for the duration of a run
the functions the allocate and backfill actions call for each task (feasible_nodes, choose_node,
Statement.allocate and Statement.pipeline) are wrapped with a timer, and the time spent on each
task within one session is one decision. Everything else a cycle does (snapshot, job ordering,
session open and close, binding) is counted in the cycle time, not in any decision.
"""

from __future__ import annotations

import cProfile
import json
import os
import resource
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import attrs
from bench_quality import QualityReport, evaluate  # type: ignore[import-not-found]
from bench_workload import MIXES, SCHEDULER_NAME, batches, generate_cluster, generate_workload  # type: ignore[import-not-found]

import numasched.scheduler.actions.allocate as allocate_action
import numasched.scheduler.actions.backfill as backfill_action
import numasched.scheduler.loop as scheduler_loop
from numasched.api.task import TaskInfo, TaskStatus
from numasched.cache.cache import Cache
from numasched.cache.simcluster import SimCluster
from numasched.conf.loader import load_config_text
from numasched.conf.model import SchedulerConfig
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.registry import Registry
from numasched.scheduler.framework.statement import Statement

_COMMON_TIERS = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: predicates
  - name: nodeorder
"""

# The three configurations of our own engine that the benchmark compares; only numa-aware differs.
CONFIGS: dict[str, tuple[str, str]] = {
    "topology-unaware": ("baseline: predicates + nodeorder, no numa-aware", _COMMON_TIERS),
    "cpu-numa": (
        "baseline: numa-aware with devices: [] (CPU-only, as Volcano's numa-aware today)",
        _COMMON_TIERS
        + """\
  - name: numa-aware
    arguments:
      weight: 10
      devices: []
      nic-resources: []
""",
    ),
    "numasched": (
        'ours: numa-aware with devices ["nvidia.com/gpu", "rdma/hca"]',
        _COMMON_TIERS
        + """\
  - name: numa-aware
    arguments:
      weight: 10
      devices: ["nvidia.com/gpu", "rdma/hca"]
""",
    ),
}

MAX_CYCLES_PER_BATCH = 5


@attrs.frozen(slots=True)
class RunSpec:
    nodes: int
    pods: int
    config: str
    mix: str = "balanced"
    seed: int = 1
    batches: int = 10
    # Stop adding batches once the scheduling time passes this; the run is then marked partial.
    budget_s: float = 600.0

    def label(self) -> str:
        return f"{self.config} N={self.nodes} M={self.pods} mix={self.mix}"


def load_config(name: str, registry: Registry) -> SchedulerConfig:
    if name not in CONFIGS:
        raise ValueError(f"unknown configuration {name!r}; known: {', '.join(CONFIGS)}")
    return load_config_text(
        CONFIGS[name][1], f"bench config {name}", registry.known_plugin_names(), registry.known_action_names()
    )


class DecisionTimer:
    """Seconds spent per task in the current session, and every finished session's decisions."""

    def __init__(self) -> None:
        self._current: dict[str, float] = {}
        self.decisions: list[float] = []
        self.profiler: cProfile.Profile | None = None

    def _charge(self, task: TaskInfo, started: float) -> None:
        self._current[task.uid] = self._current.get(task.uid, 0.0) + time.perf_counter() - started

    def per_task(self, function: Callable[..., Any], task_index: int) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self._charge(args[task_index], started)

        return timed

    def session(self, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            self._current = {}
            if self.profiler is not None:
                self.profiler.enable()
            try:
                return function(*args, **kwargs)
            finally:
                if self.profiler is not None:
                    self.profiler.disable()
                self.decisions.extend(self._current.values())
                self._current = {}

        return timed


@contextmanager
def timed_scheduler(timer: DecisionTimer) -> Iterator[None]:
    """Wrap the per-task entry points of the actions for the duration of the block."""
    patches: list[tuple[Any, str, Any]] = [
        (allocate_action, "feasible_nodes", timer.per_task(allocate_action.feasible_nodes, 1)),
        (allocate_action, "choose_node", timer.per_task(allocate_action.choose_node, 1)),
        # backfill imported the same function by name; it gets its own wrapper.
        (backfill_action, "feasible_nodes", timer.per_task(allocate_action.feasible_nodes, 1)),
        (Statement, "allocate", timer.per_task(Statement.allocate, 1)),
        (Statement, "pipeline", timer.per_task(Statement.pipeline, 1)),
        (scheduler_loop, "run_session", timer.session(scheduler_loop.run_session)),
    ]
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, replacement in patches:
            setattr(owner, name, replacement)
        yield
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile; 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-fraction * len(ordered) // 1))))
    return ordered[rank - 1]


def peak_rss_mib() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # Linux reports KiB, macOS bytes.
    return usage / (1024 * 1024) if sys.platform == "darwin" else usage / 1024


@attrs.define(slots=True)
class RunResult:
    spec: RunSpec
    finished: bool = True
    submitted_pods: int = 0
    bound: int = 0
    pending: int = 0
    cycles: int = 0
    schedule_s: float = 0.0
    # CPU time of this process in schedule_cycle: on a shared machine wall time counts the other
    # processes' turns too; CPU time does not.
    schedule_cpu_s: float = 0.0
    cycle_s: list[float] = attrs.field(factory=list)
    decisions: int = 0
    decision_p50_ms: float = 0.0
    decision_p99_ms: float = 0.0
    decision_total_s: float = 0.0
    load_s: float = 0.0
    evaluate_s: float = 0.0
    peak_rss_mib: float = 0.0
    quality: QualityReport | None = None

    @property
    def pods_per_s(self) -> float:
        return self.bound / self.schedule_s if self.schedule_s > 0 else 0.0

    @property
    def pods_per_cpu_s(self) -> float:
        return self.bound / self.schedule_cpu_s if self.schedule_cpu_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        cycles = sorted(self.cycle_s)
        return {
            "spec": attrs.asdict(self.spec),
            "finished": self.finished,
            "submitted_pods": self.submitted_pods,
            "bound": self.bound,
            "pending": self.pending,
            "cycles": self.cycles,
            "schedule_s": round(self.schedule_s, 4),
            "pods_per_s": round(self.pods_per_s, 2),
            "schedule_cpu_s": round(self.schedule_cpu_s, 4),
            "pods_per_cpu_s": round(self.pods_per_cpu_s, 2),
            "cycle_mean_s": round(sum(cycles) / len(cycles), 4) if cycles else 0.0,
            "cycle_max_s": round(cycles[-1], 4) if cycles else 0.0,
            "decisions": self.decisions,
            "decision_p50_ms": round(self.decision_p50_ms, 4),
            "decision_p99_ms": round(self.decision_p99_ms, 4),
            "decision_total_s": round(self.decision_total_s, 4),
            "load_s": round(self.load_s, 3),
            "evaluate_s": round(self.evaluate_s, 3),
            "peak_rss_mib": round(self.peak_rss_mib, 1),
            "quality": self.quality.as_dict() if self.quality is not None else None,
        }


def _pending_tasks(cache: Cache) -> list[TaskInfo]:
    snapshot = cache.snapshot()
    return [
        task
        for job in snapshot.jobs.values()
        for task in job.tasks.values()
        if task.status is TaskStatus.PENDING and not task.node_name
    ]


def _measure(result: RunResult, timer: DecisionTimer, cluster: SimCluster) -> None:
    result.cycles = len(result.cycle_s)
    result.bound = len(cluster.bind_count)
    result.decisions = len(timer.decisions)
    result.decision_p50_ms = percentile(timer.decisions, 0.50) * 1000
    result.decision_p99_ms = percentile(timer.decisions, 0.99) * 1000
    result.decision_total_s = sum(timer.decisions)
    result.peak_rss_mib = peak_rss_mib()


def write_progress(path: Path, result: RunResult) -> None:
    """The result so far, replaced atomically, so a run stopped from outside still tells how far it got."""
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(json.dumps(result.as_dict()))
    os.replace(partial, path)


async def _run(
    spec: RunSpec, timer: DecisionTimer, result: RunResult, *, with_quality: bool, progress: Path | None
) -> None:
    if spec.mix not in MIXES:
        raise ValueError(f"unknown mix {spec.mix!r}; known: {', '.join(MIXES)}")
    registry = default_registry()
    config = load_config(spec.config, registry)
    cache = Cache((SCHEDULER_NAME,))
    cluster = SimCluster(cache)
    started = time.perf_counter()
    for generated in generate_cluster(spec.nodes, spec.seed):
        cluster.add(generated.node)
        cluster.add(generated.numatopology)
    arrivals = generate_workload(spec.pods, spec.seed, MIXES[spec.mix])
    result.load_s = time.perf_counter() - started
    if cluster.load_problems:
        raise RuntimeError(f"generated objects were refused: {cluster.load_problems[:3]}")
    with timed_scheduler(timer):
        for batch in batches(arrivals, spec.batches):
            if result.schedule_s > spec.budget_s:
                result.finished = False
                break
            for arrival in batch:
                for obj in arrival.objects:
                    cluster.add(obj)
                result.submitted_pods += arrival.pod_count
            for _ in range(MAX_CYCLES_PER_BATCH):
                before = len(cluster.bind_count)
                cycle_started = time.perf_counter()
                cpu_started = time.process_time()
                await scheduler_loop.schedule_cycle(cache, config, registry, cluster, cluster)
                elapsed = time.perf_counter() - cycle_started
                result.cycle_s.append(elapsed)
                result.schedule_s += elapsed
                result.schedule_cpu_s += time.process_time() - cpu_started
                if progress is not None:
                    _measure(result, timer, cluster)
                    result.pending = result.submitted_pods - result.bound
                    write_progress(progress, result)
                if len(cluster.bind_count) == before:
                    break
    _measure(result, timer, cluster)
    pending = _pending_tasks(cache)
    result.pending = len(pending)
    if with_quality:
        started = time.perf_counter()
        result.quality = evaluate(cache.snapshot(), list(cluster.bind_count), pending)
        result.evaluate_s = time.perf_counter() - started


def run(
    spec: RunSpec,
    *,
    with_quality: bool = True,
    profiler: cProfile.Profile | None = None,
    progress: Path | None = None,
) -> RunResult:
    """Run one configuration to the end (or its budget) and measure it; with `progress`, the
    measurements so far are written there after every cycle."""
    timer = DecisionTimer()
    timer.profiler = profiler
    result = RunResult(spec)
    anyio.run(lambda: _run(spec, timer, result, with_quality=with_quality, progress=progress))
    return result
