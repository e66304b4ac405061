"""The annotations a binding carries: numasched.io/allocation and volcano.sh/topology-decision,
checked against expectations written out by hand."""

from __future__ import annotations

import json

from numasched.api.allocation import ALLOCATION_ANNOTATION, ContainerAllocation, PodAllocation, allocation_to_json
from numasched.api.idset import IdSet
from numasched.api.node import NodeInfo
from numasched.api.numamask import NumaMask
from numasched.api.resource import Resource
from numasched.api.task import TaskInfo
from numasched.api.topology import CpuInfo, DeviceGroup, DeviceInfo, NumaTopology
from numasched.cache.binder import binding_annotations

DECISION = "volcano.sh/topology-decision"


def _node() -> NodeInfo:
    """Two NUMA nodes of four CPUs (0-3 on NUMA 0, 4-7 on NUMA 1); GPU g0 on 0, g1 on 1, gx on none."""
    cpus = tuple(CpuInfo(cpu=cpu, core=cpu, socket=0, numa=cpu // 4, l3=0) for cpu in range(8))
    gpus = DeviceGroup("nvidia.com/gpu", (DeviceInfo("g0", 0), DeviceInfo("g1", 1), DeviceInfo("gx", None)))
    topology = NumaTopology(node_name="n1", numa_ids=(0, 1), cpus=cpus, devices={"nvidia.com/gpu": gpus})
    return NodeInfo(name="n1", topology=topology)


def _task(allocation: PodAllocation) -> TaskInfo:
    task = TaskInfo(uid="u1", namespace="default", name="p", job_id="j", resreq=Resource(), init_resreq=Resource())
    task.allocation = allocation
    return task


def test_cpus_are_split_by_their_numa_node_wherever_the_chosen_nodes_are() -> None:
    # Best-effort: the container was given NUMA node 1, yet holds CPUs of node 0 too, and CPU 9,
    # which the topology does not list.
    allocation = PodAllocation(
        (
            ContainerAllocation("a", IdSet.parse("2-5,9"), NumaMask.of(1), {"nvidia.com/gpu": ("g1", "gx")}),
            ContainerAllocation("b", IdSet.parse("0"), NumaMask.of(0)),
        )
    )
    annotations = binding_annotations(_task(allocation), _node())
    assert json.loads(annotations[DECISION]) == {
        "numa": {
            "0": {"cpu": "0,2-3"},
            "1": {"cpu": "4-5", "nvidia.com/gpu": "g1"},
            "unknown": {"cpu": "9", "nvidia.com/gpu": "gx"},
        }
    }
    assert json.loads(annotations[ALLOCATION_ANNOTATION]) == {
        "containers": {
            "a": {"cpuset": "2-5,9", "numa": [1], "devices": {"nvidia.com/gpu": ["g1", "gx"]}},
            "b": {"cpuset": "0", "numa": [0]},
        }
    }


def test_a_chosen_numa_node_without_ids_is_part_of_the_decision() -> None:
    allocation = PodAllocation((ContainerAllocation("a", IdSet.parse("4"), NumaMask.of(0, 1)),))
    annotations = binding_annotations(_task(allocation), _node())
    assert json.loads(annotations[DECISION]) == {"numa": {"0": {}, "1": {"cpu": "4"}}}


def test_the_allocation_text_is_kept_per_allocation_object_and_equals_a_fresh_one() -> None:
    allocation = PodAllocation((ContainerAllocation("a", IdSet.parse("1-2"), NumaMask.of(0)),))
    first = binding_annotations(_task(allocation), _node())[ALLOCATION_ANNOTATION]
    again = binding_annotations(_task(allocation), _node())[ALLOCATION_ANNOTATION]
    assert first is again
    assert first == allocation_to_json(allocation)
    other = PodAllocation((ContainerAllocation("a", IdSet.parse("5"), NumaMask.of(1)),))
    assert binding_annotations(_task(other), _node())[ALLOCATION_ANNOTATION] == allocation_to_json(other)
