"""The annotations a binding carries: numasched.io/allocation and volcano.sh/topology-decision,
checked against expectations written out by hand."""

from __future__ import annotations

import json

import attrs
from hypothesis import given
from hypothesis import strategies as st

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


_DEVICE_NUMA = {"g0": 0, "g1": 1}


def _expected_decision(allocation: PodAllocation) -> str:
    """The decision as json.dumps writes it, worked out per CPU and device: CPUs 0-3 are on NUMA
    node 0 and 4-7 on node 1 (others on none), g0 on 0, g1 on 1, any other device on none."""
    cpus: dict[str, set[int]] = {}
    devices: dict[str, dict[str, list[str]]] = {}
    for container in allocation.containers:
        for numa_id in container.numa.ids() if container.numa is not None else ():
            devices.setdefault(str(numa_id), {})
        for cpu in container.cpuset:
            cpus.setdefault(str(cpu // 4) if cpu < 8 else "unknown", set()).add(cpu)
        for resource, ids in container.devices.items():
            for device in ids:
                on = _DEVICE_NUMA.get(device) if resource == "nvidia.com/gpu" else None
                devices.setdefault("unknown" if on is None else str(on), {}).setdefault(resource, []).append(device)
    decision: dict[str, dict[str, str]] = {}
    for numa in set(cpus) | set(devices):
        entry = {resource: ",".join(ids) for resource, ids in devices.get(numa, {}).items()}
        if numa in cpus:
            entry["cpu"] = IdSet(cpus[numa]).format()
        decision[numa] = entry
    return json.dumps({"numa": decision}, sort_keys=True, separators=(",", ":"))


_containers = st.builds(
    ContainerAllocation,
    name=st.just(""),
    cpuset=st.frozensets(st.integers(0, 11), max_size=6).map(IdSet),
    numa=st.none() | st.frozensets(st.sampled_from([0, 1, 2, 10]), max_size=3).map(NumaMask.from_ids),
    devices=st.dictionaries(
        st.sampled_from(["nvidia.com/gpu", "rdma/hca"]),
        st.lists(st.sampled_from(["g0", "g1", "gx", 'q"uote', "b\\s", "ü"]), max_size=3, unique=True).map(tuple),
    ),
)


@given(st.lists(_containers, min_size=1, max_size=3))
def test_the_decision_text_is_what_json_dumps_writes_for_the_cpus_and_devices_per_numa_node(
    containers: list[ContainerAllocation],
) -> None:
    allocation = PodAllocation(tuple(attrs.evolve(c, name=f"c{i}") for i, c in enumerate(containers)))
    if allocation.is_empty() and not any(c.numa for c in allocation.containers):
        return
    assert binding_annotations(_task(allocation), _node())[DECISION] == _expected_decision(allocation)


def _node_where(name: str, cpu_numa: dict[int, int], gpu_numa: dict[str, int | None]) -> NodeInfo:
    cpus = tuple(CpuInfo(cpu=cpu, core=cpu, socket=0, numa=numa, l3=0) for cpu, numa in cpu_numa.items())
    gpus = DeviceGroup("nvidia.com/gpu", tuple(DeviceInfo(gpu, numa) for gpu, numa in gpu_numa.items()))
    topology = NumaTopology(node_name=name, numa_ids=(0, 1), cpus=cpus, devices={"nvidia.com/gpu": gpus})
    return NodeInfo(name=name, topology=topology)


def test_one_allocation_bound_on_nodes_laid_out_differently_gets_each_nodes_decision() -> None:
    # The decision text is kept per allocation object: it must still follow each node's layout.
    allocation = PodAllocation(
        (ContainerAllocation("a", IdSet.parse("0-1"), NumaMask.of(0), {"nvidia.com/gpu": ("g0",)}),)
    )
    alike = _node_where("alike", {0: 0, 1: 0, 2: 1, 3: 1}, {"g0": 0})
    gpu_elsewhere = _node_where("gpu-elsewhere", {0: 0, 1: 0, 2: 1, 3: 1}, {"g0": 1})
    gpu_unknown = _node_where("gpu-unknown", {0: 0, 1: 0, 2: 1, 3: 1}, {"g0": None})
    cpus_split = _node_where("cpus-split", {0: 0, 1: 1, 2: 0, 3: 1}, {"g0": 0})
    expected = {
        "alike": {"numa": {"0": {"cpu": "0-1", "nvidia.com/gpu": "g0"}}},
        "gpu-elsewhere": {"numa": {"0": {"cpu": "0-1"}, "1": {"nvidia.com/gpu": "g0"}}},
        "gpu-unknown": {"numa": {"0": {"cpu": "0-1"}, "unknown": {"nvidia.com/gpu": "g0"}}},
        "cpus-split": {"numa": {"0": {"cpu": "0", "nvidia.com/gpu": "g0"}, "1": {"cpu": "1"}}},
    }
    # Twice over, so that each node is also asked after the others filled the allocation's texts.
    for node in (alike, gpu_elsewhere, gpu_unknown, cpus_split, cpus_split, gpu_unknown, gpu_elsewhere, alike):
        annotations = binding_annotations(_task(allocation), node)
        assert json.loads(annotations[DECISION]) == expected[node.name], node.name


def test_an_allocation_naming_nothing_is_not_carried_and_one_naming_a_numa_node_is() -> None:
    nothing = PodAllocation((ContainerAllocation("a", IdSet(), None), ContainerAllocation("b", IdSet(), None)))
    assert binding_annotations(_task(nothing), _node()) == {}
    assert binding_annotations(_task(nothing), _node()) == {}  # asked again, from what was kept
    numa_only = PodAllocation(
        (ContainerAllocation("a", IdSet(), None), ContainerAllocation("b", IdSet(), NumaMask.of(1)))
    )
    assert json.loads(binding_annotations(_task(numa_only), _node())[DECISION]) == {"numa": {"1": {}}}
