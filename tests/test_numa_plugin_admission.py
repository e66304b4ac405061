"""Admission without allocation and the reuse of the predicate's decision in on_allocate.

The property tests compare admission.admit_pod (hints and merge where that is exact) with the
full placement, admission.place_pod, on the fixture machines with random free resources, kubelet
policies and pods: the verdict, the reason, the NUMA span and (once completed) the ids agree.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import pytest
from conftest import load_machine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numasched.api.allocation import ContainerAllocation, PodAllocation
from numasched.api.hint import ResourceHints, TopologyHint
from numasched.api.idset import IdSet
from numasched.api.node import NodeInfo
from numasched.api.numamask import NumaMask
from numasched.api.task import TaskInfo
from numasched.api.topology import NumaTopology, TopologyPolicy, TopologyScope
from numasched.cache.convert_pod import node_to_node_info, pod_to_task
from numasched.cache.convert_topology import numatopology_to_topology
from numasched.cache.machine_shapes import machine_objects
from numasched.plugins.numaaware.admission import (
    Admission,
    Decides,
    Placement,
    UnitPlan,
    admit_pod,
    allocate_admitted,
    decision_unit,
    place_pod,
    unit_plan,
)
from numasched.plugins.numaaware.plugin import NumaAwarePlugin
from numasched.plugins.numaaware.providers.base import (
    FreeResources,
    HintProvider,
    HintRequest,
    ProviderAllocation,
    free_resources,
)
from numasched.plugins.numaaware.providers.cpu import CpuHintProvider
from numasched.plugins.numaaware.providers.device import DeviceProvider, device_provider_factory
from numasched.plugins.numaaware.providers.memory import MemoryHintProvider
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import Event

GPU = "nvidia.com/gpu"
NIC = "rdma/hca"
GIB = 1 << 30
MACHINES = ("dgx1-v100", "epyc-1s-nps4", "hgx-h100", "pcie-8gpu-2numa")
CPU_OPTIONS: tuple[Mapping[str, str], ...] = (
    {},
    {"full-pcpus-only": "true"},
    {"distribute-cpus-across-numa": "true"},
    {"full-pcpus-only": "true", "distribute-cpus-across-numa": "true"},
)


# -- machines and pods ------------------------------------------------------------------------------


@functools.cache
def machine_topology(
    machine: str,
    policy: TopologyPolicy = TopologyPolicy.RESTRICTED,
    scope: TopologyScope = TopologyScope.CONTAINER,
    cpu_options: tuple[tuple[str, str], ...] = (),
    memory_manager: str = "None",
) -> NumaTopology:
    _, numatopology = machine_objects(load_machine(machine), machine, topology_policy=policy, topology_scope=scope)
    policies = numatopology["spec"]["policies"]
    if cpu_options:
        policies["CPUManagerPolicyOptions"] = ",".join(f"{key}={value}" for key, value in cpu_options)
    policies["MemoryManagerPolicy"] = memory_manager
    return numatopology_to_topology(numatopology)


def machine_node(machine: str, name: str, topology: NumaTopology | None = None) -> NodeInfo:
    node_object, _ = machine_objects(load_machine(machine), name)
    node = node_to_node_info(node_object)
    node.topology = topology or machine_topology(machine)
    return node


def container_object(
    name: str, cpu: str, memory_gib: int, gpus: int, nics: int, *, guaranteed: bool, sidecar: bool = False
) -> dict[str, Any]:
    requests: dict[str, str] = {}
    if cpu != "0":
        requests["cpu"] = cpu
    if memory_gib:
        requests["memory"] = f"{memory_gib}Gi"
    if gpus:
        requests[GPU] = str(gpus)
    if nics:
        requests[NIC] = str(nics)
    resources: dict[str, Any] = {"requests": requests}
    if guaranteed:
        resources["limits"] = dict(requests)
    container: dict[str, Any] = {"name": name, "image": "example/app:1", "resources": resources}
    if sidecar:
        container["restartPolicy"] = "Always"
    return container


def pod(
    containers: Sequence[dict[str, Any]], init_containers: Sequence[dict[str, Any]] = (), uid: str = "p1"
) -> TaskInfo:
    spec: dict[str, Any] = {"schedulerName": "numasched", "containers": list(containers)}
    if init_containers:
        spec["initContainers"] = list(init_containers)
    return pod_to_task(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": uid, "namespace": "default", "uid": uid},
            "spec": spec,
            "status": {"phase": "Pending"},
        }
    )


def random_free(topology: NumaTopology, rng: random.Random) -> FreeResources:
    """A plausible state of the node: some CPUs, devices and memory taken, a few memory groups."""
    level = rng.choice((0.0, 0.25, 0.5, 0.8))
    cpus = IdSet(cpu for cpu in topology.allocatable_cpus if rng.random() >= level)
    devices = {
        resource: tuple(device.id for device in group.devices if rng.random() >= level)
        for resource, group in topology.devices.items()
    }
    memory = {
        resource: {numa: int(size * (1.0 - level * rng.random())) for numa, size in per_numa.items()}
        for resource, per_numa in topology.memory.items()
    }
    groups: set[NumaMask] = set()
    if rng.random() < 0.3:
        ids = sorted(topology.numa_ids)
        groups.add(NumaMask.from_ids(rng.sample(ids, rng.randint(1, len(ids)))))
    return FreeResources(cpus, devices, memory, frozenset(groups))


container_shapes = st.tuples(
    st.sampled_from(("0", "500m", "1", "2", "3", "4", "8", "16", "40")),
    st.sampled_from((0, 1, 4, 64, 300)),
    st.sampled_from((0, 0, 1, 2, 4, 8)),
    st.sampled_from((0, 0, 0, 1, 2)),
)


@st.composite
def pods(draw: st.DrawFn) -> TaskInfo:
    guaranteed = draw(st.booleans())
    apps = draw(st.lists(container_shapes, min_size=1, max_size=3))
    inits = draw(st.lists(st.tuples(container_shapes, st.booleans()), max_size=2))
    containers = [container_object(f"app{index}", *shape, guaranteed=guaranteed) for index, shape in enumerate(apps)]
    init_containers = [
        container_object(f"init{index}", *shape, guaranteed=guaranteed, sidecar=sidecar)
        for index, (shape, sidecar) in enumerate(inits)
    ]
    return pod(containers, init_containers)


def built_in_providers(nic_alignment: str = "preferred") -> list[HintProvider]:
    return [
        CpuHintProvider(),
        device_provider_factory({"nic-alignment": nic_alignment}),
        MemoryHintProvider(),
    ]


# -- fast admission agrees with the full placement --------------------------------------------------


def assert_agrees(
    task: TaskInfo,
    topology: NumaTopology,
    free: FreeResources,
    providers: Sequence[HintProvider],
    policy: TopologyPolicy,
) -> Placement | Admission:
    full = place_pod(task, topology, free, providers, policy)
    fast = admit_pod(task, topology, free, providers, policy)
    if isinstance(fast, Placement):
        assert fast == full
        return fast
    assert full.admitted, full.reason
    assert fast.numa == full.numa
    assert allocate_admitted(task, fast, topology, free, providers, policy) == full
    return fast


# A machine, its kubelet's options and a pod, as the property tests below draw them.
_SETUPS = {
    "machine": st.sampled_from(MACHINES),
    "scope": st.sampled_from(tuple(TopologyScope)),
    "cpu_options": st.sampled_from(CPU_OPTIONS),
    "memory_manager": st.sampled_from(("None", "Static")),
    "task": pods(),
    "seed": st.integers(0, 2**32 - 1),
}


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    policy=st.sampled_from(tuple(TopologyPolicy)),
    nic_alignment=st.sampled_from(("preferred", "required")),
    **_SETUPS,
)
def test_fast_admission_agrees_with_the_full_placement(
    machine: str,
    policy: TopologyPolicy,
    scope: TopologyScope,
    cpu_options: Mapping[str, str],
    memory_manager: str,
    nic_alignment: str,
    task: TaskInfo,
    seed: int,
) -> None:
    topology = machine_topology(machine, policy, scope, tuple(sorted(cpu_options.items())), memory_manager)
    free = random_free(topology, random.Random(seed))
    assert_agrees(task, topology, free, built_in_providers(nic_alignment), policy)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    machine=st.sampled_from(MACHINES),
    policy=st.sampled_from((TopologyPolicy.BEST_EFFORT, TopologyPolicy.RESTRICTED, TopologyPolicy.SINGLE_NUMA_NODE)),
    scope=st.sampled_from(tuple(TopologyScope)),
    cpu_options=st.sampled_from(CPU_OPTIONS),
    memory_manager=st.sampled_from(("None", "Static")),
    shape=container_shapes,
    seed=st.integers(0, 2**32 - 1),
)
def test_single_guaranteed_container_agrees_with_the_full_placement(
    machine: str,
    policy: TopologyPolicy,
    scope: TopologyScope,
    cpu_options: Mapping[str, str],
    memory_manager: str,
    shape: tuple[str, int, int, int],
    seed: int,
) -> None:
    """The common case (the benchmark's pods), drawn often enough to reach the fast path."""
    topology = machine_topology(machine, policy, scope, tuple(sorted(cpu_options.items())), memory_manager)
    free = random_free(topology, random.Random(seed))
    task = pod([container_object("main", *shape, guaranteed=True)])
    assert_agrees(task, topology, free, built_in_providers(), policy)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**_SETUPS)
def test_a_provider_a_unit_says_pins_nothing_has_no_hints_for_it(
    machine: str,
    scope: TopologyScope,
    cpu_options: Mapping[str, str],
    memory_manager: str,
    task: TaskInfo,
    seed: int,
) -> None:
    """admit_pod does not ask a provider the unit's pinning rules out: asked, it has no hints."""
    topology = machine_topology(
        machine, TopologyPolicy.RESTRICTED, scope, tuple(sorted(cpu_options.items())), memory_manager
    )
    providers = built_in_providers()
    unit = decision_unit(task, topology, providers, scope)
    if unit is None or unit.request is None:
        return
    assert unit.pinning is not None and len(unit.pinning) == len(providers)
    free = random_free(topology, random.Random(seed))
    for provider, pins in zip(providers, unit.pinning, strict=True):
        if not pins:
            assert provider.hints(unit.request, topology, free) is None


def test_fast_path_is_taken_for_an_aligned_gpu_pod() -> None:
    topology = machine_topology("dgx1-v100", TopologyPolicy.SINGLE_NUMA_NODE)
    free = free_resources(machine_node("dgx1-v100", "n1", topology))
    task = pod([container_object("main", "4", 8, 2, 0, guaranteed=True)])
    outcome = assert_agrees(task, topology, free, built_in_providers(), TopologyPolicy.SINGLE_NUMA_NODE)
    assert isinstance(outcome, Admission)
    assert outcome.numa.count() == 1


def test_nic_pod_multi_container_and_best_effort_spill_take_the_full_placement() -> None:
    topology = machine_topology("hgx-h100", TopologyPolicy.RESTRICTED)
    free = free_resources(machine_node("hgx-h100", "n1", topology))
    providers = built_in_providers()
    with_nics = pod([container_object("main", "8", 16, 2, 2, guaranteed=True)])
    assert isinstance(assert_agrees(with_nics, topology, free, providers, TopologyPolicy.RESTRICTED), Placement)
    two = pod([container_object(name, "4", 4, 0, 0, guaranteed=True) for name in ("a", "b")])
    assert isinstance(assert_agrees(two, topology, free, providers, TopologyPolicy.RESTRICTED), Placement)
    # Best-effort with GPUs split over both NUMA nodes: the merged hint is not preferred.
    best_effort = machine_topology("hgx-h100", TopologyPolicy.BEST_EFFORT)
    split = attrs.evolve(free, devices={**free.devices, GPU: ("0", "1", "4", "5")})
    four = pod([container_object("main", "4", 4, 4, 0, guaranteed=True)])
    outcome = assert_agrees(four, best_effort, split, providers, TopologyPolicy.BEST_EFFORT)
    assert isinstance(outcome, Placement) and outcome.numa.count() == 2


def test_a_pod_that_pins_nothing_is_admitted_without_asking_the_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_calls(monkeypatch)
    topology = machine_topology("dgx1-v100", TopologyPolicy.SINGLE_NUMA_NODE)
    free = free_resources(machine_node("dgx1-v100", "n1", topology))
    shared = pod([container_object("main", "500m", 1, 0, 0, guaranteed=False)])
    assert admit_pod(shared, topology, free, built_in_providers(), TopologyPolicy.SINGLE_NUMA_NODE) == Placement(True)
    assert sum(calls.values()) == 0


# -- on_allocate reuses the predicate's decision ----------------------------------------------------


@attrs.define
class CountingProvider:
    """Wraps a provider and counts its calls; not a built-in type, so the plugin always runs the
    full placement with it."""

    inner: HintProvider
    hint_calls: int = 0
    allocate_calls: int = 0

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def resources(self) -> frozenset[str]:
        return self.inner.resources

    def hints(self, request: HintRequest, topology: NumaTopology, free: FreeResources) -> ResourceHints | None:
        self.hint_calls += 1
        return self.inner.hints(request, topology, free)

    def allocate(
        self, request: HintRequest, best_hint: TopologyHint, topology: NumaTopology, free: FreeResources
    ) -> ProviderAllocation:
        self.allocate_calls += 1
        return self.inner.allocate(request, best_hint, topology, free)


def numa_plugin() -> NumaAwarePlugin:
    return NumaAwarePlugin(Arguments({"weight": 1, "devices": [GPU, NIC]}, plugin="numa-aware"))


def cluster(count: int = 3, machine: str = "dgx1-v100") -> list[NodeInfo]:
    return [machine_node(machine, f"n{index}") for index in range(count)]


def decide(plugin: NumaAwarePlugin, task: TaskInfo, nodes: Sequence[NodeInfo]) -> NodeInfo:
    """What the allocate action does: predicates, batch scores, then the allocate event."""
    passing = [node for node in nodes if plugin.predicate(task, node).passed]
    scores = plugin.batch_node_order(task, passing)
    chosen = min(passing, key=lambda node: (-scores.get(node.name, 0.0), node.name))
    chosen.add_task(task)
    plugin.on_allocate(Event(task, chosen))
    if task.allocation is not None:
        chosen.replace_allocation(None, task.allocation)
    return chosen


def test_on_allocate_reuses_the_full_placement_without_calling_providers() -> None:
    plugin = numa_plugin()
    counting = [CountingProvider(provider) for provider in plugin.providers]
    plugin.providers = list(counting)
    nodes = cluster()
    task = pod([container_object("main", "8", 16, 2, 0, guaranteed=True)])
    passing = [node for node in nodes if plugin.predicate(task, node).passed]
    assert len(passing) == 3
    plugin.batch_node_order(task, passing)
    before = [(provider.hint_calls, provider.allocate_calls) for provider in counting]
    expected = plugin.place(task, nodes[1])
    assert isinstance(expected, Placement)
    after_place = [(provider.hint_calls, provider.allocate_calls) for provider in counting]
    assert after_place != before
    nodes[1].add_task(task)
    plugin.on_allocate(Event(task, nodes[1]))
    assert [(provider.hint_calls, provider.allocate_calls) for provider in counting] == after_place
    assert task.allocation == expected.allocation is not None


def count_calls(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Count the built-in providers' calls (their types stay built-in, so the fast path holds)."""
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


def test_fast_admission_allocates_only_on_the_chosen_node(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_calls(monkeypatch)
    plugin = numa_plugin()
    nodes = cluster(4)
    # One CPU pinned per node, each a different one, so no two nodes share an admission.
    for index, node in enumerate(nodes):
        node.replace_allocation(None, PodAllocation((ContainerAllocation("pinned", IdSet([60 + index])),)))
    task = pod([container_object("main", "8", 16, 0, 0, guaranteed=True)])
    expected = plugin.place(task, nodes[0])
    assert isinstance(expected, Placement)
    calls.clear()
    chosen = decide(plugin, task, nodes)
    # Hints for every node, once; ids chosen once, on the chosen node.
    assert calls["CpuHintProvider.hints"] == 4
    assert calls["CpuHintProvider.allocate"] == 1
    assert chosen.name == "n0"
    assert task.allocation == expected.allocation is not None


def test_device_pods_choose_sets_on_the_scored_nodes_and_reuse_them(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_calls(monkeypatch)
    plugin = numa_plugin()
    nodes = cluster(4)
    # One CPU pinned per node, each a different one, so no two nodes share an admission.
    for index, node in enumerate(nodes):
        node.replace_allocation(None, PodAllocation((ContainerAllocation("pinned", IdSet([60 + index])),)))
    task = pod([container_object("main", "8", 16, 2, 0, guaranteed=True)])
    expected = plugin.place(task, nodes[0])
    assert isinstance(expected, Placement)
    calls.clear()
    chosen = decide(plugin, task, nodes)
    # Link-quality scoring chooses the GPU set once: the 4 equally good nodes differ only in their
    # CPUs, so the set's quality on the first holds for the others (the device provider reads no
    # CPU). on_allocate then reuses the chosen node's set instead of choosing again.
    assert calls["CpuHintProvider.hints"] == 4
    assert calls["DeviceProvider.allocate"] == 1
    assert calls["CpuHintProvider.allocate"] == 1
    assert chosen.name == "n0"
    assert task.allocation == expected.allocation is not None


def test_nodes_whose_cpus_lead_to_other_numa_nodes_get_the_device_sets_of_their_own_hint() -> None:
    """Two nodes alike in their free GPUs but whose free CPUs sit on different NUMA nodes merge to
    different hints, so their GPU sets, and what each leaves free, differ: the link quality of one
    is not the other's."""
    plugin = numa_plugin()
    nodes = cluster(2)
    topology = nodes[0].topology
    assert topology is not None
    gpus = topology.devices[GPU].devices
    cpus_on = {numa: IdSet(c.cpu for c in topology.cpus if c.numa == numa) for numa in (0, 1)}
    # Two GPUs of NUMA node 1 taken on both; node n0 has CPUs left on NUMA node 0 only, n1 on 1 only.
    taken = tuple(device.id for device in gpus if device.numa == 1)[:2]
    for node, pinned in ((nodes[0], cpus_on[1]), (nodes[1], cpus_on[0])):
        node.replace_allocation(None, PodAllocation((ContainerAllocation("held", pinned, None, {GPU: taken}),)))
    task = pod([container_object("main", "4", 8, 2, 0, guaranteed=True)])
    assert all(plugin.predicate(task, node).passed for node in nodes)
    scores = plugin.batch_node_order(task, nodes)
    # On n1 the pair comes from NUMA node 1 and leaves NUMA node 0's four GPUs whole; on n0 it
    # breaks them up. Both span one NUMA node, so the link ranking alone parts them.
    assert scores["n1"] > scores["n0"]


def test_a_best_effort_pod_arriving_leaves_the_nodes_admission_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pod holding no ids changes the node (its generation) but not what NUMA admission reads
    (numa_generation): what is free there is not read again; a pinned pod arriving makes it."""
    import numasched.plugins.numaaware.plugin as plugin_module
    from numasched.plugins.numaaware.providers.base import free_resources

    reads: list[str] = []
    original = free_resources

    def counted(node: NodeInfo) -> FreeResources:
        reads.append(node.name)
        return original(node)

    monkeypatch.setattr(plugin_module, "free_resources", counted)
    plugin = numa_plugin()
    [node] = cluster(1)
    task = pod([container_object("main", "8", 16, 0, 0, guaranteed=True)])
    assert plugin.predicate(task, node).passed
    assert len(reads) == 1
    node.add_task(pod([container_object("main", "0", 0, 0, 0, guaranteed=False)], uid="best-effort"))
    assert plugin.predicate(task, node).passed
    assert len(reads) == 1
    pinned = pod([container_object("main", "4", 8, 0, 0, guaranteed=True)], uid="pinned")
    pinned.allocation = PodAllocation((ContainerAllocation("main", IdSet([0, 1, 2, 3])),))
    node.add_task(pinned)
    assert plugin.predicate(task, node).passed
    assert len(reads) == 2


def test_on_allocate_recomputes_when_the_node_changed_since_the_predicate() -> None:
    plugin = numa_plugin()
    nodes = cluster(1)
    task = pod([container_object("main", "8", 16, 2, 0, guaranteed=True)])
    assert plugin.predicate(task, nodes[0]).passed
    first_choice = plugin.place(task, nodes[0])
    assert isinstance(first_choice, Placement) and first_choice.allocation is not None
    # Something outside the plugin took those CPUs after the predicate (a field changed directly
    # is announced with touch(), as NodeInfo asks).
    nodes[0].numa_usage.cpus = first_choice.allocation.cpus()
    nodes[0].touch()
    nodes[0].add_task(task)
    plugin.on_allocate(Event(task, nodes[0]))
    assert task.allocation is not None
    assert not (task.allocation.cpus() & first_choice.allocation.cpus())


def test_pods_decided_one_after_another_on_one_node_do_not_overlap() -> None:
    plugin = numa_plugin()
    nodes = cluster(1)
    first = pod([container_object("main", "4", 4, 1, 0, guaranteed=True)])
    second = pod([container_object("main", "4", 4, 1, 0, guaranteed=True)], uid="p2")
    decide(plugin, first, nodes)
    decide(plugin, second, nodes)
    assert first.allocation is not None and second.allocation is not None
    assert not (first.allocation.cpus() & second.allocation.cpus())
    (first_container,) = first.allocation.containers
    (second_container,) = second.allocation.containers
    assert first_container.devices[GPU] != second_container.devices[GPU]


def test_a_deallocation_on_the_node_drops_the_decision(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_calls(monkeypatch)
    plugin = numa_plugin()
    nodes = cluster(1)
    task = pod([container_object("main", "4", 4, 1, 0, guaranteed=True)])
    assert plugin.predicate(task, nodes[0]).passed
    plugin.on_deallocate(Event(pod([container_object("x", "1", 1, 0, 0, guaranteed=True)], uid="gone"), nodes[0]))
    calls.clear()
    nodes[0].add_task(task)
    plugin.on_allocate(Event(task, nodes[0]))
    assert calls["CpuHintProvider.hints"] == 1
    assert task.allocation is not None


def test_scores_from_the_merged_hint_equal_scores_from_the_placement() -> None:
    plugin = numa_plugin()
    topology = machine_topology("epyc-1s-nps4", TopologyPolicy.BEST_EFFORT)
    nodes = [machine_node("epyc-1s-nps4", f"n{index}", topology) for index in range(3)]
    # Each node a different fill: the pod fits one NUMA node (a preferred hint, no ids chosen) or
    # has to spread (best-effort, not preferred: the full placement).
    nodes[1].numa_usage.cpus = IdSet(cpu for cpu in nodes[1].free_cpus() if cpu % 16 >= 4)
    nodes[2].numa_usage.cpus = IdSet(cpu for cpu in nodes[2].free_cpus() if cpu % 16 >= 3)
    task = pod([container_object("main", "16", 8, 0, 0, guaranteed=True)])
    passing = [node for node in nodes if plugin.predicate(task, node).passed]
    scores = plugin.batch_node_order(task, passing)
    spans: dict[str, int] = {}
    for node in passing:
        placement = plugin.place(task, node)
        assert isinstance(placement, Placement)
        spans[node.name] = placement.numa.count()
    assert len(set(spans.values())) > 1
    highest = max(spans.values())
    assert scores == {name: float(100 - 100 * span // highest) for name, span in spans.items()}


def test_the_builder_keeps_providers_and_their_indexes_across_sessions() -> None:
    from numasched.plugins.numaaware.plugin import NumaAwareBuilder
    from numasched.scheduler.framework.arguments import Arguments

    builder = NumaAwareBuilder()
    first = builder(Arguments({"weight": 10}))
    second = builder(Arguments({"weight": 10}))
    assert first is not second
    assert all(a is b for a, b in zip(first.providers, second.providers, strict=True))
    changed = builder(Arguments({"weight": 10, "devices": ["amd.com/gpu"]}))
    assert all(a is not b for a, b in zip(first.providers, changed.providers, strict=True))


def test_a_unit_plan_names_the_deciding_container_and_serves_every_pod_of_the_shape() -> None:
    topology = machine_topology("dgx1-v100", TopologyPolicy.SINGLE_NUMA_NODE)
    providers = built_in_providers()
    scope = TopologyScope.CONTAINER
    # An init container pinning nothing (burstable), then the app container with GPUs: the app
    # container decides. It is the pod's only app container, so the plan names its place in the
    # pod's list of containers, whichever order the kubelet admits them in.
    init = container_object("setup", "500m", 1, 0, 0, guaranteed=False)
    first = pod([container_object("main", "4", 8, 2, 0, guaranteed=True)], [init], uid="first")
    second = pod([container_object("main", "4", 8, 2, 0, guaranteed=True)], [init], uid="second")
    main_at = next(place for place, container in enumerate(second.containers) if container.name == "main")
    plan = unit_plan(first, topology, providers, scope)
    assert plan == UnitPlan(Decides.CONTAINER, main_at) == unit_plan(second, topology, providers, scope)
    unit = plan.unit(second)
    assert unit.request is not None
    assert (unit.request.pod, unit.request.container) == ("default/second", "main")
    # Two pinned containers: only the full placement decides; nothing pinned: nothing decides.
    two = pod([container_object(name, "4", 4, 0, 0, guaranteed=True) for name in ("a", "b")])
    assert unit_plan(two, topology, providers, scope) is None
    loose = pod([container_object("main", "500m", 1, 0, 0, guaranteed=False)])
    assert unit_plan(loose, topology, providers, scope) == UnitPlan(Decides.NOTHING)
    assert unit_plan(first, topology, providers, TopologyScope.POD) == UnitPlan(Decides.POD)


def test_refusals_computed_from_a_shared_plan_name_their_own_pod() -> None:
    # Two pods of one shape, each the first to meet a node class, in pod scope (a refusal names
    # the pod): the plan is shared, each refusal names its own pod.
    topology = machine_topology("dgx1-v100", TopologyPolicy.SINGLE_NUMA_NODE, TopologyScope.POD)
    numa = NumaAwarePlugin(Arguments({"devices": [GPU, NIC]}, plugin="numa-aware"))
    for uid, other, taken in (
        ("one", "two", ("0", "1", "2", "4", "5", "6")),
        ("two", "one", ("0", "1", "3", "4", "5", "7")),
    ):
        node = machine_node("dgx1-v100", f"node-{uid}", topology)
        node.numa_usage.devices[GPU] = frozenset(taken)
        node.touch()
        task = pod([container_object("main", "4", 8, 2, 0, guaranteed=True)], uid=uid)
        status = numa.predicate(task, node)
        assert not status.passed
        assert f"pod default/{uid}" in status.reason and f"default/{other}" not in status.reason
