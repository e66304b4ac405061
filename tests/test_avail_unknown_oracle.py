"""Unknown holders against a brute-force oracle.

A node holds some ids (devices or exclusive CPUs) for pods whose ids nobody reports. The oracle
enumerates every way those holdings could lie over the ids that look free and asks, for the NUMA
nodes the plugin chose, whether the pod's request fits in every one of them; and, conversely,
whether some admissible NUMA set would have fitted in every one of them when the plugin refused.
It knows nothing of the providers: only ids, their NUMA nodes, and the kubelet's policy rules
(single-numa-node: one NUMA node; restricted: a set as narrow as the node's ids allow; none: enough
ids anywhere).
"""

from __future__ import annotations

import itertools
import random

import attrs
import pytest

from numasched.api.allocation import ContainerAllocation, PodAllocation
from numasched.api.idset import IdSet
from numasched.api.node import NodeInfo, UnknownHolder
from numasched.api.resource import Resource
from numasched.api.task import ContainerInfo, QosClass, TaskInfo, TaskStatus
from numasched.api.topology import (
    CpuInfo,
    CpuManagerPolicy,
    DeviceGroup,
    DeviceInfo,
    KubeletPolicies,
    NumaTopology,
    TopologyPolicy,
)
from numasched.cache.binder import binding_annotations
from numasched.plugins.numaaware.plugin import NumaAwarePlugin
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import Event

GPU = "nvidia.com/gpu"


@attrs.frozen
class Case:
    """ids per NUMA node, which of them our ledger holds, how many unknown holders hold, the request."""

    per_numa: tuple[int, ...]
    held: frozenset[int]  # indexes into the flat id list
    unknown: int
    request: int
    policy: TopologyPolicy

    @property
    def ids(self) -> list[tuple[int, int]]:
        """(id, NUMA node) for every id of the node."""
        flat: list[tuple[int, int]] = []
        for numa, count in enumerate(self.per_numa):
            start = len(flat)
            flat.extend((start + index, numa) for index in range(count))
        return flat


def random_case(rng: random.Random) -> Case:
    per_numa = tuple(rng.randint(1, 4) for _ in range(rng.randint(2, 3)))
    total = sum(per_numa)
    held = frozenset(rng.sample(range(total), rng.randint(0, total // 3)))
    free = total - len(held)
    return Case(
        per_numa,
        held,
        unknown=rng.randint(1, max(1, free // 2)),
        request=rng.randint(1, 3),
        policy=rng.choice([TopologyPolicy.SINGLE_NUMA_NODE, TopologyPolicy.RESTRICTED, TopologyPolicy.NONE]),
    )


# -- the oracle ----------------------------------------------------------------------------------------


def fits_every_way(case: Case, numa_nodes: frozenset[int]) -> bool:
    """Whether `request` ids stay free on these NUMA nodes however the unknown holdings lie."""
    free = [(ident, numa) for ident, numa in case.ids if ident not in case.held]
    for taken in itertools.combinations(range(len(free)), case.unknown):
        chosen = set(taken)
        left = sum(1 for index, (_, numa) in enumerate(free) if index not in chosen and numa in numa_nodes)
        if left < case.request:
            return False
    return True


def admissible_sets(case: Case) -> list[frozenset[int]]:
    """The NUMA sets the kubelet's policy accepts for the request (ignoring what is free)."""
    numas = range(len(case.per_numa))
    if case.policy is TopologyPolicy.NONE:
        # No alignment: the kubelet only needs enough ids anywhere.
        return [frozenset(numas)]
    if case.policy is TopologyPolicy.SINGLE_NUMA_NODE:
        return [frozenset({numa}) for numa in numas]
    # restricted: only preferred hints, as narrow as the narrowest set whose ids could hold it.
    for width in range(1, len(case.per_numa) + 1):
        sets = [frozenset(combo) for combo in itertools.combinations(numas, width)]
        if any(sum(case.per_numa[numa] for numa in combo) >= case.request for combo in sets):
            return sets
    return []


# -- the node as the cache would build it ---------------------------------------------------------------


def pod(uid: str, requests: Resource, qos: QosClass, node_name: str = "") -> TaskInfo:
    return TaskInfo(
        uid=uid,
        namespace="default",
        name=uid,
        job_id=uid,
        resreq=requests,
        init_resreq=requests.clone(),
        containers=(ContainerInfo("main", requests, requests),),
        qos=qos,
        node_name=node_name,
        status=TaskStatus.RUNNING if node_name else TaskStatus.PENDING,
    )


def device_node(case: Case) -> NodeInfo:
    devices = tuple(DeviceInfo(id=str(ident), numa=numa) for ident, numa in case.ids)
    numa_ids = tuple(range(len(case.per_numa)))
    topology = NumaTopology(
        node_name="n1",
        numa_ids=numa_ids,
        cpus=tuple(CpuInfo(cpu=numa, core=numa, socket=0, numa=numa, l3=numa) for numa in numa_ids),
        devices={GPU: DeviceGroup(GPU, devices)},
        policies=KubeletPolicies(topology_manager_policy=case.policy),
    )
    node = NodeInfo.create("n1", Resource(64_000, 1 << 40, {GPU: 1000 * len(devices)}))
    node.topology = topology
    held = tuple(str(ident) for ident in sorted(case.held))
    busy = pod("busy", Resource(500, 1 << 30, {GPU: 1000 * len(held)}), QosClass.BURSTABLE, "n1")
    busy.allocation = PodAllocation((ContainerAllocation("main", devices={GPU: held}),)) if held else None
    node.add_task(busy)
    stranger = pod("stranger", Resource(500, 1 << 30, {GPU: 1000 * case.unknown}), QosClass.BURSTABLE, "n1")
    node.add_task(stranger)
    node.set_unknown_holder(stranger.uid, UnknownHolder("default/stranger", {GPU: case.unknown}))
    return node


def cpu_node(case: Case) -> NodeInfo:
    cpus = tuple(CpuInfo(cpu=ident, core=ident, socket=0, numa=numa, l3=numa) for ident, numa in case.ids)
    topology = NumaTopology(
        node_name="n1",
        numa_ids=tuple(range(len(case.per_numa))),
        cpus=cpus,
        policies=KubeletPolicies(cpu_manager_policy=CpuManagerPolicy.STATIC, topology_manager_policy=case.policy),
    )
    node = NodeInfo.create("n1", Resource(1000 * len(cpus), 1 << 40))
    node.topology = topology
    held = IdSet(sorted(case.held))
    busy = pod("busy", Resource(1000 * len(held), 1 << 30), QosClass.GUARANTEED, "n1")
    busy.allocation = PodAllocation((ContainerAllocation("main", held),)) if held else None
    node.add_task(busy)
    stranger = pod("stranger", Resource(1000 * case.unknown, 1 << 30), QosClass.GUARANTEED, "n1")
    node.add_task(stranger)
    node.set_unknown_holder(stranger.uid, UnknownHolder("default/stranger", {"cpu": case.unknown}))
    return node


def chosen_numa(outcome: object) -> frozenset[int]:
    numa = getattr(outcome, "numa", None)
    assert numa is not None
    return frozenset(numa.ids())


def check(case: Case, node: NodeInfo, task: TaskInfo, resource: str) -> None:
    plugin = NumaAwarePlugin(Arguments({}, plugin="numa-aware"))
    outcome = plugin.admit(task, node)
    admissible = [numas for numas in admissible_sets(case) if fits_every_way(case, numas)]
    if not hasattr(outcome, "numa"):
        # Refused: the oracle must agree that no admissible NUMA set is safe, and the reason says why.
        reason = getattr(outcome, "reason", "")
        assert not admissible, f"{case}: refused although {sorted(map(sorted, admissible))} fit every way: {reason}"
        assert f"{case.unknown} are held by pods whose ids are unknown (default/stranger)" in reason or (
            f"{case.unknown} {resource} held by pods whose ids are unknown (default/stranger)" in reason
        ), reason
        return
    numas = chosen_numa(outcome)
    if case.policy is TopologyPolicy.NONE:
        assert admissible, f"{case}: admitted although the node may have too few ids"
    else:
        assert numas in admissible_sets(case), f"{case}: NUMA {sorted(numas)} is not one the policy admits"
        assert fits_every_way(case, numas), f"{case}: NUMA {sorted(numas)} may be short under some placement"
    # The allocation names the NUMA nodes but no ids of the resource, and the pod then counts as a
    # holder of unknown ids, so the next pod cannot be promised its ids either.
    node.add_task(task)
    plugin.on_allocate(Event(task, node))
    allocation = task.allocation
    assert allocation is not None
    if case.policy is not TopologyPolicy.NONE:
        assert frozenset(allocation.numa().ids()) == numas
    assert not allocation.cpus() and not allocation.devices(GPU)
    assert node.unknown_holdings()[resource][0] == case.unknown + case.request
    annotations = binding_annotations(task, node)
    assert f'"{resource}"' not in annotations["volcano.sh/topology-decision"]


@pytest.mark.parametrize("seed", range(150))
def test_devices_admitted_only_where_they_fit_every_way(seed: int) -> None:
    case = random_case(random.Random(seed))
    task = pod("new", Resource(500, 1 << 30, {GPU: 1000 * case.request}), QosClass.BURSTABLE)
    check(case, device_node(case), task, GPU)


@pytest.mark.parametrize("seed", range(150))
def test_exclusive_cpus_admitted_only_where_they_fit_every_way(seed: int) -> None:
    case = random_case(random.Random(10_000 + seed))
    task = pod("new", Resource(1000 * case.request, 1 << 30), QosClass.GUARANTEED)
    check(case, cpu_node(case), task, "cpu")


def test_the_oracle_can_refuse_and_admit() -> None:
    """The oracle itself: 4 + 4 free ids and 2 held unknown: 3 on one NUMA node is not sure
    (both unknown ids may sit there), 2 is."""
    three = Case((4, 4), frozenset(), 2, 3, TopologyPolicy.SINGLE_NUMA_NODE)
    two = attrs.evolve(three, request=2)
    assert not any(fits_every_way(three, numas) for numas in admissible_sets(three))
    assert all(fits_every_way(two, numas) for numas in admissible_sets(two))


def test_nodes_alike_but_for_unknown_holders_do_not_share_an_admission() -> None:
    # Same topology and the same free ids; only the second node has a holder of unknown ids. The
    # plugin shares admissions between nodes alike within a session: it must not share this one.
    case = Case((4, 4), frozenset(), unknown=3, request=2, policy=TopologyPolicy.SINGLE_NUMA_NODE)
    clear = device_node(case)
    clear.name = "clear"
    clear.set_unknown_holder("stranger", None)
    crowded = device_node(case)
    crowded.name = "crowded"
    plugin = NumaAwarePlugin(Arguments({}, plugin="numa-aware"))
    task = pod("new", Resource(500, 1 << 30, {GPU: 4000}), QosClass.BURSTABLE)
    assert plugin.predicate(task, clear).passed
    refused = plugin.predicate(task, crowded)
    assert not refused.passed and "3 nvidia.com/gpu held by pods whose ids are unknown" in refused.reason
    assert plugin.predicate(task, clear).passed
