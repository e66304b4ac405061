"""run_loop with the unschedulable pods: a pod that did not fit is decided once, then sits the
triggered cycles out (only new pods are decided) until a cluster change and its backoff let it
be tried again; its report is not repeated meanwhile."""

from __future__ import annotations

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
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.loop import CycleResult, CycleTrigger, run_loop
from numasched.scheduler.loop_unschedulable import BackoffPolicy, RequeuePolicy, UnschedulablePods

GPU = "nvidia.com/gpu"
NO_ROOM = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
CONFIG = SchedulerConfig(actions=("enqueue", "allocate", "backfill"), tiers=(Tier((PluginOption("gang"),)),))


class FakeCache:
    """One 8-GPU node; each task its own job; assumed tasks leave the snapshot."""

    def __init__(self, tasks: list[tuple[str, int]]) -> None:
        self.tasks = tasks
        self.assumed: dict[str, str] = {}

    def snapshot(self) -> ClusterSnapshot:
        snapshot = ClusterSnapshot()
        snapshot.nodes["n0"] = NodeInfo.create("n0", Resource(milli_cpu=64000, memory=1e12, scalars={GPU: 8000}))
        for uid, gpus in self.tasks:
            if uid in self.assumed:
                continue
            request = Resource(milli_cpu=1000, memory=1e9, scalars={GPU: gpus * 1000.0})
            job = JobInfo(uid=uid, namespace="ns", name=uid)
            job.add_task(
                TaskInfo(uid=uid, namespace="ns", name=uid, job_id=uid, resreq=request, init_resreq=request.clone())
            )
            snapshot.jobs[uid] = job
        return snapshot

    def assume(self, task_uid: str, node_name: str, allocation: PodAllocation | None) -> None:
        self.assumed[task_uid] = node_name

    def forget(self, task_uid: str) -> None:
        self.assumed.pop(task_uid, None)

    def offer_session_nodes(self, nodes: Mapping[str, NodeInfo]) -> None:
        return None


class FakeBinder:
    def __init__(self, outcomes: dict[str, BindOutcome] | None = None) -> None:
        self.outcomes = outcomes or {}

    async def bind(self, request: BindRequest) -> BindOutcome:
        await anyio.sleep(0.005)
        return self.outcomes.get(request.task.uid, BindOutcome(BindStatus.BOUND))


class FakeReporter:
    def __init__(self) -> None:
        self.placed: list[tuple[str, str]] = []
        self.unplaced: list[tuple[str, str]] = []

    async def scheduled(self, task: TaskInfo, node_name: str) -> None:
        self.placed.append((task.uid, node_name))

    async def unschedulable(self, task: TaskInfo, message: str) -> None:
        self.unplaced.append((task.uid, message))

    async def job_status(self, job: JobInfo, phase: str, message: str) -> None:
        return None


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_a_pod_that_did_not_fit_sits_out_until_a_change_then_is_tried_again() -> None:
    cache = FakeCache([("big", 16)])
    reporter = FakeReporter()
    waiting = UnschedulablePods(RequeuePolicy(BackoffPolicy(initial_s=0.05, max_s=0.1), flush_after_s=60.0))
    trigger = CycleTrigger()
    stop = anyio.Event()
    results: list[CycleResult] = []
    tried: list[set[str]] = []

    def on_cycle(result: CycleResult) -> None:
        results.append(result)
        session = result.session
        tried.append({r.task.uid for r in session.bind_requests} | {e.task.uid for e in session.unschedulable})

    async def until_cycles(count: int) -> None:
        while len(results) < count:
            await anyio.sleep(0.005)

    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(
                lambda: run_loop(
                    cache,
                    lambda: CONFIG,
                    default_registry(),
                    FakeBinder(),
                    reporter,
                    period_s=30.0,
                    stop=stop,
                    on_cycle=on_cycle,
                    trigger=trigger,
                    min_cycle_interval_s=0.0,
                    unschedulable=waiting,
                )
            )
            await until_cycles(1)
            assert tried[0] == {"big"} and "big" in waiting
            # New pods arrive, one cycle each; past big's backoff, but nothing changed for it.
            await anyio.sleep(0.15)
            for index in range(3):
                cache.tasks.append((f"new{index}", 1))
                trigger.ask()
                await until_cycles(2 + index)
            assert tried[1:4] == [{"new0"}, {"new1"}, {"new2"}]
            assert all(result.session.held_back == frozenset({"big"}) for result in results[1:4])
            # A cluster change: once its backoff is over it is tried again, and only it.
            assert waiting.cluster_changed("node n1 changed", now=anyio.current_time() + 1.0) is True
            trigger.ask()
            await until_cycles(5)
            stop.set()
    assert tried[4] == {"big"}
    assert results[4].session.held_back == frozenset()
    assert waiting.attempts("big") == 2
    # Reported when it was tried, not while it sat out.
    assert reporter.unplaced == [("big", NO_ROOM), ("big", NO_ROOM)]
    assert sorted(uid for uid, _ in reporter.placed) == ["new0", "new1", "new2"]


@pytest.mark.anyio
async def test_a_failed_bind_frees_what_it_held_and_re_activates_the_waiting_pods() -> None:
    # "first" takes all 8 GPUs but its bind fails; "second" did not fit beside it.
    cache = FakeCache([("first", 8), ("second", 8)])
    waiting = UnschedulablePods(RequeuePolicy(BackoffPolicy(initial_s=0.01, max_s=0.01)))
    stop = anyio.Event()
    results: list[CycleResult] = []

    def on_cycle(result: CycleResult) -> None:
        results.append(result)
        if len(results) == 2:
            stop.set()

    binder = FakeBinder({"first": BindOutcome(BindStatus.FAILED, "503")})
    with anyio.fail_after(20):
        await run_loop(
            cache,
            lambda: CONFIG,
            default_registry(),
            binder,
            FakeReporter(),
            period_s=0.05,
            stop=stop,
            on_cycle=on_cycle,
            unschedulable=waiting,
        )
    assert [e.task.uid for e in results[0].session.unschedulable] == ["second"]
    assert waiting.last_change == "bind of ns/first to n0 failed"
    # Not held back: the failed bind freed the GPUs, so both are decided again.
    assert results[1].session.held_back == frozenset()
    assert {r.task.uid for r in results[1].session.bind_requests} | {
        e.task.uid for e in results[1].session.unschedulable
    } == {"first", "second"}
