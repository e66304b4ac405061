"""preempt on a NUMA machine: the victims are the fewest, in victim order, whose departure lets the
kubelet admit the preemptor; judged by hack/kubelet_model.py, an oracle that shares no code with
the numa-aware plugin."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import combinations
from typing import Any

import pytest
from conftest import load_hack_module, load_machine

from numasched.api.allocation import ContainerAllocation, PodAllocation
from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.numamask import NumaMask
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo, TaskStatus
from numasched.api.topology import NumaTopology, TopologyPolicy
from numasched.cache.convert_pod import node_to_node_info, pod_to_task
from numasched.cache.convert_topology import numatopology_to_topology
from numasched.cache.machine_shapes import machine_objects
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.loop import run_session

kubelet = load_hack_module("kubelet_model")

GPU = "nvidia.com/gpu"
MACHINE = "pcie-8gpu-2numa"
# GPUs 0-3 sit on NUMA node 0, 4-7 on NUMA node 1.
GPU_NUMA = {str(gpu): 0 if gpu < 4 else 1 for gpu in range(8)}


def topology() -> NumaTopology:
    _, numatopology = machine_objects(load_machine(MACHINE), "n1", topology_policy=TopologyPolicy.SINGLE_NUMA_NODE)
    return numatopology_to_topology(numatopology)


def pod_object(name: str, requests: dict[str, str], priority: int) -> dict[str, Any]:
    container = {"name": "main", "image": "example/app:1", "resources": {"requests": requests, "limits": requests}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team", "uid": name},
        "spec": {"schedulerName": "numasched", "priority": priority, "containers": [container]},
        "status": {"phase": "Pending"},
    }


def lone_job(task: TaskInfo, priority: int) -> JobInfo:
    job = JobInfo(uid=task.uid, namespace=task.namespace, name=task.name, priority=priority)
    task.job_id = job.uid
    job.add_task(task)
    return job


def running_gpu_pod(node: NodeInfo, name: str, gpu: str, priority: int) -> TaskInfo:
    task = pod_to_task(pod_object(name, {"cpu": "1", "memory": "1Gi", GPU: "1"}, priority))
    task.priority = priority
    task.status = TaskStatus.RUNNING
    task.node_name = node.name
    # Only the GPU is pinned: 1 CPU of a shared pool, a GPU the device plugin chose.
    task.allocation = PodAllocation(
        (ContainerAllocation("main", numa=NumaMask.of(GPU_NUMA[gpu]), devices={GPU: (gpu,)}),)
    )
    node.add_task(task)
    return task


def scenario(victim_gpus: Sequence[tuple[str, str, int]]) -> tuple[ClusterSnapshot, TaskInfo]:
    node_object, _ = machine_objects(load_machine(MACHINE), "n1")
    node = node_to_node_info(node_object)
    node.topology = topology()
    jobs = [lone_job(running_gpu_pod(node, name, gpu, priority), priority) for name, gpu, priority in victim_gpus]
    preemptor = pod_to_task(pod_object("trainer", {"cpu": "4", "memory": "8Gi", GPU: "4"}, 1000))
    preemptor.priority = 1000
    jobs.append(lone_job(preemptor, 1000))
    return ClusterSnapshot(nodes={"n1": node}, jobs={job.uid: job for job in jobs}), preemptor


def config() -> SchedulerConfig:
    # As Volcano ships it: gang does not vote on preemption victims (its vote would protect every
    # job at its minimum, so single pods could never be preempted).
    gang = PluginOption("gang", flags={"preemptable": False})
    first = Tier((PluginOption("priority"), gang, PluginOption("conformance")))
    second = Tier((PluginOption("predicates"), PluginOption("numa-aware")))
    return SchedulerConfig(actions=("enqueue", "allocate", "preempt"), tiers=(first, second))


def kubelet_admits(snapshot: ClusterSnapshot, preemptor: TaskInfo, gone: set[str]) -> bool:
    """Whether the node's kubelet admits the preemptor once the pods named in `gone` have left."""
    node = snapshot.nodes["n1"]
    assert node.topology is not None
    state = kubelet.NodeState.empty(kubelet.node_from_topology(node.topology))
    for task in node.tasks.values():
        if task.uid in gone or task.allocation is None or task.uid == preemptor.uid:
            continue
        clashes = state.take(
            task.allocation.cpus(), {r: task.allocation.devices(r) for r in task.allocation.resources()}
        )
        assert clashes == []
    return bool(kubelet.admit(state, kubelet.pod_from_task(preemptor)).admitted)


# Victim order is the lowest priority first: a (NUMA 0), b (NUMA 1), c (NUMA 0), d (NUMA 1). Two GPUs
# are free on each NUMA node; the 4-GPU single-numa-node pod needs one NUMA node wholly free.
INTERLEAVED = [("a", "0", 1), ("b", "4", 2), ("c", "1", 3), ("d", "5", 4)]


def test_evicts_only_pods_on_one_numa_node_each_necessary() -> None:
    snapshot, preemptor = scenario(INTERLEAVED)
    result = run_session(snapshot, config(), default_registry())
    assert result.bind_requests == ()
    evicted = {eviction.task.uid for eviction in result.evictions}
    assert evicted == {"a", "c"}
    assert all(eviction.node_name == "n1" for eviction in result.evictions)
    assert all("preempted by team/trainer" in eviction.reason for eviction in result.evictions)
    assert preemptor.status is TaskStatus.PIPELINED and preemptor.node_name == "n1"
    fresh, fresh_preemptor = scenario(INTERLEAVED)
    assert kubelet_admits(fresh, fresh_preemptor, evicted)
    for victim in evicted:
        assert not kubelet_admits(fresh, fresh_preemptor, evicted - {victim}), f"{victim} was not needed"
    # The topology-blind choice, the two lowest victims, frees the GPUs on both NUMA nodes: no use.
    assert not kubelet_admits(fresh, fresh_preemptor, {"a", "b"})


@pytest.mark.parametrize(
    "victims",
    [
        INTERLEAVED,
        [("a", "4", 1), ("b", "0", 2), ("c", "5", 3), ("d", "1", 4)],
        [("a", "0", 1), ("b", "1", 2), ("c", "2", 3), ("d", "4", 4), ("e", "5", 5), ("f", "6", 6)],
        [("a", "0", 1), ("b", "4", 2), ("c", "5", 3), ("d", "6", 4), ("e", "1", 5), ("f", "2", 6)],
    ],
)
def test_every_victim_is_necessary_and_the_kubelet_admits_after(victims: list[tuple[str, str, int]]) -> None:
    snapshot, _ = scenario(victims)
    result = run_session(snapshot, config(), default_registry())
    evicted = {eviction.task.uid for eviction in result.evictions}
    fresh, fresh_preemptor = scenario(victims)
    assert evicted, "a preemption was possible"
    assert kubelet_admits(fresh, fresh_preemptor, evicted)
    for victim in evicted:
        assert not kubelet_admits(fresh, fresh_preemptor, evicted - {victim}), f"{victim} was not needed"
    # No smaller set would do: every set of one fewer victims fails under the oracle.
    names = [name for name, _, _ in victims]
    for smaller in combinations(names, len(evicted) - 1):
        assert not kubelet_admits(fresh, fresh_preemptor, set(smaller))


def test_higher_priority_pods_are_not_victims() -> None:
    """The same layout with the preemptor below every running pod: nothing is evicted."""
    snapshot, preemptor = scenario([(name, gpu, priority + 2000) for name, gpu, priority in INTERLEAVED])
    result = run_session(snapshot, config(), default_registry())
    assert result.evictions == () or list(result.evictions) == []
    assert preemptor.status is TaskStatus.PENDING
