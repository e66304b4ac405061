"""The numa-aware plugin and its admission walk on a small two-NUMA machine."""

from __future__ import annotations

import attrs
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from numasched.api.idset import IdSet
from numasched.api.node import NodeInfo
from numasched.api.numamask import NumaMask
from numasched.api.resource import Resource
from numasched.api.task import ContainerInfo, QosClass, TaskInfo
from numasched.api.topology import (
    CpuInfo,
    CpuManagerPolicy,
    DeviceGroup,
    DeviceInfo,
    KubeletPolicies,
    NumaTopology,
    TopologyPolicy,
    TopologyScope,
)
from numasched.plugins.numaaware.admission import Placement
from numasched.plugins.numaaware.plugin import POLICY_ANNOTATION, NumaAwarePlugin, normalized_scores
from numasched.plugins.numaaware.pod_policy import CPUSET_ANNOTATION
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.status import StatusCode

GPU = "nvidia.com/gpu"


def topology(
    policy: TopologyPolicy = TopologyPolicy.SINGLE_NUMA_NODE, scope: TopologyScope = TopologyScope.CONTAINER
) -> NumaTopology:
    cpus = tuple(CpuInfo(cpu=c, core=c, socket=c // 4, numa=c // 4, l3=c // 4) for c in range(8))
    gpus = DeviceGroup(GPU, tuple(DeviceInfo(str(i), 0 if i < 3 else 1) for i in range(4)))
    return NumaTopology(
        node_name="n1",
        numa_ids=(0, 1),
        cpus=cpus,
        devices={GPU: gpus},
        policies=KubeletPolicies(
            cpu_manager_policy=CpuManagerPolicy.STATIC,
            topology_manager_policy=policy,
            topology_manager_scope=scope,
        ),
    )


def node(topo: NumaTopology | None) -> NodeInfo:
    result = NodeInfo.create("n1", Resource(8000, 64 << 30, {GPU: 4000}))
    result.topology = topo
    return result


def task(*containers: tuple[str, int, int], annotations: dict[str, str] | None = None) -> TaskInfo:
    infos = tuple(
        ContainerInfo(name, Resource(cpus * 1000, 1 << 30, {GPU: gpus * 1000} if gpus else {}), Resource())
        for name, cpus, gpus in containers
    )
    total = Resource()
    for info in infos:
        total.add(info.requests)
    return TaskInfo(
        uid="u1",
        namespace="default",
        name="p1",
        job_id="j1",
        resreq=total,
        init_resreq=total.clone(),
        containers=infos,
        qos=QosClass.GUARANTEED,
        annotations=annotations or {},
    )


def plugin() -> NumaAwarePlugin:
    return NumaAwarePlugin(Arguments({"weight": 2}, plugin="numa-aware"))


def test_gpu_request_that_cannot_be_aligned_names_container_and_free_per_numa() -> None:
    status = plugin().predicate(task(("train", 0, 4)), node(topology()))
    assert status.code is StatusCode.UNSCHEDULABLE
    assert "container train: nvidia.com/gpu 4 cannot be aligned on 1 NUMA node (free per NUMA: 0->3, 1->1)" in (
        status.reason
    )


def test_aligned_cpus_and_gpus_on_one_numa_node() -> None:
    numa_plugin = plugin()
    the_node = node(topology())
    the_task = task(("train", 2, 2))
    assert numa_plugin.predicate(the_task, the_node).passed
    outcome = numa_plugin.place(the_task, the_node)
    assert isinstance(outcome, Placement)
    assert outcome.allocation is not None
    (container,) = outcome.allocation.containers
    assert container.cpuset.is_subset(IdSet(range(4)))
    assert len(container.cpuset) == 2
    assert set(container.devices[GPU]) <= {"0", "1", "2"}
    assert container.numa == NumaMask.of(0)


def test_later_container_sees_what_earlier_took() -> None:
    numa_plugin = plugin()
    outcome = numa_plugin.place(task(("a", 3, 0), ("b", 3, 0)), node(topology()))
    assert isinstance(outcome, Placement)
    allocation = outcome.allocation
    assert allocation is not None
    first, second = allocation.containers
    assert not (first.cpuset & second.cpuset)
    assert first.numa != second.numa


def test_init_container_cpus_are_reused_by_app_container() -> None:
    the_task = task(("app", 4, 0))
    init = ContainerInfo("init", Resource(4000, 1 << 30), Resource(), init=True)
    the_task.containers = (init, *the_task.containers)
    outcome = plugin().place(the_task, node(topology()))
    assert isinstance(outcome, Placement)
    allocation = outcome.allocation
    assert allocation is not None
    by_name = {c.name: c.cpuset for c in allocation.containers}
    assert by_name["init"] == by_name["app"]


def test_pod_scope_rejects_what_container_scope_admits() -> None:
    the_task = task(("a", 3, 0), ("b", 3, 0))
    assert plugin().predicate(the_task, node(topology())).passed
    status = plugin().predicate(the_task, node(topology(scope=TopologyScope.POD)))
    assert status.code is StatusCode.UNSCHEDULABLE
    assert "pod default/p1: cpu 6 cannot be aligned on 1 NUMA node" in status.reason


def test_bad_policy_annotation_names_valid_values() -> None:
    status = plugin().predicate(task(("a", 1, 0), annotations={POLICY_ANNOTATION: "strict"}), node(topology()))
    assert status.code is StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "none, best-effort, restricted, single-numa-node" in status.reason


def test_pods_alike_share_the_read_annotation_but_each_refusal_names_its_own_pod() -> None:
    shared = plugin()
    first = task(("a", 1, 0), annotations={POLICY_ANNOTATION: "strict"})
    second = attrs.evolve(first, uid="u2", name="p2", annotations=dict(first.annotations))
    assert "pod default/p1: " in shared.pre_predicate(first).reason
    assert "pod default/p2: " in shared.pre_predicate(second).reason
    # Another value of the annotation, or another shape, is read afresh.
    fine = attrs.evolve(first, uid="u3", name="p3", annotations={POLICY_ANNOTATION: "restricted"})
    assert shared.pre_predicate(fine).passed
    # The cpuset annotation reads the containers' cpu limits: pods that differ only there differ.
    pinned = task(("a", 2, 0), annotations={CPUSET_ANNOTATION: "true"})
    whole = attrs.evolve(pinned, containers=(attrs.evolve(pinned.containers[0], limits=Resource(2000, 1 << 30)),))
    part = attrs.evolve(
        whole, uid="u4", name="p4", containers=(attrs.evolve(whole.containers[0], limits=Resource(1500, 1 << 30)),)
    )
    assert shared.pre_predicate(whole).passed
    assert "pod default/p4: " in shared.pre_predicate(part).reason
    assert "no container has a whole-number cpu limit" in shared.pre_predicate(part).reason


def test_pod_policy_stricter_than_node_is_enforced() -> None:
    the_task = task(("train", 0, 4))
    best_effort_node = node(topology(TopologyPolicy.BEST_EFFORT))
    assert plugin().predicate(the_task, best_effort_node).passed
    the_task.annotations[POLICY_ANNOTATION] = "single-numa-node"
    assert plugin().predicate(the_task, best_effort_node).code is StatusCode.UNSCHEDULABLE


def test_node_without_topology_passes_unless_pod_demands_a_policy() -> None:
    allowing = NumaAwarePlugin(Arguments({"unknown-topology": "allow"}, plugin="numa-aware"))
    assert allowing.predicate(task(("a", 1, 0)), node(None)).passed
    demanding = task(("a", 1, 0), annotations={POLICY_ANNOTATION: "restricted"})
    status = allowing.predicate(demanding, node(None))
    assert status.code is StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.reason == "node(s) had no usable NUMA topology (missing); pod asks for restricted"


def test_too_many_numa_nodes_for_the_kubelet() -> None:
    topo = topology()
    many = NumaTopology(node_name="n1", numa_ids=tuple(range(9)), policies=topo.policies)
    status = plugin().predicate(task(("a", 1, 0)), node(many))
    assert status.code is StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "more than 8 NUMA nodes" in status.reason
    # The kubelet's max-allowable-numa-nodes option raises the limit; at 8 NUMA nodes or fewer no
    # policy is refused on this ground.
    raised = attrs.evolve(topo.policies, topology_manager_options={"max-allowable-numa-nodes": "12"})
    allowed = plugin().predicate(task(("a", 1, 0)), node(attrs.evolve(many, policies=raised)))
    assert "NUMA nodes" not in allowed.reason
    eight = NumaTopology(node_name="n1", numa_ids=tuple(range(8)), policies=topo.policies)
    assert "NUMA nodes" not in plugin().predicate(task(("a", 1, 0)), node(eight)).reason


def test_scores_follow_volcano_normalisation() -> None:
    assert normalized_scores(np.array([1.0, 2.0, 0.0]), 2).tolist() == [100.0, 0.0, 200.0]
    assert normalized_scores(np.array([0.0, 0.0]), 1).tolist() == [100.0, 100.0]
    # A node without an admission (-1) scores 0 and does not set the highest count.
    assert normalized_scores(np.array([1.0, -1.0, 3.0]), 1).tolist() == [67.0, 0.0, 0.0]
    assert normalized_scores(np.array([-1.0, -1.0]), 3).tolist() == [0.0, 0.0]
    assert normalized_scores(np.array([], dtype=np.float64), 1).tolist() == []


@given(st.lists(st.integers(-1, 8), max_size=40), st.integers(1, 10))
def test_scores_follow_volcano_normalisation_for_any_counts(counts: list[int], weight: int) -> None:
    # Volcano's reverse NormalizeScore, element by element: 100 - 100 * count / highest in integer
    # arithmetic over the nodes with an admission, times the weight.
    highest = max([count for count in counts if count >= 0], default=0)
    expected = [
        0.0 if count < 0 else float((100 - (100 * count // highest if highest else 0)) * weight) for count in counts
    ]
    scores = normalized_scores(np.array(counts, dtype=np.float64), weight)
    assert scores.tolist() == expected
    scores += 1.0  # the caller adds to the scores in place


def test_batch_node_order_prefers_single_numa_placement() -> None:
    numa_plugin = plugin()
    narrow = node(topology(TopologyPolicy.BEST_EFFORT))
    wide = node(topology(TopologyPolicy.BEST_EFFORT))
    wide.name = "n2"
    wide.numa_usage.cpus = IdSet([0, 1, 4, 5])
    the_task = task(("a", 4, 0))
    scores = numa_plugin.batch_node_order(the_task, [narrow, wide])
    # Volcano: 100 - 100 * 1 // 2 = 50 for one NUMA node against two, times weight 2.
    assert scores == {"n1": 100.0, "n2": 0.0}
