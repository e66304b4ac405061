"""proportion, capacity, overcommit and drf with Volcano's own table-test numbers
(pkg/scheduler/plugins/*/..._test.go), through run_session with only the plugin under test."""

from __future__ import annotations

import pytest

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot, QueueInfo
from numasched.api.task import TaskInfo, TaskStatus
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.plugins import proportion
from numasched.plugins import queue_share as qs
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.loop import run_session

G = 1e9
GI = 2**30


GPU = "nvidia.com/gpu"


def res(cpu: float, memory: float, gpus: float = 0) -> Resource:
    return Resource(cpu * 1000, memory, {GPU: gpus * 1000} if gpus else {})


def node(name: str, cpu: float, memory: float) -> NodeInfo:
    return NodeInfo.create(name, res(cpu, memory))


def pod(name: str, group: str, request: Resource, *, on: NodeInfo | None = None, priority: int = 0) -> TaskInfo:
    task = TaskInfo(
        uid=name, namespace="ns1", name=name, job_id=group, resreq=request.clone(), init_resreq=request.clone()
    )
    task.priority = priority
    if on is not None:
        task.status = TaskStatus.RUNNING
        task.node_name = on.name
        on.add_task(task)
    return task


def group(
    name: str, queue: str, phase: str, tasks: list[TaskInfo], min_resources: Resource | None, min_member: int = 1
) -> JobInfo:
    job = JobInfo(
        uid=name,
        namespace="ns1",
        name=name,
        queue=queue,
        min_available=min_member,
        has_pod_group=True,
        pod_group_phase=phase,
        min_resources=min_resources,
    )
    for task in tasks:
        job.add_task(task)
    return job


def bound(nodes: list[NodeInfo], jobs: list[JobInfo], queues: list[QueueInfo], option: PluginOption) -> dict[str, str]:
    snapshot = ClusterSnapshot(
        nodes={n.name: n for n in nodes}, jobs={j.uid: j for j in jobs}, queues={q.name: q for q in queues}
    )
    config = SchedulerConfig(actions=("enqueue", "allocate"), tiers=(Tier((option,)),))
    result = run_session(snapshot, config, default_registry())
    return {f"ns1/{request.task.name}": request.node_name for request in result.bind_requests}


ALL_ENABLED = PluginOption("proportion", flags={"allocatable": True, "overused": True, "jobEnqueued": True})
ENQUEUE_ONLY = PluginOption("proportion", flags={"allocatable": False, "overused": False, "jobEnqueued": True})
ALLOCATABLE_ONLY = PluginOption("proportion", flags={"allocatable": True, "overused": False, "jobEnqueued": False})


def enqueue_and_allocate_case(
    pending: str, state: str = "Open"
) -> tuple[list[NodeInfo], list[JobInfo], list[QueueInfo]]:
    """Volcano's TestEnqueueAndAllocable cluster: two 2-CPU 2G nodes, q1 (capability 2 CPU 2G)
    runs 1c2g on n1, q2 (3 CPU 3G) runs 2c1g on n2, plus one pending PodGroup."""
    n1, n2 = node("n1", 2, 2 * G), node("n2", 2, 2 * G)
    pg1 = group("pg1", "q1", "Running", [pod("pod1", "pg1", res(1, 2 * G), on=n1)], res(1, 2 * G))
    pg2 = group("pg2", "q2", "Running", [pod("pod2", "pg2", res(2, 1 * G), on=n2)], res(2, 1 * G))
    pending_groups = {
        "pod3": ("pg3", "q1", res(1, 0)),
        "pod4": ("pg4", "q2", res(0, 1 * G)),
        "pod5": ("pg5", "q1", res(1, 1 * G)),
        "pod6": ("pg6", "q3", res(1, 1 * G)),
    }
    name, queue, request = pending_groups[pending]
    pg = group(name, queue, "Pending", [pod(pending, name, request)], request)
    queues = [
        QueueInfo("q1", 1, capability=res(2, 2 * G)),
        QueueInfo("q2", 1, capability=res(3, 3 * G)),
        QueueInfo("q3", 1, state="Closed", capability=res(3, 3 * G)),
    ]
    return [n1, n2], [pg1, pg2, pg], queues


@pytest.mark.parametrize(
    ("case", "pending", "option", "expected"),
    [
        ("memory over deserved, a CPU-only job is admitted and placed", "pod3", ALL_ENABLED, {"ns1/pod3": "n1"}),
        ("CPU over deserved, a memory-only job is admitted and placed", "pod4", ALL_ENABLED, {"ns1/pod4": "n2"}),
        ("over capability: not admitted", "pod5", ENQUEUE_ONLY, {}),
        ("over deserved: not allocated", "pod5", ALLOCATABLE_ONLY, {}),
        ("closed queue: not admitted", "pod6", ENQUEUE_ONLY, {}),
    ],
)
def test_volcano_enqueue_and_allocatable(
    case: str, pending: str, option: PluginOption, expected: dict[str, str]
) -> None:
    nodes, jobs, queues = enqueue_and_allocate_case(pending)
    assert bound(nodes, jobs, queues, option) == expected, case


def test_deserved_is_shared_by_weight_up_to_each_request() -> None:
    """Water filling by hand: 12 GPUs, q1:q2:q3 weights 1:1:2. q1 asks 2 (met at 2); the 10 left
    go 1:2 between q2 (asks 8) and q3 (asks 12): q2 gets 10/3, q3 20/3."""
    total = res(0, 0, gpus=12)
    queues = {"q1": QueueInfo("q1", 1), "q2": QueueInfo("q2", 1), "q3": QueueInfo("q3", 2)}
    jobs = [
        group(f"pg-{q}", q, "Inqueue", [pod(f"{q}-{i}", f"pg-{q}", res(0, 0, gpus=1)) for i in range(n)], None)
        for q, n in (("q1", 2), ("q2", 8), ("q3", 12))
    ]
    attrs_by_queue = proportion.build_queue_attrs(queues, jobs, total)
    proportion.compute_deserved(attrs_by_queue, total)
    gpus = {name: attr.deserved.scalars["nvidia.com/gpu"] / 1000 for name, attr in attrs_by_queue.items()}
    assert gpus["q1"] == pytest.approx(2)
    assert gpus["q2"] == pytest.approx(10 / 3)
    assert gpus["q3"] == pytest.approx(20 / 3)
    assert sum(gpus.values()) == pytest.approx(12)


def test_guarantee_and_capability_bound_deserved() -> None:
    """A guarantee is a floor and comes out of the others' real capability; a capability caps."""
    total = res(10, 10 * G)
    queues = {
        "gold": QueueInfo("gold", 1, guarantee=res(6, 6 * G)),
        "capped": QueueInfo("capped", 9, capability=res(2, 0)),
        "rest": QueueInfo("rest", 1),
    }
    jobs = [
        group(f"pg-{q}", q, "Inqueue", [pod(f"{q}-{i}", f"pg-{q}", res(1, 1 * G)) for i in range(10)], None)
        for q in queues
    ]
    attrs_by_queue = proportion.build_queue_attrs(queues, jobs, total)
    proportion.compute_deserved(attrs_by_queue, total)
    assert attrs_by_queue["gold"].deserved.milli_cpu >= 6000 - qs.TOLERANCE
    assert attrs_by_queue["capped"].deserved.milli_cpu == pytest.approx(2000)
    # Real capability of a queue without a guarantee: the cluster less the others' guarantees.
    assert attrs_by_queue["rest"].real_capability.milli_cpu == pytest.approx(4000)
    assert sum(attr.deserved.milli_cpu for attr in attrs_by_queue.values()) == pytest.approx(10000)


def overcommit_case(factor: object) -> dict[str, str]:
    n1 = node("n1", 2, 4 * GI)
    jobs = [
        group(f"pg{i}", "default", "Pending", [pod(f"p{i}", f"pg{i}", res(1, 1 * GI))], res(1, 1 * GI))
        for i in range(1, 4)
    ]
    option = PluginOption("overcommit", arguments={"overcommit-factor": factor})
    snapshot = ClusterSnapshot(nodes={"n1": n1}, jobs={j.uid: j for j in jobs})
    config = SchedulerConfig(actions=("enqueue",), tiers=(Tier((option,)),))
    run_session(snapshot, config, default_registry())
    return {job.uid: job.pod_group_phase for job in jobs}


def test_overcommit_admits_up_to_factor_times_the_cluster() -> None:
    """2 CPUs x 1.2 = 2.4: two 1-CPU PodGroups are admitted, the third waits; with 1.5 (3 CPUs)
    all three are."""
    assert overcommit_case(1.2) == {"pg1": "Inqueue", "pg2": "Inqueue", "pg3": "Pending"}
    assert overcommit_case(1.5) == {"pg1": "Inqueue", "pg2": "Inqueue", "pg3": "Inqueue"}


def test_overcommit_factor_below_one_is_refused() -> None:
    from numasched.plugins.overcommit import build
    from numasched.scheduler.framework.arguments import Arguments, PluginArgumentError

    with pytest.raises(PluginArgumentError, match="overcommit-factor"):
        build(Arguments({"overcommit-factor": 0.5}, plugin="overcommit"))


def test_drf_orders_jobs_by_dominant_share() -> None:
    """The job holding less of its dominant resource goes first: A holds 3 of 5 CPUs (0.6), B 1 of
    5 GiB (0.2), so B's pending task takes the one place left (without drf, A is older by uid)."""
    n1 = node("n1", 4, 4 * GI)
    n1_extra = node("n2", 1, 1 * GI)
    a = group(
        "A", "default", "Running", [pod("a0", "A", res(3, 0.5 * GI), on=n1), pod("a1", "A", res(1, 1 * GI))], None
    )
    b = group(
        "B", "default", "Running", [pod("b0", "B", res(0.5, 1 * GI), on=n1), pod("b1", "B", res(1, 1 * GI))], None
    )
    snapshot = ClusterSnapshot(nodes={"n1": n1, "n2": n1_extra}, jobs={"A": a, "B": b})
    config = SchedulerConfig(actions=("allocate",), tiers=(Tier((PluginOption("drf"),)),))
    result = run_session(snapshot, config, default_registry())
    assert [request.task.name for request in result.bind_requests] == ["b1"]


def test_allocate_takes_turns_between_queues_and_stops_at_overused_ones() -> None:
    """Volcano's allocate: each turn the queue first in queue order (proportion: the lower share)
    that is not overused gives one job. On 8 CPUs queue a (weight 1) deserves 2 and b (weight 3)
    6: a gets two jobs and b six, and the rest wait because their queue is overused. Taking queues
    by name would give a all four of its jobs (there is no allocatable check here)."""
    nodes = [node("n1", 8, 8 * GI)]
    counts = {"a": 4, "b": 8}
    jobs = [
        group(f"{queue}{index}", queue, "Inqueue", [pod(f"{queue}{index}-0", f"{queue}{index}", res(1, GI))], None)
        for queue, count in counts.items()
        for index in range(count)
    ]
    queues = [QueueInfo("a", weight=1), QueueInfo("b", weight=3)]
    option = PluginOption("proportion", flags={"allocatable": False, "overused": True, "jobEnqueued": False})
    placed = bound(nodes, jobs, queues, option)
    assert sorted(placed) == sorted([f"ns1/a{i}-0" for i in range(2)] + [f"ns1/b{i}-0" for i in range(6)])
    waiting = [task for job in jobs for task in job.tasks.values() if task.name in ("a2-0", "a3-0", "b6-0", "b7-0")]
    assert len(waiting) == 4
    assert all("overused" in task.fit_error for task in waiting)
