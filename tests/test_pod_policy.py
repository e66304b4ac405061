"""Pod-level topology policy (docs/policies.md, "Pod-level policy"): the annotations and their
precedence, who enforces a pod's CPUs on which node, singleNUMANodeExclusive, static-burst, and
the agent's plan for what was decided. Expectations are worked out by hand from ACK's and
Koordinator's documents; hack/kubelet_model.py judges the agent-pinned placements as the kubelet
would judge the same pod under the pod's policy."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from conftest import load_hack_module, load_machine

from numasched.api.allocation import ALLOCATION_ANNOTATION, ContainerAllocation, PodAllocation, allocation_from_json
from numasched.api.idset import IdSet
from numasched.api.numamask import NumaMask
from numasched.api.resource import Resource
from numasched.api.task import ContainerInfo, QosClass, TaskInfo
from numasched.api.topology import CpuInfo, CpuManagerPolicy, KubeletPolicies, NumaTopology, TopologyPolicy
from numasched.cache.cache import Cache
from numasched.cache.machine_shapes import machine_objects
from numasched.cache.simcluster import SimCluster
from numasched.conf.loader import load_config_text
from numasched.exporter.enforce_plan import plan_pod, pod_view
from numasched.plugins.numaaware.exclusivity import (
    NumaOccupancy,
    avoid_sets,
    conflict,
    occupancy,
    without_numa,
)
from numasched.plugins.numaaware.pod_policy import (
    Enforcer,
    Exclusivity,
    PodPolicyError,
    PodTopologySpec,
    effective_policy,
    enforcer,
    read_pod_spec,
)
from numasched.plugins.numaaware.providers.base import FreeResources
from numasched.plugins.numaaware.providers.cpu_burst import burst_allocation, burst_cpus
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.simulate import simulate

kubelet: Any = load_hack_module("kubelet_model")

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "podpolicy"
ACK = "scheduling.alibabacloud.com/numa-topology-spec"
KOORD = "scheduling.koordinator.sh/numa-topology-spec"
VOLCANO = "volcano.sh/numa-topology-policy"


def task(
    annotations: dict[str, str], *, request: str = "2", limit: str = "4", qos: QosClass = QosClass.BURSTABLE
) -> TaskInfo:
    milli = {"2": 2000.0, "4": 4000.0, "2.5": 2500.0, "1": 1000.0}
    container = ContainerInfo("main", Resource(milli[request]), Resource(milli[limit]))
    return TaskInfo(
        uid="u1",
        namespace="ns",
        name="p",
        job_id="j",
        resreq=Resource(milli[request]),
        init_resreq=Resource(milli[request]),
        containers=(container,),
        qos=qos,
        annotations=annotations,
    )


# -- the annotations ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({}, PodTopologySpec()),
        ({VOLCANO: "single-numa-node"}, PodTopologySpec(TopologyPolicy.SINGLE_NUMA_NODE, policy_source=VOLCANO)),
        # Koordinator's default: a named policy without exclusivity is Required.
        (
            {KOORD: '{"numaTopologyPolicy": "Restricted"}'},
            PodTopologySpec(TopologyPolicy.RESTRICTED, Exclusivity.REQUIRED, policy_source=KOORD),
        ),
        (
            {ACK: '{"numaTopologyPolicy": "SingleNUMANode", "singleNUMANodeExclusive": "Preferred"}'},
            PodTopologySpec(TopologyPolicy.SINGLE_NUMA_NODE, Exclusivity.PREFERRED, policy_source=ACK),
        ),
        # Precedence: ACK's spec, then Koordinator's, then Volcano's.
        (
            {
                VOLCANO: "restricted",
                KOORD: '{"numaTopologyPolicy": "BestEffort"}',
                ACK: '{"numaTopologyPolicy": "SingleNUMANode", "singleNUMANodeExclusive": "Preferred"}',
            },
            PodTopologySpec(TopologyPolicy.SINGLE_NUMA_NODE, Exclusivity.PREFERRED, policy_source=ACK),
        ),
        (
            {VOLCANO: "restricted", KOORD: '{"numaTopologyPolicy": "BestEffort"}'},
            PodTopologySpec(TopologyPolicy.BEST_EFFORT, Exclusivity.REQUIRED, policy_source=KOORD),
        ),
        # A spec naming no policy leaves it to the next annotation.
        ({KOORD: "{}", VOLCANO: "restricted"}, PodTopologySpec(TopologyPolicy.RESTRICTED, policy_source=VOLCANO)),
        ({"cpuset-scheduler": "true"}, PodTopologySpec(cpuset=True)),
        ({"cpuset-scheduler": "required"}, PodTopologySpec(cpuset=True)),
        ({"cpuset-scheduler": "false"}, PodTopologySpec()),
        ({"cpu-policy": "static-burst"}, PodTopologySpec(cpuset=True, static_burst=True)),
    ],
)
def test_spec_from_annotations(annotations: dict[str, str], expected: PodTopologySpec) -> None:
    assert read_pod_spec(task(annotations)) == expected


@pytest.mark.parametrize(
    ("annotations", "named"),
    [
        ({KOORD: "SingleNUMANode"}, f"annotation {KOORD}: 'SingleNUMANode' is not JSON"),
        ({ACK: '["SingleNUMANode"]'}, f"annotation {ACK}: '[\"SingleNUMANode\"]' must be a JSON object"),
        ({ACK: '{"numaTopologyPolicy": "single-numa-node"}'}, "has numaTopologyPolicy 'single-numa-node'; valid:"),
        ({KOORD: '{"singleNUMANodeExclusive": "Always"}'}, "has singleNUMANodeExclusive 'Always'"),
        ({KOORD: '{"numaTopologypolicy": "Restricted"}'}, "has unknown field(s) numaTopologypolicy"),
        # A bad lower-precedence value is reported, not hidden by the winner.
        ({ACK: '{"numaTopologyPolicy": "Restricted"}', VOLCANO: "strict"}, f"annotation {VOLCANO}: unknown topology"),
        ({"cpuset-scheduler": "yes"}, 'annotation cpuset-scheduler: \'yes\' is not "true", "required" or "false"'),
        ({"cpu-policy": "static"}, "annotation cpu-policy: 'static' is not \"static-burst\""),
    ],
)
def test_bad_annotation_names_annotation_and_value(annotations: dict[str, str], named: str) -> None:
    with pytest.raises(PodPolicyError) as raised:
        read_pod_spec(task(annotations))
    assert named in str(raised.value)


def test_cpuset_needs_a_whole_cpu_limit() -> None:
    with pytest.raises(PodPolicyError, match="no container has a whole-number cpu limit"):
        read_pod_spec(task({"cpuset-scheduler": "true"}, request="2", limit="2.5"))


# -- who enforces -------------------------------------------------------------------------------------

STATIC = KubeletPolicies(cpu_manager_policy=CpuManagerPolicy.STATIC)
NONE = KubeletPolicies(cpu_manager_policy=CpuManagerPolicy.NONE)


@pytest.mark.parametrize(
    ("spec", "qos", "policies", "expected"),
    [
        (PodTopologySpec(), QosClass.BURSTABLE, STATIC, Enforcer.KUBELET),
        (PodTopologySpec(cpuset=True), QosClass.BURSTABLE, NONE, Enforcer.AGENT),
        (PodTopologySpec(cpuset=True), QosClass.GUARANTEED, NONE, Enforcer.AGENT),
        (PodTopologySpec(cpuset=True), QosClass.GUARANTEED, STATIC, Enforcer.KUBELET),
        (PodTopologySpec(cpuset=True), QosClass.BURSTABLE, STATIC, "static CPU manager"),
    ],
)
def test_enforcer(spec: PodTopologySpec, qos: QosClass, policies: KubeletPolicies, expected: Enforcer | str) -> None:
    found = enforcer(spec, task({}, qos=qos), policies)
    if isinstance(expected, str):
        assert isinstance(found, str) and expected in found and "node(s)" in found
    else:
        assert found is expected


@pytest.mark.parametrize(
    ("requested", "node", "who", "expected"),
    [
        (None, TopologyPolicy.NONE, Enforcer.KUBELET, TopologyPolicy.NONE),
        (None, TopologyPolicy.NONE, Enforcer.AGENT, TopologyPolicy.BEST_EFFORT),
        (TopologyPolicy.SINGLE_NUMA_NODE, TopologyPolicy.NONE, Enforcer.AGENT, TopologyPolicy.SINGLE_NUMA_NODE),
        (TopologyPolicy.BEST_EFFORT, TopologyPolicy.RESTRICTED, Enforcer.AGENT, TopologyPolicy.RESTRICTED),
        (TopologyPolicy.RESTRICTED, TopologyPolicy.BEST_EFFORT, Enforcer.KUBELET, TopologyPolicy.RESTRICTED),
    ],
)
def test_effective_policy(
    requested: TopologyPolicy | None, node: TopologyPolicy, who: Enforcer, expected: TopologyPolicy
) -> None:
    assert effective_policy(PodTopologySpec(requested), node, who) is expected


# -- exclusivity --------------------------------------------------------------------------------------


def two_by_two() -> NumaTopology:
    """2 NUMA nodes x 2 L3 groups (CCX) x 4 cores x 2 threads: CCX g holds cores 4g..4g+3,
    threads c and c+16."""
    cpus = []
    for core in range(16):
        for thread in (core, core + 16):
            cpus.append(CpuInfo(thread, core, 0, core // 8, core // 4))
    return NumaTopology("n", (0, 1), tuple(cpus))


def test_occupancy_and_conflict_follow_koordinator() -> None:
    topology = two_by_two()
    single0 = PodAllocation((ContainerAllocation("a", IdSet([0, 16])),))
    spanning12 = PodAllocation((ContainerAllocation("b", IdSet(), NumaMask.from_ids([1, 2])),))
    state = occupancy([single0, spanning12], topology)
    assert state == NumaOccupancy(frozenset({0}), frozenset({1, 2}))
    # A single-NUMA placement may not take a shared NUMA node; a spanning one no single one.
    assert conflict(NumaMask.from_ids([1]), state) == frozenset({1})
    assert conflict(NumaMask.from_ids([0]), state) == frozenset()
    assert conflict(NumaMask.from_ids([0, 1]), state) == frozenset({0})
    assert conflict(NumaMask.from_ids([1, 2]), state) == frozenset()
    # A NUMA node with both kinds is shared, not single.
    both = NumaOccupancy(frozenset({0}), frozenset({0, 1}))
    assert conflict(NumaMask.from_ids([0, 2]), both) == frozenset()
    assert avoid_sets(state) == [frozenset({1, 2}), frozenset({0}), frozenset({0, 1, 2})]


def test_without_numa_leaves_out_cpus_and_memory() -> None:
    topology = two_by_two()
    free = FreeResources(cpus=IdSet(range(32)), memory={"memory": {0: 10, 1: 20}})
    left = without_numa(free, frozenset({0}), topology)
    assert left.cpus == IdSet([*range(8, 16), *range(24, 32)])
    assert dict(left.memory["memory"]) == {0: 0, 1: 20}


# -- static-burst -------------------------------------------------------------------------------------


def test_burst_rounds_up_to_the_whole_ccx() -> None:
    topology = two_by_two()
    free = IdSet(range(32))
    # 6 threads of CCX 0 (cores 0-2 and their siblings) become all 8 of CCX 0.
    assert burst_cpus(IdSet([0, 1, 2, 16, 17, 18]), topology, free) == IdSet([0, 1, 2, 3, 16, 17, 18, 19])
    # Only free CPUs are added: core 3's threads are held by someone else.
    assert burst_cpus(IdSet([0, 1, 2, 16, 17, 18]), topology, free - IdSet([3, 19])) == IdSet([0, 1, 2, 16, 17, 18])
    # CPUs on two NUMA nodes stay exactly as asked.
    assert burst_cpus(IdSet([7, 8]), topology, free) == IdSet([7, 8])


def test_burst_allocation_keeps_containers_apart() -> None:
    topology = two_by_two()
    allocation = PodAllocation(
        (ContainerAllocation("a", IdSet([0, 16])), ContainerAllocation("b", IdSet([1, 17])), ContainerAllocation("c"))
    )
    burst = burst_allocation(allocation, topology, IdSet(range(32)))
    a, b, c = (container.cpuset for container in burst.containers)
    assert a == IdSet([0, 1, 2, 3, 16, 17, 18, 19]) - IdSet([1, 17])
    assert b == IdSet([1, 17])
    assert not c


# -- end to end: simulate on the fixtures ------------------------------------------------------------

CONFIG = (Path(__file__).resolve().parent.parent / "conf" / "examples" / "scheduler.conf").read_text()


def load_cluster(workload: list[dict[str, Any]], cpu_manager_policy: str = "none") -> SimCluster:
    cluster = SimCluster(Cache())
    if cpu_manager_policy == "none":
        for document in yaml.safe_load_all((FIXTURES / "cluster.yaml").read_text()):
            cluster.add(document)
    else:
        node, topology = machine_objects(
            load_machine("epyc-1s-nps4"),
            "epyc-static",
            topology_policy=TopologyPolicy.NONE,
            cpu_manager_policy=cpu_manager_policy,
        )
        cluster.add(node)
        cluster.add(topology)
    for document in workload:
        cluster.add(document)
    return cluster


def run(cluster: SimCluster) -> None:
    registry = default_registry()
    config = load_config_text(CONFIG, "test", registry.known_plugin_names(), registry.known_action_names())
    anyio.run(lambda: simulate(cluster, config, registry, max_cycles=10, progress=False))


def decided(cluster: SimCluster, name: str) -> tuple[str, PodAllocation | None]:
    obj = cluster.objects["Pod"][f"default/{name}"]
    text = obj["metadata"].get("annotations", {}).get(ALLOCATION_ANNOTATION)
    return obj["spec"].get("nodeName", ""), allocation_from_json(text) if text else None


def fixture_workload() -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((FIXTURES / "workload.yaml").read_text()))


def numa_of(cpus: IdSet) -> set[int]:
    return {cpu % 64 // 16 for cpu in cpus}


def test_fixture_scenario() -> None:
    cluster = load_cluster(fixture_workload())
    run(cluster)
    placed = {name: decided(cluster, name) for name in ("etl", "db", "web", "cache")}
    assert all(node == "epyc-none" for node, _ in placed.values())
    cpus = {name: allocation.cpus() for name, (_, allocation) in placed.items() if allocation is not None}
    # etl: 40 CPUs, no NUMA node holds them: spans two.
    assert len(cpus["etl"]) == 40 and numa_of(cpus["etl"]) == {0, 1}
    # db (SingleNUMANode, Required by default): off NUMA 0 and 1 (etl's), though NUMA 0 has room.
    assert len(cpus["db"]) == 8 and numa_of(cpus["db"]) == {2}
    # web: Burstable, limits.cpu 4: 4 CPUs pinned on one NUMA node.
    assert len(cpus["web"]) == 4 and len(numa_of(cpus["web"])) == 1
    # cache: static-burst 6 -> the whole L3 group 1 (cores 8-15 and their siblings), the first
    # group with 6 free CPUs left after etl (cores 1-4) and web took from group 0.
    assert cpus["cache"] == IdSet.parse("8-15,72-79")
    # Nobody shares a CPU; the reserved CPUs 0 and 64 are no one's.
    everything = [cpu for group in cpus.values() for cpu in group]
    assert len(everything) == len(set(everything)) and not {0, 64} & set(everything)
    # A bad value waits, with a message naming the annotation and the value.
    typo = [e.message for e in cluster.events if e.name == "default/typo" and e.reason == "FailedScheduling"]
    assert typo and KOORD in typo[-1] and "'SingleNumaNode'" in typo[-1]
    assert not cluster.objects["Pod"]["default/typo"]["spec"].get("nodeName")


def test_without_exclusivity_db_would_share_numa_0() -> None:
    # The control for the scenario above: Volcano's annotation has no exclusivity, so db takes the
    # lowest NUMA node with room, NUMA 0, which etl spans.
    workload = fixture_workload()
    db = next(doc for doc in workload if doc["metadata"]["name"] == "db")
    db["metadata"]["annotations"] = {"cpuset-scheduler": "true", VOLCANO: "single-numa-node"}
    cluster = load_cluster(workload)
    run(cluster)
    _, allocation = decided(cluster, "db")
    assert allocation is not None and numa_of(allocation.cpus()) == {0}


def test_static_node_refuses_a_burstable_cpuset_pod() -> None:
    web = next(doc for doc in fixture_workload() if doc["metadata"]["name"] == "web")
    cluster = load_cluster([web], cpu_manager_policy="static")
    run(cluster)
    assert not cluster.objects["Pod"]["default/web"]["spec"].get("nodeName")
    messages = [e.message for e in cluster.events if e.name == "default/web" and e.reason == "FailedScheduling"]
    assert messages and "static CPU manager" in messages[-1]


def test_burst_cpus_are_read_back_and_kept_from_the_next_pod() -> None:
    # Alone on the node, a static-burst pod of 6 CPUs gets L3 group 0 whole but for the reserved
    # CPUs 0 and 64 (14 CPUs). The cache reads them back from its annotation in the next cycle, and
    # the next static-burst pod gets group 1 whole (16 CPUs), none of the first's.
    workload = fixture_workload()
    cache_pod = next(doc for doc in workload if doc["metadata"]["name"] == "cache")
    cluster = load_cluster([cache_pod])
    run(cluster)
    _, first = decided(cluster, "cache")
    assert first is not None and first.cpus() == IdSet.parse("1-7,65-71")
    second = json.loads(json.dumps(cache_pod))
    second["metadata"]["name"] = "cache-2"
    cluster.add(second)
    run(cluster)
    _, again = decided(cluster, "cache-2")
    assert again is not None and again.cpus() == IdSet.parse("8-15,72-79")


def test_agent_plans_exactly_the_decided_cpus() -> None:
    # What numasched wrote is what the agent pins: the Burstable web pod on a none node, running.
    web = next(doc for doc in fixture_workload() if doc["metadata"]["name"] == "web")
    cluster = load_cluster([web])
    run(cluster)
    pod = json.loads(json.dumps(cluster.objects["Pod"]["default/web"]))
    pod["metadata"]["uid"] = "web-uid"
    pod["status"] = {
        "qosClass": "Burstable",
        "containerStatuses": [{"name": "main", "containerID": "containerd://" + "a" * 64, "state": {"running": {}}}],
    }
    _, allocation = decided(cluster, "web")
    assert allocation is not None
    node_cpus = {cpu: cpu % 64 // 16 for cpu in range(128)}
    plan = plan_pod(pod_view(pod), static_cpu_manager=False, numa_of_cpu=node_cpus)
    assert [target.cpus for target in plan.targets] == [allocation.cpus()]
    assert [target.mems for target in plan.targets] == [IdSet(numa_of(allocation.cpus()))]


@pytest.mark.parametrize(
    ("limit", "policy", "admitted"),
    [
        (4, "single-numa-node", True),
        (30, "single-numa-node", True),
        (33, "single-numa-node", False),
        (40, "restricted", True),
    ],
)
def test_agent_pinned_pod_is_what_the_kubelet_would_admit_under_the_pods_policy(
    limit: int, policy: str, admitted: bool
) -> None:
    # The oracle: the kubelet model of the same machine with the static CPU manager and the pod's
    # policy, given the Guaranteed pod of limits.cpu CPUs. NUMA node 0 has 30 allocatable CPUs.
    spec = {"single-numa-node": "SingleNUMANode", "restricted": "Restricted"}[policy]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "default",
            "annotations": {"cpuset-scheduler": "true", ACK: json.dumps({"numaTopologyPolicy": spec})},
        },
        "spec": {
            "schedulerName": "numasched",
            "containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": str(limit)}}}],
        },
    }
    cluster = load_cluster([pod])
    run(cluster)
    node, allocation = decided(cluster, "p")
    model = kubelet.node_from_machine(
        load_machine("epyc-1s-nps4"), "m", reserved_cpus=[0, 64], topology_policy=policy, cpu_manager_policy="static"
    )
    guaranteed = kubelet.pod_from_object(
        {
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "main", "resources": {"limits": {"cpu": str(limit), "memory": "1Gi"}}}]},
        }
    )
    verdict = kubelet.admit(kubelet.NodeState.empty(model), guaranteed)
    assert verdict.admitted is admitted
    assert bool(node) is admitted
    if admitted:
        assert allocation is not None and len(allocation.cpus()) == limit
        assert numa_of(allocation.cpus()) == set(kubelet.numa_of_ids(model, verdict.cpus, {}))


def static_cluster(pods: list[dict[str, Any]]) -> SimCluster:
    cluster = SimCluster(Cache())
    for name in ("node-a", "node-b"):
        node, topology = machine_objects(
            load_machine("epyc-1s-nps4"), name, topology_policy=TopologyPolicy.NONE, cpu_manager_policy="static"
        )
        cluster.add(node)
        cluster.add(topology)
    for obj in pods:
        cluster.add(obj)
    return cluster


def guaranteed(
    name: str, cpus: int, *, node: str = "", pinned: str = "", annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "default", "annotations": dict(annotations or {})}
    if pinned:
        metadata["annotations"][ALLOCATION_ANNOTATION] = json.dumps({"containers": {"main": {"cpuset": pinned}}})
    resources = {"cpu": str(cpus), "memory": "1Gi"}
    spec: dict[str, Any] = {
        "schedulerName": "numasched",
        "containers": [{"name": "main", "resources": {"requests": resources, "limits": resources}}],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@pytest.mark.parametrize(
    ("annotations", "expected_node"),
    [
        # Control: no exclusivity; the scores prefer node-a, the less used.
        ({VOLCANO: "single-numa-node"}, "node-a"),
        # Preferred: on node-a the kubelet would put the pod on NUMA 0, which a spanning pod uses;
        # node-b keeps the rule and wins.
        ({ACK: '{"numaTopologyPolicy": "SingleNUMANode", "singleNUMANodeExclusive": "Preferred"}'}, "node-b"),
        # Required: node-a is ruled out (the kubelet pins this Guaranteed pod: no other NUMA node
        # can be chosen for it there).
        ({ACK: '{"numaTopologyPolicy": "SingleNUMANode"}'}, "node-b"),
    ],
)
def test_exclusivity_for_kubelet_pinned_pods(annotations: dict[str, str], expected_node: str) -> None:
    cluster = static_cluster(
        [
            guaranteed("spanning", 4, node="node-a", pinned="1-2,16-17"),
            guaranteed("single", 10, node="node-b", pinned="1-10"),
            guaranteed("new", 4, annotations=annotations),
        ]
    )
    run(cluster)
    node, allocation = decided(cluster, "new")
    assert node == expected_node
    assert allocation is not None and numa_of(allocation.cpus()) == {0}


def test_ack_gpu_example_on_a_node_whose_kubelet_aligns_nothing() -> None:
    # ACK's example: 4 GPUs and 24 CPUs, SingleNUMANode by the pod's own spec, on a node whose
    # kubelet runs cpuManagerPolicy none and topologyManagerPolicy none. GPUs 0 and 1 (NUMA 0) are
    # held, so only NUMA 1 holds 4 free GPUs: the GPUs 4-7 and 24 CPUs of NUMA 1, pinned by the agent.
    cluster = SimCluster(Cache())
    node, topology = machine_objects(
        load_machine("pcie-8gpu-2numa"), "gpu-none", topology_policy=TopologyPolicy.NONE, cpu_manager_policy="none"
    )
    cluster.add(node)
    cluster.add(topology)
    holder = guaranteed("holder", 2, node="gpu-none")
    holder["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    holder["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "2"
    holder["metadata"]["annotations"][ALLOCATION_ANNOTATION] = json.dumps(
        {"containers": {"main": {"devices": {"nvidia.com/gpu": ["0", "1"]}}}}
    )
    train = guaranteed(
        "train",
        24,
        annotations={"cpuset-scheduler": "true", ACK: '{"numaTopologyPolicy": "SingleNUMANode"}'},
    )
    train["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "4"
    train["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "4"
    cluster.add(holder)
    cluster.add(train)
    run(cluster)
    node_name, allocation = decided(cluster, "train")
    assert node_name == "gpu-none" and allocation is not None
    assert set(allocation.devices("nvidia.com/gpu")) == {"4", "5", "6", "7"}
    assert len(allocation.cpus()) == 24 and allocation.cpus().is_subset(IdSet.parse("32-63,96-127"))
    assert allocation.numa() == NumaMask.from_ids([1])
