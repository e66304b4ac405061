"""run_loop's one bind pipeline: the next cycle decides while the last one's binds are in flight,
each cycle is reported once its own binds are done, and a stop or a cancellation leaves nothing
assumed that was not bound."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import anyio
import pytest

from numasched.api.allocation import PodAllocation
from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo
from numasched.cache.binder import BindOutcome, BindRequest, BindStatus
from numasched.conf.model import SchedulerConfig
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.loop import CycleResult, CycleTrigger, run_loop

CONFIG = SchedulerConfig(actions=("allocate",))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Cache:
    """Two big nodes; one job per pod; a pod assumed or bound leaves the pending set."""

    def __init__(self) -> None:
        self.pods: list[str] = []
        self.assumed: dict[str, str] = {}
        self.bound: set[str] = set()
        self.forgotten: list[str] = []

    def snapshot(self) -> ClusterSnapshot:
        snapshot = ClusterSnapshot()
        for name in ("n0", "n1"):
            snapshot.nodes[name] = NodeInfo.create(name, Resource(milli_cpu=640000, memory=1e13))
        for uid in self.pods:
            if uid in self.assumed or uid in self.bound:
                continue
            request = Resource(milli_cpu=1000, memory=1e9)
            job = JobInfo(uid=uid, namespace="ns", name=uid)
            job.add_task(
                TaskInfo(uid=uid, namespace="ns", name=uid, job_id=uid, resreq=request, init_resreq=request.clone())
            )
            snapshot.jobs[uid] = job
        return snapshot

    def assume(self, task_uid: str, node_name: str, allocation: PodAllocation | None) -> None:
        self.assumed[task_uid] = node_name

    def forget(self, task_uid: str) -> None:
        self.forgotten.append(task_uid)
        self.assumed.pop(task_uid, None)

    def offer_session_nodes(self, nodes: Mapping[str, NodeInfo]) -> None:
        return None


class GatedBinder:
    """Binds wait for their pod's gate (if it has one); the order of calls and answers is noted."""

    def __init__(self, cache: Cache, gates: dict[str, anyio.Event] | None = None, delay_s: float = 0.0) -> None:
        self.cache = cache
        self.gates = gates or {}
        self.delay_s = delay_s
        self.journal: list[tuple[str, str]] = []

    async def bind(self, request: BindRequest) -> BindOutcome:
        uid = request.task.uid
        self.journal.append(("sent", uid))
        gate = self.gates.get(uid)
        if gate is not None:
            await gate.wait()
        if self.delay_s:
            await anyio.sleep(self.delay_s)
        self.cache.bound.add(uid)
        self.cache.assumed.pop(uid, None)
        self.journal.append(("bound", uid))
        return BindOutcome(BindStatus.BOUND)


class Reporter:
    async def scheduled(self, task: TaskInfo, node_name: str) -> None: ...

    async def unschedulable(self, task: TaskInfo, message: str) -> None: ...

    async def job_status(self, job: JobInfo, phase: str, message: str) -> None: ...


async def wait_for(condition: Callable[[], bool], what: str) -> None:
    with anyio.move_on_after(10):
        while not condition():
            await anyio.sleep(0.002)
        return
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.anyio
async def test_the_next_cycle_decides_and_binds_while_the_last_ones_bind_is_in_flight() -> None:
    cache = Cache()
    cache.pods.append("slow")
    gate = anyio.Event()
    binder = GatedBinder(cache, {"slow": gate})
    trigger = CycleTrigger()
    stop = anyio.Event()
    results: list[CycleResult] = []
    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(
                lambda: run_loop(
                    cache,
                    lambda: CONFIG,
                    default_registry(),
                    binder,
                    Reporter(),
                    period_s=30.0,
                    stop=stop,
                    on_cycle=results.append,
                    trigger=trigger,
                    min_cycle_interval_s=0.0,
                )
            )
            await wait_for(lambda: ("sent", "slow") in binder.journal, "the slow bind")
            cache.pods.append("quick")
            trigger.ask()
            await wait_for(lambda: ("bound", "quick") in binder.journal, "the quick bind")
            # The second cycle was decided and bound while the first one's bind still hung; it is
            # reported (its binds are done), the first is not yet.
            assert ("bound", "slow") not in binder.journal
            await wait_for(lambda: len(results) == 1, "the second cycle's report")
            assert set(results[0].outcomes) == {"quick"}
            gate.set()
            await wait_for(lambda: len(results) == 2, "the first cycle's report")
            stop.set()
    assert results[1].outcomes == {"slow": BindOutcome(BindStatus.BOUND)}
    assert cache.bound == {"slow", "quick"} and cache.assumed == {} and cache.forgotten == []


@pytest.mark.anyio
async def test_a_stop_sends_nothing_more_and_forgets_every_unsent_placement_across_cycles() -> None:
    cache = Cache()
    cache.pods.extend(f"a{index}" for index in range(3))
    gates = {"a0": anyio.Event(), "a1": anyio.Event()}
    binder = GatedBinder(cache, dict(gates))
    trigger = CycleTrigger()
    stop = anyio.Event()
    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(
                lambda: run_loop(
                    cache,
                    lambda: CONFIG,
                    default_registry(),
                    binder,
                    Reporter(),
                    period_s=30.0,
                    stop=stop,
                    bind_concurrency=2,
                    trigger=trigger,
                    min_cycle_interval_s=0.0,
                    shutdown_grace_s=5.0,
                )
            )
            await wait_for(lambda: len(binder.journal) == 2, "two binds in flight")
            # One bind waits for the two workers (within the limit): a second cycle queues behind.
            cache.pods.extend(["b0", "b1"])
            trigger.ask()
            await wait_for(lambda: {"b0", "b1"} <= set(cache.assumed), "the second cycle's placements")
            stop.set()
            # The binds in flight get their grace and land; nothing else is sent.
            for gate in gates.values():
                gate.set()
    assert sorted(entry for entry in binder.journal if entry[0] == "sent") == [("sent", "a0"), ("sent", "a1")]
    assert cache.bound == {"a0", "a1"}
    assert cache.assumed == {}
    assert sorted(cache.forgotten) == ["a2", "b0", "b1"]


@pytest.mark.anyio
async def test_a_cancelled_loop_leaves_nothing_assumed() -> None:
    cache = Cache()
    cache.pods.extend(f"a{index}" for index in range(4))
    binder = GatedBinder(cache, {f"a{index}": anyio.Event() for index in range(4)})
    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(
                lambda: run_loop(
                    cache,
                    lambda: CONFIG,
                    default_registry(),
                    binder,
                    Reporter(),
                    period_s=30.0,
                    stop=anyio.Event(),
                    bind_concurrency=2,
                )
            )
            await wait_for(lambda: len(binder.journal) == 2, "two binds in flight")
            # Leadership lost: the loop is cancelled with two binds in flight and two queued.
            group.cancel_scope.cancel()
    assert cache.bound == set()
    assert cache.assumed == {}
    assert sorted(cache.forgotten) == ["a0", "a1", "a2", "a3"]


@pytest.mark.anyio
async def test_no_new_cycle_while_more_binds_wait_than_there_are_workers() -> None:
    cache = Cache()
    cache.pods.extend(f"a{index}" for index in range(5))
    gate = anyio.Event()
    binder = GatedBinder(cache, {"a0": gate})
    trigger = CycleTrigger()
    stop = anyio.Event()
    with anyio.fail_after(20):
        async with anyio.create_task_group() as group:
            group.start_soon(
                lambda: run_loop(
                    cache,
                    lambda: CONFIG,
                    default_registry(),
                    binder,
                    Reporter(),
                    period_s=30.0,
                    stop=stop,
                    bind_concurrency=1,
                    trigger=trigger,
                    min_cycle_interval_s=0.0,
                )
            )
            await wait_for(lambda: ("sent", "a0") in binder.journal, "the first bind")
            # a0 hangs in the one worker, a1-a4 wait for it: a new pod does not start a cycle.
            cache.pods.append("b0")
            trigger.ask()
            await anyio.sleep(0.2)
            assert "b0" not in cache.assumed and "b0" not in cache.bound
            gate.set()
            await wait_for(lambda: "b0" in cache.bound, "b0 bound once the queue drained")
            stop.set()
    assert cache.bound == {"a0", "a1", "a2", "a3", "a4", "b0"}
