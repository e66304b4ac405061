"""Nodes alike share admissions: equal topology content (all but the node name) and equal free
resources admit a pod of one shape identically, so the numa-aware plugin asks the providers once
per class of nodes, and says per node what it decided, naming that node and only that node."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import pytest
from conftest import load_machine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numasched.api.hint import ResourceHints, TopologyHint
from numasched.api.idset import IdSet
from numasched.api.node import NodeInfo
from numasched.api.task import TaskInfo
from numasched.api.topology import DeviceLink, KubeletPolicies, NumaTopology, TopologyPolicy, TopologyScope
from numasched.cache.convert_pod import node_to_node_info, pod_to_task
from numasched.cache.convert_topology import numatopology_to_topology
from numasched.cache.machine_shapes import machine_objects
from numasched.plugins.numaaware.admission import Admission, Placement
from numasched.plugins.numaaware.plugin import (
    NumaAwareBuilder,
    NumaAwarePlugin,
    TopologyFingerprint,
    free_key,
    topology_fingerprint,
)
from numasched.plugins.numaaware.providers.base import (
    FreeResources,
    HintRequest,
    ProviderAllocation,
    ProviderError,
)
from numasched.plugins.numaaware.providers.cpu import CpuHintProvider
from numasched.plugins.numaaware.providers.device import DeviceProvider
from numasched.plugins.numaaware.providers.memory import MemoryHintProvider
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import Event
from numasched.scheduler.framework.status import Status

GPU = "nvidia.com/gpu"


def topology_of(
    machine: str,
    name: str,
    policy: TopologyPolicy = TopologyPolicy.RESTRICTED,
    scope: TopologyScope = TopologyScope.CONTAINER,
) -> NumaTopology:
    _, numatopology = machine_objects(load_machine(machine), name, topology_policy=policy, topology_scope=scope)
    return numatopology_to_topology(numatopology)


def node_of(machine: str, name: str, topology: NumaTopology | None = None) -> NodeInfo:
    """A node with its own topology object, named after it, as the cache builds them."""
    node_object, _ = machine_objects(load_machine(machine), name)
    node = node_to_node_info(node_object)
    node.topology = topology or topology_of(machine, name)
    return node


def pod(cpu: str, memory_gib: int, gpus: int, uid: str = "p1") -> TaskInfo:
    requests = {"cpu": cpu, "memory": f"{memory_gib}Gi"}
    if gpus:
        requests[GPU] = str(gpus)
    container = {"name": "main", "image": "example/app:1", "resources": {"requests": requests, "limits": requests}}
    return pod_to_task(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": uid, "namespace": "default", "uid": uid},
            "spec": {"schedulerName": "numasched", "containers": [container]},
            "status": {"phase": "Pending"},
        }
    )


def numa_plugin() -> NumaAwarePlugin:
    return NumaAwarePlugin(Arguments({"weight": 1, "devices": [GPU]}, plugin="numa-aware"))


def count_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the built-in providers' calls; their types stay built-in, so the fast path holds."""
    calls: dict[str, int] = {}

    def counted(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[name] = calls.get(name, 0) + 1
            return method(*args, **kwargs)

        return wrapper

    for provider_type in (CpuHintProvider, DeviceProvider, MemoryHintProvider):
        for method_name in ("hints", "allocate"):
            key = f"{provider_type.__name__}.{method_name}"
            monkeypatch.setattr(provider_type, method_name, counted(key, getattr(provider_type, method_name)))
    return calls


# -- the fingerprint ------------------------------------------------------------------------------


def test_fingerprint_ignores_the_node_name_only() -> None:
    topology = topology_of("dgx1-v100", "alpha-1")
    other = topology_of("dgx1-v100", "beta-2")
    assert other is not topology and other.node_name != topology.node_name
    assert topology_fingerprint(other) == topology_fingerprint(topology)
    assert TopologyFingerprint.of(other) == TopologyFingerprint.of(topology)
    hash(topology_fingerprint(topology))
    first_link = next(iter(topology.links))
    group = topology.devices[GPU]
    changed: dict[str, Any] = {
        "numa_ids": topology.numa_ids[:1],
        "cpus": topology.cpus[:-1],
        "distances": {**topology.distances, 0: {**topology.distances[0], 1: 99}},
        "memory": {"memory": {numa: size // 2 for numa, size in topology.memory["memory"].items()}},
        "devices": {
            GPU: attrs.evolve(group, devices=(attrs.evolve(group.devices[0], healthy=False), *group.devices[1:]))
        },
        "links": {**topology.links, first_link: DeviceLink(nvlinks=7)},
        "reserved_cpus": IdSet([0, 1, 2, 3]),
        "policies": attrs.evolve(topology.policies, cpu_manager_options={"full-pcpus-only": "true"}),
        "cpu_ids_known": False,
        "available_cpus": IdSet([4, 5]),
        "available_devices": {GPU: frozenset({group.devices[0].id})},
        "pods_fingerprint": "pfp0v001aaaaaaaaaaaaaaaa",
    }
    fields = {field.name for field in attrs.fields(NumaTopology)} - {"node_name"}
    assert set(changed) == fields
    for field_name, value in changed.items():
        assert topology_fingerprint(attrs.evolve(topology, **{field_name: value})) != topology_fingerprint(topology), (
            field_name
        )
    assert topology_fingerprint(attrs.evolve(topology, policies=KubeletPolicies())) != topology_fingerprint(topology)


def test_the_builder_keeps_fingerprints_across_sessions() -> None:
    builder = NumaAwareBuilder()
    first = builder(Arguments({"weight": 1}))
    second = builder(Arguments({"weight": 1}))
    assert first.fingerprints is second.fingerprints
    topology = topology_of("hgx-h100", "gamma-3")
    assert first.fingerprints.get(topology) is second.fingerprints.get(topology)


# -- sharing --------------------------------------------------------------------------------------


def test_identical_nodes_share_one_admission(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_calls(monkeypatch)
    plugin = numa_plugin()
    nodes = [node_of("dgx1-v100", "alpha-1"), node_of("dgx1-v100", "beta-2")]
    task = pod("8", 16, 2)
    expected = numa_plugin().place(task, nodes[1])
    assert isinstance(expected, Placement) and expected.allocation is not None
    calls.clear()
    assert [plugin.predicate(task, node).passed for node in nodes] == [True, True]
    # Once for both nodes; the memory provider pins nothing here (no Static memory manager), so the
    # pod's unit plan does not ask it at all.
    assert calls == {"CpuHintProvider.hints": 1, "DeviceProvider.hints": 1}
    scores = plugin.batch_node_order(task, nodes)
    assert scores["alpha-1"] == scores["beta-2"]
    # Completing the admission (the GPU set for link scoring) is shared too.
    assert calls["DeviceProvider.allocate"] == 1
    nodes[1].add_task(task)
    plugin.on_allocate(Event(task, nodes[1]))
    assert task.allocation == expected.allocation
    assert calls["DeviceProvider.allocate"] == 1


def test_each_node_keeps_its_own_topology_and_free_resources_for_on_allocate() -> None:
    plugin = numa_plugin()
    nodes = [node_of("epyc-1s-nps4", "alpha-1"), node_of("epyc-1s-nps4", "beta-2")]
    task = pod("4", 4, 0)
    for node in nodes:
        assert plugin.predicate(task, node).passed
    for node in nodes:
        decision = plugin._pod(task).decided.get(node.name)
        assert decision is not None and decision.topology is node.topology
    # A change on beta-2 after the predicate: on_allocate must notice it on that node only.
    taken = plugin.place(task, nodes[1])
    assert isinstance(taken, Placement) and taken.allocation is not None
    nodes[1].replace_allocation(None, taken.allocation)
    nodes[1].add_task(task)
    plugin.on_allocate(Event(task, nodes[1]))
    assert task.allocation is not None
    assert not (task.allocation.cpus() & taken.allocation.cpus())


def test_refusals_name_no_node_so_equal_nodes_group(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_calls(monkeypatch)
    plugin = numa_plugin()
    nodes = [node_of("dgx1-v100", "alpha-1"), node_of("dgx1-v100", "beta-2")]
    task = pod("8", 16, 6)  # 6 GPUs cannot be on one NUMA node of a DGX-1 (4 per node)
    first, second = (plugin.predicate(task, node) for node in nodes)
    assert not first.passed and not second.passed
    # The framework names the node when it reports; the reason itself is the same on both.
    for status in (first, second):
        assert "alpha-1" not in status.reason and "beta-2" not in status.reason
    assert first == second
    assert calls["DeviceProvider.hints"] == 1
    assert second == numa_plugin().predicate(task, nodes[1])
    assert plugin.predicate(task, nodes[1]) == second
    assert plugin.predicate(task, nodes[0]) == first


def test_a_reason_naming_the_pod_serves_that_pod_only(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_calls(monkeypatch)
    plugin = numa_plugin()
    nodes = [
        node_of("dgx1-v100", name, topology_of("dgx1-v100", name, scope=TopologyScope.POD))
        for name in ("alpha-1", "beta-2")
    ]
    first_pod, second_pod = pod("8", 16, 6, uid="p1"), pod("8", 16, 6, uid="p2")
    refusals = [plugin.predicate(first_pod, node) for node in nodes]
    assert all("default/p1" in status.reason for status in refusals)
    assert calls["DeviceProvider.hints"] == 1
    # Same shape, another pod: the shared reason names p1, so p2 is decided afresh, once.
    other = [plugin.predicate(second_pod, node) for node in nodes]
    assert [status.reason for status in other] == [
        status.reason.replace("default/p1", "default/p2") for status in refusals
    ]
    assert all("default/p1" not in status.reason for status in other)
    assert calls["DeviceProvider.hints"] == 2


@attrs.define
class NamingProvider:
    """A third-party provider whose refusal names the node (topology.node_name)."""

    allocate_calls: int = 0

    @property
    def name(self) -> str:
        return "naming"

    @property
    def resources(self) -> frozenset[str]:
        return frozenset({"example.com/widget"})

    def hints(self, request: HintRequest, topology: NumaTopology, free: FreeResources) -> ResourceHints | None:
        return None

    def allocate(
        self, request: HintRequest, best_hint: TopologyHint, topology: NumaTopology, free: FreeResources
    ) -> ProviderAllocation:
        self.allocate_calls += 1
        raise ProviderError(f"example.com/widget: none left on node {topology.node_name}")


def test_a_reason_naming_the_node_is_not_shared() -> None:
    naming = NamingProvider()
    plugin = NumaAwarePlugin(Arguments({}, plugin="numa-aware"), providers=[naming])
    nodes = [node_of("epyc-1s-nps4", "alpha-1"), node_of("epyc-1s-nps4", "beta-2")]
    task = pod("4", 4, 0)
    first, second = (plugin.predicate(task, node) for node in nodes)
    assert naming.allocate_calls == 2
    assert "alpha-1" in first.reason and "beta-2" not in first.reason
    assert "beta-2" in second.reason and "alpha-1" not in second.reason


def test_a_node_whose_free_state_differs_is_decided_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_calls(monkeypatch)
    plugin = numa_plugin()
    nodes = [node_of("epyc-1s-nps4", name) for name in ("alpha-1", "beta-2", "gamma-3")]
    busy = nodes[1]
    assert busy.topology is not None
    # beta-2 has NUMA node 0's CPUs taken (but one): the pod goes elsewhere there.
    busy.numa_usage.cpus = busy.topology.cpus_by_numa[0] - IdSet([min(busy.topology.cpus_by_numa[0])])
    busy.touch()
    task = pod("4", 4, 0)
    for node in nodes:
        assert plugin.predicate(task, node).passed
    assert calls["CpuHintProvider.hints"] == 2
    plugin.batch_node_order(task, nodes)
    for node in nodes:
        expected = numa_plugin().place(task, node)
        assert isinstance(expected, Placement) and expected.allocation is not None
        probe = pod("4", 4, 0)
        assert plugin.predicate(probe, node).passed
        plugin.on_allocate(Event(probe, node))
        assert probe.allocation == expected.allocation


def test_a_node_that_changes_leaves_its_old_class() -> None:
    plugin = numa_plugin()
    nodes = [node_of("epyc-1s-nps4", "alpha-1"), node_of("epyc-1s-nps4", "beta-2")]
    first = pod("4", 4, 0, uid="p1")
    assert all(plugin.predicate(first, node).passed for node in nodes)
    nodes[0].add_task(first)
    plugin.on_allocate(Event(first, nodes[0]))
    assert first.allocation is not None
    nodes[0].replace_allocation(None, first.allocation)
    second = pod("4", 4, 0, uid="p2")
    for node in nodes:
        assert plugin.predicate(second, node).passed
        plugin.on_allocate(Event(second, node))
        expected = numa_plugin().place(second, node)
        assert isinstance(expected, Placement)
        assert second.allocation == expected.allocation
    # On alpha-1 the second pod does not reuse the first pod's CPUs.
    assert plugin.predicate(second, nodes[0]).passed
    plugin.on_allocate(Event(second, nodes[0]))
    assert second.allocation is not None
    assert not (second.allocation.cpus() & first.allocation.cpus())


# -- the shared plugin answers as one plugin per node would ---------------------------------------

MACHINES = ("dgx1-v100", "epyc-1s-nps4", "pcie-8gpu-2numa")


def random_usage(node: NodeInfo, rng: random.Random) -> None:
    topology = node.topology
    assert topology is not None
    level = rng.choice((0.0, 0.0, 0.3, 0.7))
    node.numa_usage.cpus = IdSet(cpu for cpu in topology.allocatable_cpus if rng.random() < level)
    node.numa_usage.devices = {
        resource: frozenset(device.id for device in group.devices if rng.random() < level)
        for resource, group in topology.devices.items()
    }
    node.touch()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    machine=st.sampled_from(MACHINES),
    policy=st.sampled_from((TopologyPolicy.RESTRICTED, TopologyPolicy.SINGLE_NUMA_NODE, TopologyPolicy.BEST_EFFORT)),
    scope=st.sampled_from(tuple(TopologyScope)),
    shapes=st.lists(
        st.tuples(st.sampled_from(("1", "4", "8", "24")), st.sampled_from((1, 16)), st.sampled_from((0, 1, 2, 4, 6))),
        min_size=1,
        max_size=3,
    ),
    seeds=st.lists(st.integers(0, 2), min_size=4, max_size=4),
)
def test_shared_answers_equal_per_node_answers(
    machine: str, policy: TopologyPolicy, scope: TopologyScope, shapes: Sequence[tuple[str, int, int]], seeds: list[int]
) -> None:
    # Few distinct seeds, so several nodes share a free state and others do not.
    nodes = [
        node_of(machine, f"node-{index}", topology_of(machine, f"node-{index}", policy, scope))
        for index in range(len(seeds))
    ]
    for node, seed in zip(nodes, seeds, strict=True):
        random_usage(node, random.Random(seed))
    plugin = numa_plugin()
    for number, (cpu, memory_gib, gpus) in enumerate(shapes):
        for uid in (f"a{number}", f"b{number}"):
            task = pod(cpu, memory_gib, gpus, uid=uid)
            statuses = [plugin.predicate(task, node) for node in nodes]
            alone = [numa_plugin().predicate(task, node) for node in nodes]
            assert statuses == alone
            passing = [node for node, status in zip(nodes, statuses, strict=True) if status.passed]
            scores = plugin.batch_node_order(task, passing)
            reference = numa_plugin()
            for node in passing:
                assert reference.predicate(task, node).passed
            assert scores == reference.batch_node_order(task, passing)
            for node in passing:
                expected = numa_plugin().place(task, node)
                assert not isinstance(expected, Status)
                # The node does not keep the task: on_allocate only decides its ids.
                plugin.on_allocate(Event(task, node))
                assert task.allocation == expected.allocation
                # on_allocate dropped this node's decision; decide it again for the next node.
                plugin.predicate(task, node)


def test_pods_alike_share_a_class_only_within_one_set_of_admission_tables() -> None:
    # The engine keeps score parts per pod class, and a part holds ids only its tables read (its
    # link quality's): plugins with other tables must declare other classes.
    first, second = numa_plugin(), numa_plugin()
    assert first.tables is not second.tables
    assert first.equivalence_key(pod("4", 8, 2, uid="a")) == first.equivalence_key(pod("4", 8, 2, uid="b"))
    assert first.equivalence_key(pod("4", 8, 2, uid="a")) != second.equivalence_key(pod("4", 8, 2, uid="a"))
    # Tables hand out one id per quality, 0 for none reported, and read it back.
    tables = first.tables
    assert tables.quality_id(None) == 0
    ids = [tables.quality_id(quality) for quality in ((3, 1, 4), (0, 0, 0), (3, 1, 4))]
    assert ids[0] == ids[2] != ids[1] and 0 not in ids
    assert [tables.qualities_by_id[quality_id] for quality_id in ids] == [(3, 1, 4), (0, 0, 0), (3, 1, 4)]


def test_a_device_state_is_named_by_the_devices_free_whatever_the_cpus() -> None:
    # Link quality is kept per device state (the free and unknown devices of the resources
    # ranked), named by a small id per node class: classes that differ only in their CPUs share
    # it, other devices free or other resources ranked name another.
    nic = "rdma/hca"
    plugin = NumaAwarePlugin(Arguments({"weight": 1, "devices": [GPU, nic]}, plugin="numa-aware"))
    node = node_of("hgx-h100", "gamma-3")
    task = pod("8", 64, 1)
    admission = plugin.admit(task, node)
    assert isinstance(admission, Admission)
    decision = plugin._pod(task).decided[node.name]
    class_id, shape = decision.equivalence
    gpus_only = plugin._device_state(decision, (GPU,))
    assert gpus_only is not None and gpus_only[1:] == (shape, admission.hint)
    # The same class asked for another set of resources: another state.
    with_nics = plugin._device_state(decision, (GPU, nic))
    assert with_nics is not None and with_nics[0] != gpus_only[0]
    assert plugin._device_state(decision, (GPU,)) == gpus_only

    def in_class(free: FreeResources) -> Any:
        fingerprint = plugin.fingerprints.get(decision.topology)
        other_class = plugin.tables.class_id(fingerprint, free_key(free))
        assert other_class != class_id
        return attrs.evolve(decision, free=free, equivalence=(other_class, shape))

    free = decision.free
    fewer_cpus = attrs.evolve(free, cpus=free.cpus - IdSet([min(free.cpus)]))
    assert plugin._device_state(in_class(fewer_cpus), (GPU,)) == gpus_only
    assert plugin._device_state(in_class(fewer_cpus), (GPU, nic)) == with_nics
    one_gpu_taken = attrs.evolve(free, devices={**free.devices, GPU: free.devices[GPU][1:]})
    taken = plugin._device_state(in_class(one_gpu_taken), (GPU,))
    assert taken is not None and taken[0] not in (gpus_only[0], with_nics[0])
    held_unknown = attrs.evolve(free, unknown={GPU: 1}, unknown_pods={GPU: ("default/other",)})
    unknown = plugin._device_state(in_class(held_unknown), (GPU,))
    assert unknown is not None and unknown[0] not in (gpus_only[0], taken[0])
