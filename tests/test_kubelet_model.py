"""The independent kubelet model (hack/kubelet_model.py) against cases worked out from the kubelet's
sources by hand: hint generation, merge per policy, QoS, scopes, allocation failures."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import pytest
from conftest import load_hack_module, load_machine

km: Any = load_hack_module("kubelet_model")


def small_node(**options: Any) -> Any:
    """2 NUMA nodes of 4 CPUs (2 cores x 2 threads each) and 4 GPUs: 0,1 on NUMA 0, 2,3 on NUMA 1."""
    machine = {
        "numa_nodes": [{"id": 0}, {"id": 1}],
        "cores": [
            {"socket": 0, "core": 0, "numa": 0, "cpus": "0,4"},
            {"socket": 0, "core": 1, "numa": 0, "cpus": "1,5"},
            {"socket": 1, "core": 2, "numa": 1, "cpus": "2,6"},
            {"socket": 1, "core": 3, "numa": 1, "cpus": "3,7"},
        ],
        "devices": {"nvidia.com/gpu": [{"id": str(i), "numa": i // 2} for i in range(4)]},
    }
    return km.node_from_machine(machine, "n", **options)


def pod(*containers: Mapping[str, Any], init: tuple[Mapping[str, Any], ...] = ()) -> Any:
    def spec(index: int, resources: Mapping[str, Any]) -> dict[str, Any]:
        return {"name": f"c{index}", "resources": dict(resources)}

    return km.pod_from_object(
        {
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {
                "initContainers": [spec(i, r) for i, r in enumerate(init)],
                "containers": [spec(i + len(init), r) for i, r in enumerate(containers)],
            },
        }
    )


def guaranteed(cpu: str, gpus: int = 0, memory: str = "1Gi") -> dict[str, Any]:
    limits: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        limits["nvidia.com/gpu"] = gpus
    return {"limits": limits}


def mk(*numa: int, preferred: bool = True) -> Any:
    return km.Hint(frozenset(numa), preferred)


def masks(hints: list[Any] | None) -> list[tuple[tuple[int, ...] | None, bool]] | None:
    if hints is None:
        return None
    return [(None if h.affinity is None else tuple(sorted(h.affinity)), h.preferred) for h in hints]


def test_device_hints_preferred_width_comes_from_total_devices() -> None:
    state = km.NodeState.empty(small_node())
    assert masks(km.device_hints(state, "nvidia.com/gpu", 2)) == [((0,), True), ((1,), True), ((0, 1), False)]
    # GPU 1 and 3 held: two free GPUs remain, one per NUMA node. The narrowest mask the node's
    # TOTAL devices could satisfy is one NUMA node wide, so the only fitting mask is not preferred.
    state.take([], {"nvidia.com/gpu": ["1", "3"]})
    assert masks(km.device_hints(state, "nvidia.com/gpu", 2)) == [((0, 1), False)]
    assert masks(km.device_hints(state, "nvidia.com/gpu", 3)) == []


def test_device_without_topology_has_no_preference() -> None:
    node = attrs.evolve(small_node(), devices={"x/nic": {"a": None}})
    assert km.device_hints(km.NodeState.empty(node), "x/nic", 1) is None


def test_cpu_hints_count_reserved_cpus_for_the_preferred_width() -> None:
    state = km.NodeState.empty(small_node(reserved_cpus=[0]))
    # NUMA 0 has 4 CPUs in all (3 allocatable): 4 CPUs fit one NUMA node by the machine's
    # CPUs, so only NUMA 1 (4 free) gives a preferred hint; {0,1} fits but is wider.
    assert masks(km.cpu_hints(state, 4)) == [((1,), True), ((0, 1), False)]
    assert km.cpu_hints(state, 0) is None


def test_merge_per_policy() -> None:
    cpu = [km.Hint(frozenset({0}), True), km.Hint(frozenset({1}), True), km.Hint(frozenset({0, 1}), False)]
    gpu_spread = [km.Hint(frozenset({0, 1}), False)]
    hint, admitted = km.merge("single-numa-node", (0, 1), [cpu, [km.Hint(frozenset({1}), True)]])
    assert (hint.affinity, hint.preferred, admitted) == (frozenset({1}), True, True)
    for policy, expected in (("single-numa-node", False), ("restricted", False), ("best-effort", True), ("none", True)):
        assert km.merge(policy, (0, 1), [cpu, gpu_spread])[1] is expected, policy
    # A resource without any fitting mask ([]) can never give a preferred merged hint.
    assert km.merge("restricted", (0, 1), [cpu, []])[1] is False
    # Nothing to align: don't care everywhere; single-numa-node reports it as no affinity.
    hint, admitted = km.merge("single-numa-node", (0, 1), [None, None])
    assert (hint.affinity, admitted) == (None, True)
    # Preferred only when every set affinity is the same mask: CPUs preferred on {0} and GPUs
    # preferred on {0,1} (4 GPUs need two NUMA nodes) AND to {0}, which is not preferred.
    hint, admitted = km.merge("restricted", (0, 1), [[mk(0)], [mk(0, 1)]])
    assert (hint.affinity, hint.preferred, admitted) == (frozenset({0}), False, False)
    # Among non-preferred hints: the one as wide as the widest narrowest hint (here 2) wins.
    hint, _ = km.merge("best-effort", (0, 1, 2), [[mk(0, 1, preferred=False), mk(0, 1, 2, preferred=False)]])
    assert hint.affinity == frozenset({0, 1})
    hint, _ = km.merge("best-effort", (0, 1, 2), [[mk(0, preferred=False), mk(1, 2, preferred=False)], [mk(0, 1, 2)]])
    assert hint.affinity == frozenset({1, 2})
    # Among preferred hints the narrower (then lower) mask wins.
    hint, _ = km.merge("restricted", (0, 1), [[km.Hint(frozenset({0, 1}), True), km.Hint(frozenset({1}), True)]])
    assert hint.affinity == frozenset({1})


@pytest.mark.parametrize(
    ("resources", "qos"),
    [
        ({"limits": {"cpu": "2", "memory": "1Gi"}}, "Guaranteed"),
        ({"limits": {"cpu": "2", "memory": "1Gi"}, "requests": {"cpu": "1"}}, "Burstable"),
        # scheduler-plugins' test Deployment: memory: 0 is ignored, so memory has no limit.
        ({"limits": {"cpu": "2", "memory": "0"}, "requests": {"cpu": "2", "memory": "0"}}, "Burstable"),
        ({"limits": {"nvidia.com/gpu": 1}}, "BestEffort"),
        ({}, "BestEffort"),
    ],
)
def test_pod_qos(resources: Mapping[str, Any], qos: str) -> None:
    assert pod(resources).qos == qos


def test_exclusive_cpus_only_for_integer_guaranteed_requests() -> None:
    assert [km.exclusive_cpus(p, p.containers[0]) for p in (pod(guaranteed("2")), pod(guaranteed("1500m")))] == [2, 0]
    burstable = pod({"limits": {"cpu": "2", "memory": "0"}})
    assert km.exclusive_cpus(burstable, burstable.containers[0]) == 0


def test_admission_single_numa_node_and_state() -> None:
    state = km.NodeState.empty(small_node())
    first = km.admit(state, pod(guaranteed("4", gpus=2)))
    assert first.admitted and len(first.cpus) == 4 and len(first.devices["nvidia.com/gpu"]) == 2
    assert len(km.numa_of_ids(state.node, first.cpus, first.devices)) == 1
    km.apply(state, first)
    # One NUMA node is now full; the same pod still fits the other, a third does not.
    second = km.admit(state, pod(guaranteed("4", gpus=2)))
    assert second.admitted
    km.apply(state, second)
    # No mask fits: an empty hint list, refused by the merge before any allocation is tried ...
    third = km.admit(state, pod(guaranteed("1")))
    assert not third.admitted and "TopologyAffinityError" in third.reason
    # ... while best-effort admits the merge and the CPU manager's Allocate fails.
    loose = km.NodeState(attrs.evolve(state.node, topology_policy="best-effort"), state.free_cpus, state.free_devices)
    refused = km.admit(loose, pod(guaranteed("1")))
    assert not refused.admitted and "not enough cpus" in refused.reason


def test_container_scope_vs_pod_scope() -> None:
    two = pod(guaranteed("2", gpus=1), guaranteed("2", gpus=1))
    # Container scope: each container fits one NUMA node on its own, possibly different ones.
    assert km.admit(km.NodeState.empty(small_node()), two).admitted
    state = km.NodeState.empty(small_node(topology_scope="pod"))
    assert km.admit(state, two).admitted  # 4 CPUs + 2 GPUs fit one NUMA node
    state.take([0], {})
    # NUMA 0 has 3 free CPUs now, but NUMA 1 still holds the whole pod (4 CPUs and 2 GPUs).
    assert km.admit(state, two).admitted
    state.take([2], {})
    # Neither NUMA node holds 4 CPUs: the pod-level hint cannot be one NUMA node wide.
    refused = km.admit(state, two)
    assert not refused.admitted and "TopologyAffinityError" in refused.reason


def test_init_container_cpus_are_reused() -> None:
    with_init = pod(guaranteed("4"), init=(guaranteed("4"),))
    state = km.NodeState.empty(small_node(reserved_cpus=[]))
    result = km.admit(state, with_init)
    assert result.admitted and len(result.cpus) == 4


def test_full_pcpus_only_and_numa_limit() -> None:
    state = km.NodeState.empty(small_node(cpu_manager_options={"full-pcpus-only": "true"}))
    refused = km.admit(state, pod(guaranteed("1")))
    assert not refused.admitted and "SMTAlignmentError" in refused.reason
    assert km.admit(state, pod(guaranteed("2"))).admitted
    machine = load_machine("epyc-1s-nps4")
    node = km.node_from_machine(machine, "e", topology_options={"max-allowable-numa-nodes": "2"})
    assert len(node.numa_ids) > 2
    assert not km.admit(km.NodeState.empty(node), pod(guaranteed("1"))).admitted


def test_fixture_machine_hgx_eight_gpu_pod() -> None:
    node = km.node_from_machine(load_machine("hgx-h100"), "h", reserved_cpus=[0, 1])
    state = km.NodeState.empty(node)
    eight = km.admit(state, pod(guaranteed("8", gpus=8)))
    # 8 GPUs span both NUMA nodes on an HGX: no single NUMA node can hold them.
    assert not eight.admitted
    best_effort = km.node_from_machine(load_machine("hgx-h100"), "h", topology_policy="best-effort")
    assert km.admit(km.NodeState.empty(best_effort), pod(guaranteed("8", gpus=8))).admitted


def test_adapters_from_numasched_records_match_the_machine() -> None:
    """The benchmark's adapters (numasched's plain topology and task records) describe the same node
    and pod as the machine file and the Pod object do."""
    from numasched.api.topology import TopologyPolicy
    from numasched.cache.cache import Cache
    from numasched.cache.machine_shapes import machine_objects, reserved_cpus_for
    from numasched.cache.simcluster import SimCluster

    machine = load_machine("hgx-h100")
    node_obj, topology_obj = machine_objects(machine, "n0", topology_policy=TopologyPolicy.RESTRICTED)
    pod_obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"schedulerName": "numasched", "containers": [{"name": "c0", **guaranteed("4", gpus=2)}]},
    }
    cluster = SimCluster(Cache())
    for obj in (node_obj, topology_obj, pod_obj):
        cluster.add(obj)
    snapshot = cluster.cache.snapshot()
    topology = snapshot.nodes["n0"].topology
    assert topology is not None
    adapted = km.node_from_topology(topology)
    direct = km.node_from_machine(
        machine, "n0", reserved_cpus=reserved_cpus_for(machine, 2), topology_policy="restricted"
    )
    for field in (
        "numa_ids",
        "cpu_numa",
        "cpu_core",
        "devices",
        "reserved_cpus",
        "topology_policy",
        "cpu_manager_policy",
    ):
        assert getattr(adapted, field) == getattr(direct, field), field
    task = next(t for job in snapshot.jobs.values() for t in job.tasks.values())
    assert km.pod_from_task(task) == km.pod_from_object(pod_obj)
