"""free_after: a node's free resources after one allocation joins its ledger, derived from those
before (NodeInfo.numa_step), must be what free_resources reads from the node's tasks afresh."""

from __future__ import annotations

from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st
from test_numa_plugin_admission import container_object, machine_node, pod

from numasched.api.allocation import ContainerAllocation, PodAllocation
from numasched.api.idset import IdSet
from numasched.api.node import NodeInfo, UnknownHolder
from numasched.api.numamask import NumaMask
from numasched.api.resource import Resource
from numasched.api.task import TaskInfo
from numasched.plugins.numaaware.plugin import NumaAwarePlugin
from numasched.plugins.numaaware.providers.base import FreeResources, free_after, free_resources
from numasched.scheduler.framework.arguments import Arguments

GPU = "nvidia.com/gpu"
GIB = 1 << 30


def new_task(uid: str) -> TaskInfo:
    request = Resource(milli_cpu=1000, memory=1e9)
    return TaskInfo(uid=uid, namespace="ns", name=uid, job_id=uid, resreq=request, init_resreq=request.clone())


@st.composite
def allocations(draw: st.DrawFn) -> PodAllocation:
    """One to two containers holding some CPUs, GPUs and memory of the dgx-a100 fixture; ids may
    already be held (a ledger takes them again without complaint), and memory may name a NUMA node
    or a resource the topology does not have."""
    containers = []
    for index in range(draw(st.integers(1, 2))):
        cpus = draw(st.sets(st.integers(0, 255), max_size=12))
        gpus = draw(st.lists(st.sampled_from([str(i) for i in range(8)]), unique=True, max_size=3))
        memory: dict[str, dict[int, int]] = {}
        if draw(st.booleans()):
            memory["memory"] = draw(
                st.dictionaries(st.integers(0, 9), st.integers(0, 600).map(lambda g: g * GIB), max_size=3)
            )
        if draw(st.booleans()):
            memory["hugepages-1Gi"] = {0: GIB}
        containers.append(
            ContainerAllocation(
                name=f"c{index}",
                cpuset=IdSet(cpus),
                devices={GPU: tuple(gpus)} if gpus else {},
                memory=memory,
            )
        )
    return PodAllocation(tuple(containers))


def place(node: NodeInfo, uid: str, allocation: PodAllocation) -> None:
    """As Statement._place does: the task joins holding nothing, then its allocation is decided."""
    task = new_task(uid)
    node.add_task(task)
    task.allocation = allocation
    node.replace_allocation(None, allocation)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(allocations(), st.sampled_from(["place", "place", "remove", "unknown"])), max_size=12))
def test_free_after_one_allocation_is_what_the_node_reads_afresh(steps: list[tuple[PodAllocation, str]]) -> None:
    node = machine_node("dgx-a100", "n1")
    placed: list[str] = []
    for number, (allocation, action) in enumerate(steps):
        before = free_resources(node)
        generation = node.numa_generation
        if action == "remove" and placed:
            node.remove_task(node.tasks[placed.pop(0)])
            assert node.numa_step is None
            continue
        if action == "unknown" and placed:
            node.set_unknown_holder(placed[-1], UnknownHolder(f"ns/{placed[-1]}", {GPU: 1}))
            assert node.numa_step is None
            continue
        uid = f"t{number}"
        place(node, uid, allocation)
        placed.append(uid)
        step = node.numa_step
        assert step is not None and step.before == generation and step.after == node.numa_generation
        assert step.added is allocation
        assert free_after(before, allocation) == free_resources(node)


def test_the_memory_manager_groups_and_the_clamp_at_zero() -> None:
    node = machine_node("dgx-a100", "n1")
    before = free_resources(node)
    total = dict(before.memory["memory"])
    allocation = PodAllocation((ContainerAllocation("main", memory={"memory": {0: total[0] + GIB, 1: GIB}}),))
    place(node, "big", allocation)
    after = free_after(before, allocation)
    assert after is not None and after == free_resources(node)
    assert after.memory["memory"][0] == 0 and after.memory["memory"][1] == total[1] - GIB
    assert after.memory_groups == frozenset({NumaMask.of(0, 1)})


def test_what_cannot_be_derived_is_read_again() -> None:
    node = machine_node("dgx-a100", "n1")
    before = free_resources(node)
    negative = PodAllocation((ContainerAllocation("main", memory={"memory": {0: -GIB}}),))
    assert free_after(before, negative) is None
    with_dra: Any = object()
    assert free_after(attrs.evolve(before, dra=with_dra), PodAllocation()) is None


def test_a_replaced_allocation_or_a_clone_records_no_step() -> None:
    node = machine_node("dgx-a100", "n1")
    first = PodAllocation((ContainerAllocation("main", cpuset=IdSet([4, 5])),))
    place(node, "a", first)
    assert node.clone().numa_step is None
    second = PodAllocation((ContainerAllocation("main", cpuset=IdSet([6])),))
    node.tasks["a"].allocation = second
    node.replace_allocation(first, second)
    assert node.numa_step is None


def test_nodes_of_one_class_given_one_allocation_share_the_state_after_and_admit_as_read_afresh() -> None:
    shared = NumaAwarePlugin(Arguments({"devices": [GPU]}, plugin="numa-aware"))
    task = pod([container_object("main", "8", 16, 2, 0, guaranteed=True)], uid="probe")
    nodes = [machine_node("dgx-a100", f"n{i}") for i in range(4)]
    for node in nodes:
        assert shared.predicate(task, node).passed
    # One completed admission's allocation object, placed on every node of the class (as the
    # plugin's memo of completed admissions does); then another pod asks each node again.
    allocation = PodAllocation(
        (ContainerAllocation("main", cpuset=IdSet(range(0, 16)), devices={GPU: ("0", "1")}, memory={}),)
    )
    other = PodAllocation((ContainerAllocation("main", cpuset=IdSet(range(16, 32)), devices={GPU: ("6", "7")}),))
    for number, node in enumerate(nodes):
        # The last node of the class gets another allocation: it has a successor of its own.
        place(node, f"placed-{number}", allocation if number < 3 else other)
    second = pod([container_object("main", "8", 16, 6, 0, guaranteed=True)], uid="second")
    answers = [shared.predicate(second, node) for node in nodes]
    assert len(shared.tables.successors) == 2
    # The oracle: a plugin with tables of its own, reading each node afresh.
    for node, answer in zip(nodes, answers, strict=True):
        fresh = NumaAwarePlugin(Arguments({"devices": [GPU]}, plugin="numa-aware"))
        assert answer == fresh.predicate(second, node)
        assert shared._admissions[node.name].free == free_resources(node)


def test_free_after_names_every_field_of_free_resources() -> None:
    # free_after builds FreeResources field by field (attrs.evolve costs more than the rest of it):
    # a field added to FreeResources must be carried there too, and this fails until it is.
    carried = {"cpus", "devices", "memory", "memory_groups", "unknown", "unknown_pods", "dra"}
    assert {field.name for field in attrs.fields(FreeResources)} == carried
