"""schedule_cycle and run_loop against an in-memory cache, binder and reporter."""

from __future__ import annotations

import gc
from collections.abc import Mapping

import anyio
import pytest

from numasched.api.allocation import PodAllocation
from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo
from numasched.cache.binder import BindOutcome, BindRequest, BindStatus
from numasched.conf.defaults import default_config
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import Session
from numasched.scheduler.framework.status import PluginFault
from numasched.scheduler.loop import CycleResult, run_loop, run_session, schedule_cycle

GPU = "nvidia.com/gpu"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make_task(uid: str, gpus: int) -> TaskInfo:
    request = Resource(milli_cpu=1000, memory=1e9, scalars={GPU: gpus * 1000.0})
    return TaskInfo(uid=uid, namespace="ns", name=uid, job_id=uid, resreq=request, init_resreq=request.clone())


class FakeCache:
    def __init__(self, tasks: list[tuple[str, int]], nodes: int = 1) -> None:
        self.tasks = tasks
        self.nodes = nodes
        self.assumed: dict[str, str] = {}
        self.forgotten: list[str] = []
        self.snapshots = 0

    def snapshot(self) -> ClusterSnapshot:
        self.snapshots += 1
        snapshot = ClusterSnapshot()
        for index in range(self.nodes):
            name = f"n{index}"
            snapshot.nodes[name] = NodeInfo.create(name, Resource(milli_cpu=64000, memory=1e12, scalars={GPU: 8000}))
        for uid, gpus in self.tasks:
            if uid in self.assumed:
                continue
            job = JobInfo(uid=uid, namespace="ns", name=uid)
            job.add_task(make_task(uid, gpus))
            snapshot.jobs[uid] = job
        return snapshot

    def assume(self, task_uid: str, node_name: str, allocation: PodAllocation | None) -> None:
        self.assumed[task_uid] = node_name

    def forget(self, task_uid: str) -> None:
        self.forgotten.append(task_uid)
        self.assumed.pop(task_uid, None)

    def offer_session_nodes(self, nodes: Mapping[str, NodeInfo]) -> None:
        return None


class FakeBinder:
    def __init__(self, outcomes: dict[str, BindOutcome | str] | None = None) -> None:
        self.outcomes = outcomes or {}
        self.active = 0
        self.most_active = 0
        self.requests: list[BindRequest] = []

    async def bind(self, request: BindRequest) -> BindOutcome:
        self.requests.append(request)
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        try:
            await anyio.sleep(0.01)
            planned = self.outcomes.get(request.task.uid, BindOutcome(BindStatus.BOUND))
            if planned == "hang":
                await anyio.sleep(60)
            if planned == "raise":
                raise ConnectionError("connection reset by peer")
            assert isinstance(planned, BindOutcome)
            return planned
        finally:
            self.active -= 1


class FakeReporter:
    def __init__(self) -> None:
        self.placed: list[tuple[str, str]] = []
        self.unplaced: list[tuple[str, str]] = []
        self.jobs: list[tuple[str, str, str]] = []

    async def scheduled(self, task: TaskInfo, node_name: str) -> None:
        self.placed.append((task.uid, node_name))

    async def unschedulable(self, task: TaskInfo, message: str) -> None:
        self.unplaced.append((task.uid, message))

    async def job_status(self, job: JobInfo, phase: str, message: str) -> None:
        self.jobs.append((job.uid, phase, message))


CONFIG = SchedulerConfig(actions=("enqueue", "allocate", "backfill"), tiers=(Tier((PluginOption("gang"),)),))


@pytest.mark.anyio
async def test_cycle_assumes_binds_and_reports() -> None:
    cache = FakeCache([("a", 4), ("b", 4), ("big", 16)])
    binder, reporter = FakeBinder(), FakeReporter()
    result = await schedule_cycle(cache, CONFIG, default_registry(), binder, reporter)
    assert cache.assumed == {"a": "n0", "b": "n0"}
    assert sorted(r.task.uid for r in binder.requests) == ["a", "b"]
    assert {uid: outcome.status for uid, outcome in result.outcomes.items()} == {
        "a": BindStatus.BOUND,
        "b": BindStatus.BOUND,
    }
    assert sorted(reporter.placed) == [("a", "n0"), ("b", "n0")]
    assert reporter.unplaced == [("big", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")]
    assert cache.forgotten == []


@pytest.mark.anyio
async def test_failed_timed_out_and_raising_binds_are_forgotten() -> None:
    cache = FakeCache([("ok", 1), ("conflict", 1), ("failed", 1), ("hang", 1), ("raise", 1)])
    binder = FakeBinder(
        {
            "conflict": BindOutcome(BindStatus.CONFLICT, "already bound"),
            "failed": BindOutcome(BindStatus.FAILED, "503 Service Unavailable"),
            "hang": "hang",
            "raise": "raise",
        }
    )
    reporter = FakeReporter()
    with anyio.fail_after(10):
        result = await schedule_cycle(cache, CONFIG, default_registry(), binder, reporter, bind_timeout_s=0.2)
    assert sorted(cache.forgotten) == ["conflict", "failed", "hang", "raise"]
    assert cache.assumed == {"ok": "n0"}
    assert result.outcomes["hang"] == BindOutcome(BindStatus.FAILED, "no answer within 0.2s")
    assert result.outcomes["raise"] == BindOutcome(BindStatus.FAILED, "ConnectionError: connection reset by peer")
    assert sorted(reporter.unplaced) == [
        ("failed", "binding to node n0 failed: 503 Service Unavailable"),
        ("hang", "binding to node n0 failed: no answer within 0.2s"),
        ("raise", "binding to node n0 failed: ConnectionError: connection reset by peer"),
    ]
    assert reporter.placed == [("ok", "n0")]


@pytest.mark.anyio
async def test_pod_group_status_is_reported() -> None:
    class GroupCache(FakeCache):
        def snapshot(self) -> ClusterSnapshot:
            snapshot = super().snapshot()
            gang = JobInfo(uid="gang", namespace="ns", name="gang", min_available=2, has_pod_group=True)
            gang.add_task(make_task("g0", 8))
            gang.add_task(make_task("g1", 8))
            snapshot.jobs["gang"] = gang
            return snapshot

    reporter = FakeReporter()
    result = await schedule_cycle(GroupCache([]), CONFIG, default_registry(), FakeBinder(), reporter)
    assert result.session.bind_requests == ()
    assert reporter.jobs == [
        (
            "gang",
            "Inqueue",
            "2/2 tasks in gang unschedulable: ns/g0: pod group ns/gang is not ready: 1 of 2 required tasks "
            "could be placed; ns/g1: 0/1 nodes are available: 1 Insufficient nvidia.com/gpu.",
        )
    ]


@pytest.mark.anyio
async def test_binds_run_concurrently_within_the_limit() -> None:
    cache = FakeCache([(f"t{i}", 0) for i in range(12)], nodes=2)
    binder = FakeBinder()
    await schedule_cycle(cache, CONFIG, default_registry(), binder, FakeReporter(), bind_concurrency=3)
    assert len(binder.requests) == 12
    assert binder.most_active == 3


@pytest.mark.anyio
async def test_run_loop_repeats_reads_config_each_cycle_and_stops() -> None:
    cache = FakeCache([("a", 4)])
    stop = anyio.Event()
    configs_read: list[int] = []
    results: list[CycleResult] = []

    def current_config() -> SchedulerConfig:
        configs_read.append(len(configs_read))
        return CONFIG

    def on_cycle(result: CycleResult) -> None:
        results.append(result)
        if len(results) == 3:
            stop.set()

    with anyio.fail_after(10):
        cycles = await run_loop(
            cache,
            current_config,
            default_registry(),
            FakeBinder(),
            FakeReporter(),
            period_s=0.01,
            stop=stop,
            on_cycle=on_cycle,
        )
    # on_cycle hears of a cycle once its binds are done; the next may have started by then.
    assert cycles >= 3
    assert len(configs_read) == cycles
    # In the order their binds finished: the one that bound "a" may come after an empty one.
    assert sorted(len(result.session.bind_requests) for result in results) == [0] * (len(results) - 1) + [1]


@pytest.mark.anyio
async def test_run_loop_survives_a_failing_cycle() -> None:
    cache = FakeCache([("a", 1)])
    stop = anyio.Event()
    calls: list[str] = []
    broken = SchedulerConfig(actions=("no-such-action",))

    def current_config() -> SchedulerConfig:
        calls.append("read")
        return CONFIG if len(calls) == 2 else broken

    with anyio.fail_after(10):
        cycles = await run_loop(
            cache,
            current_config,
            default_registry(),
            FakeBinder(),
            FakeReporter(),
            period_s=0.01,
            stop=stop,
            on_cycle=lambda result: stop.set(),
        )
    # The good cycle came after a failed one and bound; on_cycle heard of it once its bind was
    # done, by when a further (failing) cycle may have started.
    assert cycles >= 2
    assert cache.assumed == {"a": "n0"}


@pytest.mark.anyio
async def test_run_loop_rejects_a_bad_period() -> None:
    with pytest.raises(ValueError, match="positive number of seconds"):
        await run_loop(
            FakeCache([]),
            lambda: CONFIG,
            default_registry(),
            FakeBinder(),
            FakeReporter(),
            period_s=0,
            stop=anyio.Event(),
        )


@pytest.mark.anyio
async def test_a_plugin_raising_while_opening_drops_that_cycle_only_and_is_reported() -> None:
    opened: list[int] = []

    class BrokenAtFirst:
        name = "broken"

        def __init__(self, arguments: Arguments) -> None:
            return None

        def on_session_open(self, ssn: Session) -> None:
            opened.append(len(opened))
            if len(opened) <= 2:
                raise KeyError("state not ready")

        def on_session_close(self, ssn: Session) -> None:
            return None

    registry = default_registry()
    registry.register_plugin("broken", BrokenAtFirst)
    config = SchedulerConfig(actions=("allocate",), tiers=(Tier((PluginOption("gang"), PluginOption("broken"))),))
    cache = FakeCache([("a", 1)])
    stop = anyio.Event()
    faults: list[PluginFault] = []
    with anyio.fail_after(10):
        cycles = await run_loop(
            cache,
            lambda: config,
            registry,
            FakeBinder(),
            FakeReporter(),
            period_s=0.01,
            stop=stop,
            on_cycle=lambda result: stop.set(),
            on_plugin_fault=faults.append,
        )
    # The third cycle bound "a"; on_cycle heard of it once the bind was done (a fourth may have begun).
    assert cycles >= 3
    assert [(f.plugin, f.extension_point, f.error) for f in faults] == [
        ("broken", "onSessionOpen", "KeyError: 'state not ready'")
    ] * 2
    assert cache.assumed == {"a": "n0"}


def test_a_session_is_freed_by_reference_counting_once_its_results_are_read() -> None:
    # Plugins hold the session and the session holds their functions: unless run_session breaks
    # that cycle, each cycle's session and copy of the cluster wait for a full collection (the
    # API stream benchmark's scheduler grew past 1.4 GiB in 15 s that way).
    node = NodeInfo.create("n0", Resource(milli_cpu=64000, memory=1e12, scalars={GPU: 8000}))
    job = JobInfo(uid="j", namespace="ns", name="j")
    request = Resource(milli_cpu=1000, memory=1e9)
    job.add_task(TaskInfo(uid="t", namespace="ns", name="t", job_id="j", resreq=request, init_resreq=request.clone()))
    snapshot = ClusterSnapshot(nodes={"n0": node}, jobs={"j": job})
    gc.collect()
    gc.disable()
    try:
        result = run_session(snapshot, default_config(), default_registry())
        alive = [thing for thing in gc.get_objects() if isinstance(thing, Session)]
    finally:
        gc.enable()
    assert [request.node_name for request in result.bind_requests] == ["n0"]
    assert alive == []
