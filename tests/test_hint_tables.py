"""The CPU and device providers' hints (vector operations over each node shape's mask table,
providers/mask_table.py) against the independent kubelet model (hack/kubelet_model.py), for every
fixture machine, random free CPUs and devices and random requests."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
from conftest import load_hack_module, load_machine
from hypothesis import given, settings
from hypothesis import strategies as st

from numasched.api.hint import TopologyHint
from numasched.api.idset import IdSet
from numasched.api.topology import NumaTopology, TopologyPolicy
from numasched.cache.convert_topology import numatopology_to_topology
from numasched.cache.machine_shapes import machine_objects
from numasched.plugins.numaaware.providers.cpu import CpuNodeIndex, cpu_hint_table
from numasched.plugins.numaaware.providers.device import DeviceGroupIndex, device_hint_table

km: Any = load_hack_module("kubelet_model")

MACHINES = ("dgx-a100", "dgx1-v100", "epyc-1s-nps4", "hgx-h100", "pcie-8gpu-2numa")


def topology_of(machine: str) -> NumaTopology:
    _, numatopology = machine_objects(load_machine(machine), machine, topology_policy=TopologyPolicy.RESTRICTED)
    return numatopology_to_topology(numatopology)


TOPOLOGIES = {machine: topology_of(machine) for machine in MACHINES}


def as_masks(hints: Any) -> list[tuple[tuple[int, ...] | None, bool]] | None:
    if hints is None:
        return None
    result = []
    for hint in hints:
        affinity = hint.affinity
        if isinstance(hint, TopologyHint):
            ids = None if affinity is None else tuple(affinity.ids())
        else:
            ids = None if affinity is None else tuple(sorted(affinity))
        result.append((ids, hint.preferred))
    return result


@pytest.mark.parametrize("machine", MACHINES)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_cpu_hints_are_the_kubelets(machine: str, data: st.DataObject) -> None:
    topology = TOPOLOGIES[machine]
    index = CpuNodeIndex.of(topology)
    allocatable = sorted(topology.allocatable_cpus)
    free = data.draw(st.sets(st.sampled_from(allocatable)), label="free")
    request = data.draw(st.integers(min_value=1, max_value=len(allocatable) + 2), label="request")
    ours = cpu_hint_table(topology, IdSet(free), request, index=index)
    state = km.NodeState(km.node_from_topology(topology), set(free), {})
    assert as_masks(ours) == as_masks(km.cpu_hints(state, request))
    # Asked again (from the counts table), the very same tuple.
    assert cpu_hint_table(topology, IdSet(free), request, index=index) is ours


@pytest.mark.parametrize("machine", MACHINES)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_cpu_hints_count_only_allocatable_cpus_whatever_is_reserved(machine: str, data: st.DataObject) -> None:
    """Free CPUs given with reserved ones and ids the machine does not have, CPUs held by pods whose
    ids are unknown, one index (and its table of answers by counts) shared by several states and by
    topologies of other reserved sets, as the provider shares it by CPU rows: the masks are the
    kubelet's for request + unknown free allocatable CPUs, preferred as the kubelet's for request."""
    base = TOPOLOGIES[machine]
    index = CpuNodeIndex.of(base)
    every = sorted(base.all_cpus)
    reserved_sets = [IdSet(), IdSet(every[:2])]
    for _ in range(4):
        reserved_sets.append(IdSet(data.draw(st.sets(st.sampled_from(every), max_size=6), label="reserved")))
        free = data.draw(st.sets(st.sampled_from([*every, every[-1] + 1, every[-1] + 9])), label="free")
        request = data.draw(st.integers(min_value=1, max_value=len(every) + 2), label="request")
        unknown = data.draw(st.integers(min_value=0, max_value=3), label="unknown")
        # The same free set, request and holdings on topologies of other reserved sets too.
        for reserved in reserved_sets[-3:]:
            topology = attrs.evolve(base, reserved_cpus=reserved)
            ours = cpu_hint_table(topology, IdSet(free), request, index=index, unknown=unknown)
            node = km.node_from_topology(topology)
            state = km.NodeState(node, set(free) & set(topology.allocatable_cpus), {})
            narrowest = min(
                (len(mask) for mask in km.all_masks(node.numa_ids) if len(node.cpus_in(mask)) >= request),
                default=len(node.numa_ids),
            )
            fitting = km.cpu_hints(state, request + unknown)
            expected = [(ids, ids is not None and len(ids) == narrowest) for ids, _ in as_masks(fitting) or []]
            assert as_masks(ours) == expected


@pytest.mark.parametrize("machine", [m for m in MACHINES if TOPOLOGIES[m].devices])
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_device_hints_are_the_kubelets(machine: str, data: st.DataObject) -> None:
    topology = TOPOLOGIES[machine]
    resource = data.draw(st.sampled_from(sorted(topology.devices)), label="resource")
    group = topology.devices[resource]
    if group.partitions:
        return
    ids = [device.id for device in group.devices if device.healthy]
    free = data.draw(st.lists(st.sampled_from(ids), unique=True), label="free")
    request = data.draw(st.integers(min_value=1, max_value=len(ids) + 1), label="request")
    index = DeviceGroupIndex.of(group, topology.numa_ids)
    ours = device_hint_table(group, topology.numa_ids, tuple(free), request, index=index)
    state = km.NodeState(km.node_from_topology(topology), set(), {resource: set(free)})
    theirs = km.device_hints(state, resource, request)
    assert as_masks(ours) == as_masks(theirs)
