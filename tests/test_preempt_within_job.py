"""preempt between the tasks of one job (Volcano's intra-job pass): a pending task evicts lower-
priority tasks of its own job, with the NUMA-aware victim search; judged by the kubelet model."""

from __future__ import annotations

import pytest
from conftest import load_machine
from test_preempt_numa import kubelet_admits, pod_object, running_gpu_pod, topology

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo, TaskStatus
from numasched.cache.convert_pod import node_to_node_info, pod_to_task
from numasched.cache.machine_shapes import machine_objects
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.loop import run_session

GPU = "nvidia.com/gpu"
# NUMA 0 holds GPUs 0-3, NUMA 1 GPUs 4-7. Low tasks interleave over both NUMA nodes; the high
# ones (priority 500) fill the rest of the machine.
LAYOUT = [("a", "0", 1), ("b", "4", 2), ("c", "1", 3), ("d", "5", 4)]
HIGH = [("x", "2", 500), ("y", "3", 500), ("z", "6", 500), ("w", "7", 500)]


def one_job_scenario(layout: list[tuple[str, str, int]], preemptor_priority: int) -> tuple[ClusterSnapshot, TaskInfo]:
    node_object, _ = machine_objects(load_machine("pcie-8gpu-2numa"), "n1")
    node: NodeInfo = node_to_node_info(node_object)
    node.topology = topology()
    job = JobInfo(uid="j", namespace="team", name="j", priority=10, min_available=len(layout) + 1)
    job.has_pod_group, job.pod_group_phase = True, "Running"
    for name, gpu, priority in layout:
        task = running_gpu_pod(node, name, gpu, priority)
        task.job_id = "j"
        job.add_task(task)
    preemptor = pod_to_task(pod_object("p", {"cpu": "2", "memory": "4Gi", GPU: "2"}, preemptor_priority))
    preemptor.priority, preemptor.job_id = preemptor_priority, "j"
    job.add_task(preemptor)
    return ClusterSnapshot(nodes={"n1": node}, jobs={"j": job}), preemptor


def config(action: str = "preempt") -> SchedulerConfig:
    gang = PluginOption("gang", flags={"preemptable": False})
    first = Tier((PluginOption("priority"), gang, PluginOption("conformance")))
    second = Tier((PluginOption("predicates"), PluginOption("numa-aware")))
    return SchedulerConfig(actions=("enqueue", "allocate", action), tiers=(first, second))


def test_a_task_evicts_lower_tasks_of_its_own_job_on_one_numa_node() -> None:
    snapshot, preemptor = one_job_scenario(LAYOUT + HIGH, 100)
    result = run_session(snapshot, config(), default_registry())
    evicted = {eviction.task.uid for eviction in result.evictions}
    assert evicted == {"a", "c"}
    assert all("of the same job (preempt)" in eviction.reason for eviction in result.evictions)
    assert preemptor.status is TaskStatus.PIPELINED and preemptor.node_name == "n1"
    fresh, fresh_preemptor = one_job_scenario(LAYOUT + HIGH, 100)
    assert kubelet_admits(fresh, fresh_preemptor, evicted)
    for victim in evicted:
        assert not kubelet_admits(fresh, fresh_preemptor, evicted - {victim}), f"{victim} was not needed"
    # The two lowest tasks (a, b) sit on different NUMA nodes: evicting them would not do.
    assert not kubelet_admits(fresh, fresh_preemptor, {"a", "b"})


def test_tasks_of_equal_or_higher_priority_are_never_victims() -> None:
    """Only the priority-500 tasks could make room on one NUMA node beside one low task; a
    preemptor of priority 500 may not take them (Volcano: a task of the same job only when its
    own priority is lower), and one low task alone is not enough."""
    layout = [("a", "0", 1), ("b", "4", 2), ("x", "1", 500), ("y", "2", 500), ("y2", "3", 500)]
    layout += [("z", "5", 500), ("w", "6", 500), ("v", "7", 500)]
    snapshot, preemptor = one_job_scenario(layout, 500)
    result = run_session(snapshot, config(), default_registry())
    assert list(result.evictions) == []
    assert preemptor.status is TaskStatus.PENDING


def test_gangpreempt_has_no_pass_within_a_job() -> None:
    snapshot, preemptor = one_job_scenario(LAYOUT + HIGH, 100)
    result = run_session(snapshot, config("gangpreempt"), default_registry())
    assert list(result.evictions) == []
    assert preemptor.status is TaskStatus.PENDING


def gpu_task(name: str, job: str, priority: int, node: NodeInfo | None) -> TaskInfo:
    request = Resource(1000, 1e9, {GPU: 1000.0})
    task = TaskInfo(uid=name, namespace="ns", name=name, job_id=job, resreq=request, init_resreq=request)
    task.priority = priority
    if node is not None:
        task.status, task.node_name = TaskStatus.RUNNING, node.name
        node.add_task(task)
    return task


@pytest.mark.parametrize("other_job_priority", [1, 100])
def test_other_jobs_go_first_between_jobs_then_within(other_job_priority: int) -> None:
    """A job of priority 50 with a pending task (priority 9) and a running one (priority 1), and
    another job's running task, on a 2-GPU node. When the other job is lower (1) the pass between
    jobs takes its task; when it is higher (100) only the job's own lower task may go."""
    node = NodeInfo.create("n1", Resource(8000, 16e9, {GPU: 2000.0}))
    mine = JobInfo(uid="mine", namespace="ns", name="mine", priority=50, min_available=2)
    other = JobInfo(uid="other", namespace="ns", name="other", priority=other_job_priority)
    mine.add_task(gpu_task("mine-low", "mine", 1, node))
    other.add_task(gpu_task("other-0", "other", 1, node))
    pending = gpu_task("mine-new", "mine", 9, None)
    mine.add_task(pending)
    snapshot = ClusterSnapshot(nodes={"n1": node}, jobs={"mine": mine, "other": other})
    gang = PluginOption("gang", flags={"preemptable": False})
    tiers = (Tier((PluginOption("priority"), gang, PluginOption("conformance"))), Tier((PluginOption("predicates"),)))
    result = run_session(
        snapshot, SchedulerConfig(actions=("enqueue", "allocate", "preempt"), tiers=tiers), default_registry()
    )
    expected = "other-0" if other_job_priority == 1 else "mine-low"
    assert [e.task.uid for e in result.evictions] == [expected]
    assert pending.status is TaskStatus.PIPELINED
