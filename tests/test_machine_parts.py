"""Topologies of one machine shape share one copy of the machine (cache/machine_parts.py): the
shared topology must equal the one converted, field by field, and so must every view of it."""

from __future__ import annotations

import attrs
from conftest import load_machine

from numasched.api.idset import IdSet
from numasched.api.topology import (
    CpuInfo,
    DeviceGroup,
    DeviceInfo,
    DeviceLink,
    KubeletPolicies,
    NumaTopology,
    TopologyPolicy,
)
from numasched.cache.cache import Cache
from numasched.cache.convert_topology import numatopology_to_topology
from numasched.cache.events import EventType, ObjectEvent
from numasched.cache.machine_parts import MachineParts
from numasched.cache.machine_shapes import machine_objects

_VIEWS = ("cpu_info", "all_cpus", "cpu_rows", "allocatable_cpus", "cpus_by_numa", "all_numa")


def _topology(name: str, *, reserved: str = "0", policy: TopologyPolicy = TopologyPolicy.NONE) -> NumaTopology:
    """Built anew for every call (no object shared between two calls)."""
    cpus = tuple(CpuInfo(cpu=cpu, core=cpu // 2, socket=0, numa=cpu // 4, l3=0) for cpu in range(8))
    gpus = DeviceGroup("nvidia.com/gpu", (DeviceInfo("g0", 0), DeviceInfo("g1", 1)))
    return NumaTopology(
        node_name=name,
        numa_ids=(0, 1),
        cpus=cpus,
        devices={"nvidia.com/gpu": gpus},
        links={(("nvidia.com/gpu", "g0"), ("nvidia.com/gpu", "g1")): DeviceLink(nvlinks=2)},
        reserved_cpus=IdSet.parse(reserved),
        policies=KubeletPolicies(topology_manager_policy=policy),
        available_cpus=IdSet.parse(f"1-{len(name)}"),
    )


def _views(topology: NumaTopology) -> tuple[object, ...]:
    # Computed on a copy, so that nothing already cached on the topology answers.
    fresh = attrs.evolve(topology)
    return tuple(getattr(fresh, view) for view in _VIEWS)


def test_a_topology_of_a_known_shape_takes_its_parts_and_stays_equal_to_itself() -> None:
    parts = MachineParts()
    first = _topology("n1")
    assert parts.shared(first) is first
    second = _topology("node-2")
    shared = parts.shared(second)
    assert shared == second  # every field, its own name and availability included
    assert shared.node_name == "node-2" and shared.available_cpus == IdSet.parse("1-6")
    assert shared.cpus is first.cpus and shared.devices is first.devices and shared.links is first.links
    assert tuple(getattr(shared, view) for view in _VIEWS) == _views(second)
    assert shared.cpus_by_numa is first.cpus_by_numa


def test_a_topology_of_another_shape_keeps_its_own_parts() -> None:
    parts = MachineParts()
    first = parts.shared(_topology("n1"))
    other_reserved = parts.shared(_topology("n2", reserved="0-1"))
    assert other_reserved.cpus is not first.cpus
    assert other_reserved.allocatable_cpus == IdSet.parse("2-7")
    assert first.allocatable_cpus == IdSet.parse("1-7")
    # The kubelet's policies are part of the shape: a node of another policy is another shape.
    other_policy = parts.shared(_topology("n3", policy=TopologyPolicy.SINGLE_NUMA_NODE))
    assert other_policy.cpus is not first.cpus
    assert other_policy.policies.topology_manager_policy is TopologyPolicy.SINGLE_NUMA_NODE
    assert len(parts) == 3


def test_past_the_limit_the_oldest_shape_is_forgotten() -> None:
    parts = MachineParts(limit=2)
    first = parts.shared(_topology("n1"))
    parts.shared(_topology("n2", reserved="0-1"))
    parts.shared(_topology("n3", reserved="0-2"))
    assert len(parts) == 2
    again = parts.shared(_topology("n4"))
    assert again.cpus is not first.cpus  # held anew: the first shape was forgotten
    assert parts.shared(_topology("n5")).cpus is again.cpus


def test_the_cache_gives_nodes_of_one_machine_one_copy_and_their_own_availability() -> None:
    machine = load_machine("dgx-a100")
    cache = Cache()
    converted: dict[str, NumaTopology] = {}
    for name in ("a", "b", "c"):
        node, numatopology = machine_objects(machine, name)
        cache.apply(ObjectEvent("Node", EventType.ADDED, node))
        cache.apply(ObjectEvent("Numatopology", EventType.ADDED, numatopology))
        converted[name] = numatopology_to_topology(numatopology, lambda message: None)
    snapshot = cache.snapshot()
    topologies = {name: snapshot.nodes[name].topology for name in converted}
    assert not cache.problems
    for name, topology in topologies.items():
        assert topology is not None
        assert topology == converted[name]
        assert tuple(getattr(topology, view) for view in _VIEWS) == _views(converted[name])
    a, b, c = (topologies[name] for name in "abc")
    assert a is not None and b is not None and c is not None
    assert a.cpus is b.cpus is c.cpus and a.links is b.links is c.links
