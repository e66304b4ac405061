"""preempt and gangpreempt with gangs: a higher-priority gang evicts exactly enough lower pods,
all or nothing; gangpreempt takes victim gangs whole beyond their spare tasks."""

from __future__ import annotations

import pytest

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo, TaskStatus
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.loop import SessionResult, run_session

GPU = "nvidia.com/gpu"


def gpus(count: int) -> Resource:
    return Resource(1000 * count, 1e9 * count, {GPU: 1000.0 * count})


def task(name: str, job: str, count: int, priority: int) -> TaskInfo:
    return TaskInfo(
        uid=name, namespace="ns", name=name, job_id=job, resreq=gpus(count), init_resreq=gpus(count), priority=priority
    )


def running_job(
    nodes: dict[str, NodeInfo], name: str, placement: list[str], priority: int, min_available: int = 1
) -> JobInfo:
    job = JobInfo(uid=name, namespace="ns", name=name, priority=priority, min_available=min_available)
    for index, node_name in enumerate(placement):
        member = task(f"{name}-{index}", name, 1, priority)
        member.status = TaskStatus.RUNNING
        member.node_name = node_name
        nodes[node_name].add_task(member)
        job.add_task(member)
    if min_available > 1:
        job.has_pod_group, job.pod_group_phase = True, "Running"
    return job


def pending_gang(name: str, members: int, per_member: int, priority: int) -> JobInfo:
    job = JobInfo(
        uid=name,
        namespace="ns",
        name=name,
        priority=priority,
        min_available=members,
        has_pod_group=True,
        pod_group_phase="Inqueue",
    )
    for index in range(members):
        job.add_task(task(f"{name}-{index}", name, per_member, priority))
    return job


def run(jobs: list[JobInfo], nodes: dict[str, NodeInfo], action: str = "preempt") -> SessionResult:
    # Volcano's shipped tiers: gang does not vote on preemption victims.
    first = Tier(
        (PluginOption("priority"), PluginOption("gang", flags={"preemptable": False}), PluginOption("conformance"))
    )
    second = Tier((PluginOption("predicates"),))
    config = SchedulerConfig(actions=("enqueue", "allocate", action), tiers=(first, second))
    return run_session(ClusterSnapshot(nodes=nodes, jobs={job.uid: job for job in jobs}), config, default_registry())


def two_full_nodes() -> dict[str, NodeInfo]:
    return {name: NodeInfo.create(name, gpus(4)) for name in ("n1", "n2")}


def test_a_gang_preempts_exactly_enough_lower_pods() -> None:
    """8 one-GPU pods of priority 1..8 fill two 4-GPU nodes; a gang of 3 x 2 GPUs (priority 100)
    needs 6 GPUs: the 6 lowest-priority pods go, 2 per gang member, no more."""
    nodes = two_full_nodes()
    low = [running_job(nodes, f"low{p}", ["n1" if p <= 4 else "n2"], p) for p in range(1, 9)]
    gang = pending_gang("gang", 3, 2, 100)
    result = run([*low, gang], nodes)
    evicted = sorted(eviction.task.uid for eviction in result.evictions)
    assert len(evicted) == 6
    freed = {name: sum(1 for e in result.evictions if e.node_name == name) for name in nodes}
    placed = {name: sum(2 for t in gang.tasks.values() if t.node_name == name) for name in nodes}
    assert freed == placed, "each node frees exactly what the gang members pipelined there take"
    assert all(t.status is TaskStatus.PIPELINED for t in gang.tasks.values())
    # Volcano's victim order: lowest priority first, so the two highest stay.
    assert "low8-0" not in evicted or "low7-0" not in evicted


def test_a_gang_that_cannot_be_met_evicts_nothing() -> None:
    """The same gang when only 4 GPUs are held by lower-priority pods: the third member cannot
    be placed, so no pod is evicted and nothing is pipelined."""
    nodes = two_full_nodes()
    low = [running_job(nodes, f"low{p}", ["n1"], p) for p in range(1, 5)]
    high = [running_job(nodes, f"high{p}", ["n2"], 500 + p) for p in range(1, 5)]
    gang = pending_gang("gang", 3, 2, 100)
    result = run([*low, *high, gang], nodes)
    assert list(result.evictions) == []
    assert all(t.status is TaskStatus.PENDING and not t.node_name for t in gang.tasks.values())
    assert all(t.status is TaskStatus.RUNNING for job in [*low, *high] for t in job.tasks.values())
    assert nodes["n1"].releasing.is_empty() and nodes["n1"].pipelined.is_empty()


@pytest.mark.parametrize("action", ["preempt", "gangpreempt"])
def test_gangpreempt_takes_a_victim_gang_whole_past_its_spare_task(action: str) -> None:
    """A victim gang of 4 (minAvailable 3) holds 2 GPUs on each node, lone pods the rest; the
    preemptor needs a whole 4-GPU node. preempt (gang's vote off, as Volcano ships) leaves the
    gang running below its minimum; gangpreempt takes the gang whole, on both nodes."""
    nodes = two_full_nodes()
    victim_gang = running_job(nodes, "vg", ["n1", "n1", "n2", "n2"], 1, min_available=3)
    lone = [running_job(nodes, f"lone{p}", ["n1" if p <= 2 else "n2"], 2) for p in range(1, 5)]
    preemptor = pending_gang("p", 1, 4, 100)
    result = run([victim_gang, *lone, preemptor], nodes, action)
    evicted = {eviction.task.uid for eviction in result.evictions}
    assert preemptor.tasks["p-0"].status is TaskStatus.PIPELINED
    node = preemptor.tasks["p-0"].node_name
    on_node = {
        t.uid
        for t in [*victim_gang.tasks.values(), *(t for j in lone for t in j.tasks.values())]
        if t.node_name == node
    }
    assert on_node <= evicted
    running_left = sum(1 for t in victim_gang.tasks.values() if t.status is TaskStatus.RUNNING)
    if action == "gangpreempt":
        assert evicted == on_node | set(victim_gang.tasks)
        assert running_left == 0
    else:
        assert evicted == on_node
        assert running_left == 2


def test_gangpreempt_prefers_spare_tasks_over_a_whole_gang() -> None:
    """Needing 3 GPUs on n1, gangpreempt evicts the gang's spare task and two lone pods (3 pods)
    rather than the whole gang (5 pods): fewest evicted tasks first."""
    nodes = two_full_nodes()
    victim_gang = running_job(nodes, "vg", ["n1", "n1", "n2", "n2"], 1, min_available=3)
    lone = [running_job(nodes, f"lone{p}", ["n1" if p <= 2 else "n2"], 2) for p in range(1, 5)]
    preemptor = pending_gang("p", 1, 3, 100)
    result = run([victim_gang, *lone, preemptor], nodes, "gangpreempt")
    evicted = {eviction.task.uid for eviction in result.evictions}
    assert len(evicted) == 3
    assert sum(1 for t in victim_gang.tasks.values() if t.status is TaskStatus.RUNNING) == 3
