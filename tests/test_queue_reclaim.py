"""reclaim with proportion: two queues weighted 1:3 on a cluster full of the first queue's pods
converge, session after session, to a 1:3 share of the GPUs."""

from __future__ import annotations

import attrs
import pytest

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot, QueueInfo
from numasched.api.task import TaskInfo, TaskStatus
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.loop import run_session

GPU = "nvidia.com/gpu"


@attrs.define
class Pod:
    name: str
    queue: str
    node: str = ""


def one_gpu() -> Resource:
    return Resource(1000, 1e9, {GPU: 1000.0})


def snapshot_of(pods: list[Pod], node_names: list[str], queues: list[QueueInfo]) -> ClusterSnapshot:
    nodes = {name: NodeInfo.create(name, Resource(8000, 16e9, {GPU: 2000.0})) for name in node_names}
    jobs: dict[str, JobInfo] = {}
    for pod in pods:
        task = TaskInfo(
            uid=pod.name, namespace="ns", name=pod.name, job_id=pod.name, resreq=one_gpu(), init_resreq=one_gpu()
        )
        if pod.node:
            task.status, task.node_name = TaskStatus.RUNNING, pod.node
            nodes[pod.node].add_task(task)
        job = JobInfo(uid=pod.name, namespace="ns", name=pod.name, queue=pod.queue)
        job.add_task(task)
        jobs[job.uid] = job
    return ClusterSnapshot(nodes=nodes, jobs=jobs, queues={q.name: q for q in queues})


def config(reclaim: str) -> SchedulerConfig:
    first = Tier(
        (PluginOption("priority"), PluginOption("gang", flags={"preemptable": False}), PluginOption("conformance"))
    )
    second = Tier((PluginOption("predicates"), PluginOption("proportion")))
    return SchedulerConfig(actions=("enqueue", "allocate", "backfill", reclaim), tiers=(first, second))


def converge(
    pods: list[Pod], node_names: list[str], queues: list[QueueInfo], reclaim: str
) -> tuple[dict[str, int], int]:
    """Sessions until nothing changes: bound pods run, evicted pods terminate (and are gone),
    pipelined pods are pending again in the next snapshot, as the cache would show them."""
    registry = default_registry()
    rounds = 0
    while rounds < 20:
        rounds += 1
        result = run_session(snapshot_of(pods, node_names, queues), config(reclaim), registry)
        by_name = {pod.name: pod for pod in pods}
        for request in result.bind_requests:
            by_name[request.task.name].node = request.node_name
        gone = {eviction.task.name for eviction in result.evictions}
        pods[:] = [pod for pod in pods if pod.name not in gone]
        if not result.bind_requests and not result.evictions:
            break
    held: dict[str, int] = {}
    for pod in pods:
        if pod.node:
            held[pod.queue] = held.get(pod.queue, 0) + 1
    return held, rounds


@pytest.mark.parametrize("reclaim", ["reclaim", "gangreclaim"])
def test_two_queues_weighted_one_to_three_converge_to_a_one_to_three_share(reclaim: str) -> None:
    nodes = [f"n{i}" for i in range(4)]  # 8 GPUs
    pods = [Pod(f"a{i}", "q1", nodes[i // 2]) for i in range(8)] + [Pod(f"b{i}", "q2") for i in range(8)]
    queues = [QueueInfo("q1", weight=1), QueueInfo("q2", weight=3)]
    held, rounds = converge(pods, nodes, queues, reclaim)
    assert held == {"q1": 2, "q2": 6}
    assert rounds <= 4


def test_a_queue_that_is_not_reclaimable_keeps_its_pods() -> None:
    nodes = [f"n{i}" for i in range(4)]
    pods = [Pod(f"a{i}", "q1", nodes[i // 2]) for i in range(8)] + [Pod(f"b{i}", "q2") for i in range(8)]
    queues = [QueueInfo("q1", weight=1, reclaimable=False), QueueInfo("q2", weight=3)]
    held, _ = converge(pods, nodes, queues, "reclaim")
    assert held == {"q1": 8}


def test_a_queue_within_its_share_is_not_reclaimed_from() -> None:
    """q1 holds 2 GPUs (its 1/4), 6 are idle: q2's pods are allocated, nothing is evicted."""
    nodes = [f"n{i}" for i in range(4)]
    pods = [Pod("a0", "q1", "n0"), Pod("a1", "q1", "n0")] + [Pod(f"b{i}", "q2") for i in range(8)]
    queues = [QueueInfo("q1", weight=1), QueueInfo("q2", weight=3)]
    held, _ = converge(pods, nodes, queues, "reclaim")
    assert held == {"q1": 2, "q2": 6}
    assert {pod.name for pod in pods} >= {"a0", "a1"}
