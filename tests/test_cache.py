from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import load_machine

from numasched.api.allocation import ALLOCATION_ANNOTATION, ContainerAllocation, PodAllocation, allocation_to_json
from numasched.api.idset import IdSet
from numasched.api.task import QosClass, TaskStatus
from numasched.api.topology import TopologyPolicy
from numasched.cache.cache import Cache
from numasched.cache.convert_pod import ConversionError, pod_to_task
from numasched.cache.events import EventType, ObjectEvent
from numasched.cache.machine_shapes import machine_objects


def pod(
    name: str,
    *,
    cpu: str | None = "2",
    memory: str | None = "1Gi",
    limits: bool = True,
    node: str = "",
    scheduler: str = "numasched",
    annotations: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    resources: dict[str, Any] = {}
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    if requests:
        resources["requests"] = requests
        if limits:
            resources["limits"] = dict(requests)
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [{"name": "main", "resources": resources}]}
    if node:
        spec["nodeName"] = node
    spec.update(extra or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "annotations": annotations or {}},
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


def add(cache: Cache, kind: str, obj: dict[str, Any]) -> None:
    cache.apply(ObjectEvent(kind, EventType.ADDED, obj))


def test_qos_classes_and_effective_request_with_init_and_sidecar() -> None:
    guaranteed = pod_to_task(pod("g"))
    assert guaranteed.qos is QosClass.GUARANTEED
    assert pod_to_task(pod("b", limits=False)).qos is QosClass.BURSTABLE
    assert pod_to_task(pod("be", cpu=None, memory=None)).qos is QosClass.BEST_EFFORT
    with_init = pod(
        "init",
        extra={
            "initContainers": [
                {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
                {"name": "setup", "resources": {"requests": {"cpu": "4"}}},
            ]
        },
    )
    task = pod_to_task(with_init)
    # max(app 2 + sidecar 1, setup 4 + sidecar 1) = 5 CPUs
    assert task.resreq.milli_cpu == 5000
    assert [c.name for c in task.containers] == ["sidecar", "setup", "main"]
    assert task.containers[0].sidecar and not task.containers[1].sidecar


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        ({"kind": "Pod", "metadata": {}}, "metadata.name is missing"),
        (pod("q", cpu="lots"), "spec.containers\\[0\\].resources.requests: resource cpu: invalid quantity"),
        ({"kind": "Pod", "metadata": {"name": "x"}, "spec": {"containers": []}}, "spec.containers is empty"),
        (pod("p", extra={"priority": "high"}), "spec.priority"),
    ],
)
def test_bad_pods_are_reported_with_their_name(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(ConversionError, match=message):
        pod_to_task(obj)


def test_a_bad_object_is_reported_and_skipped_the_rest_continue() -> None:
    problems: list[tuple[str, str, str]] = []
    cache = Cache(on_problem=lambda kind, name, message: problems.append((kind, name, message)))
    node, topology = machine_objects(load_machine("dgx1-v100"), "n1")
    add(cache, "Node", node)
    add(cache, "Numatopology", topology)
    add(cache, "Pod", pod("bad", cpu="2 cores"))
    add(cache, "Pod", pod("good"))
    add(cache, "Widget", {"metadata": {"name": "w"}})
    snapshot = cache.snapshot()
    assert [task.name for job in snapshot.jobs.values() for task in job.tasks.values()] == ["good"]
    assert [(kind, name) for kind, name, _ in problems] == [("Pod", "default/bad"), ("Widget", "w")]
    assert "invalid quantity" in cache.problems[("Pod", "default/bad")]
    # Fixing the object clears the problem.
    add(cache, "Pod", pod("bad"))
    assert ("Pod", "default/bad") not in cache.problems


def test_snapshot_accounts_bound_pods_of_any_scheduler_and_rebuilds_the_ledger() -> None:
    cache = Cache()
    node, topology = machine_objects(load_machine("dgx1-v100"), "n1")
    add(cache, "Node", node)
    add(cache, "Numatopology", topology)
    allocation = PodAllocation((ContainerAllocation("main", IdSet.parse("2-3"), devices={"nvidia.com/gpu": ("0",)}),))
    add(cache, "Pod", pod("ours", node="n1", annotations={ALLOCATION_ANNOTATION: allocation_to_json(allocation)}))
    add(cache, "Pod", pod("theirs", node="n1", scheduler="default-scheduler", cpu="4"))
    add(cache, "Pod", pod("pending-theirs", scheduler="default-scheduler"))
    snapshot = cache.snapshot()
    n1 = snapshot.nodes["n1"]
    assert n1.used.milli_cpu == 6000
    assert n1.idle.milli_cpu == (80 - 2 - 6) * 1000
    assert n1.numa_usage.cpus.format() == "2-3"
    assert n1.free_devices("nvidia.com/gpu") == ("1", "2", "3", "4", "5", "6", "7")
    assert "default/pending-theirs" not in snapshot.jobs
    # The snapshot is a copy: changing it leaves the cache alone.
    n1.idle.milli_cpu = 0
    assert cache.snapshot().nodes["n1"].idle.milli_cpu == 72000


def test_node_reported_allocations_override_our_annotation() -> None:
    cache = Cache()
    node, topology = machine_objects(load_machine("dgx1-v100"), "n1")
    ours = PodAllocation((ContainerAllocation("main", IdSet.parse("2-3")),))
    topology["spec"]["podAllocations"] = {
        "default/ours": {"uid": "uid-ours", "containers": {"main": {"cpuset": "4-5"}}}
    }
    add(cache, "Node", node)
    add(cache, "Numatopology", topology)
    add(cache, "Pod", pod("ours", node="n1", annotations={ALLOCATION_ANNOTATION: allocation_to_json(ours)}))
    assert cache.snapshot().nodes["n1"].numa_usage.cpus.format() == "4-5"


def test_assumed_pods_hold_their_resources_until_confirmed_or_forgotten() -> None:
    cache = Cache()
    node, topology = machine_objects(load_machine("dgx1-v100"), "n1")
    add(cache, "Node", node)
    add(cache, "Numatopology", topology)
    add(cache, "Pod", pod("p"))
    allocation = PodAllocation((ContainerAllocation("main", IdSet.parse("6-7")),))
    cache.assume("uid-p", "n1", allocation)
    snapshot = cache.snapshot()
    task = snapshot.jobs["default/p"].tasks["uid-p"]
    assert task.status is TaskStatus.BINDING
    assert snapshot.nodes["n1"].numa_usage.cpus.format() == "6-7"
    cache.forget("uid-p")
    assert cache.snapshot().nodes["n1"].numa_usage.cpus == IdSet()
    cache.assume("uid-p", "n1", allocation)
    bound = pod("p", node="n1", annotations={ALLOCATION_ANNOTATION: allocation_to_json(allocation)})
    cache.apply(ObjectEvent("Pod", EventType.MODIFIED, bound))
    assert cache.snapshot().jobs["default/p"].tasks["uid-p"].status is TaskStatus.RUNNING


def test_a_confirmed_binding_with_our_text_keeps_the_assumed_allocation_and_other_text_is_read() -> None:
    cache = Cache()
    node, topology = machine_objects(load_machine("dgx1-v100"), "n1")
    add(cache, "Node", node)
    add(cache, "Numatopology", topology)
    for name in ("p", "q", "r"):
        add(cache, "Pod", pod(name))
    ours = PodAllocation((ContainerAllocation("main", IdSet.parse("6-7")),))
    for name in ("p", "q", "r"):
        cache.assume(f"uid-{name}", "n1", ours)
    # p: bound as we wrote it. q: someone rewrote the annotation. r: bound to another node.
    cache.apply(
        ObjectEvent("Pod", EventType.MODIFIED, pod("p", node="n1", annotations={ALLOCATION_ANNOTATION: ours.json_text}))
    )
    theirs = PodAllocation((ContainerAllocation("main", IdSet.parse("8-9")),))
    cache.apply(
        ObjectEvent(
            "Pod",
            EventType.MODIFIED,
            pod("q", node="n1", annotations={ALLOCATION_ANNOTATION: allocation_to_json(theirs)}),
        )
    )
    add(cache, "Node", machine_objects(load_machine("dgx1-v100"), "n2")[0])
    cache.apply(
        ObjectEvent("Pod", EventType.MODIFIED, pod("r", node="n2", annotations={ALLOCATION_ANNOTATION: ours.json_text}))
    )
    tasks = {task.name: task for job in cache.snapshot().jobs.values() for task in job.tasks.values()}
    assert tasks["p"].allocation is ours
    assert tasks["q"].allocation == theirs
    assert tasks["r"].allocation == ours and tasks["r"].allocation is not ours
    assert cache.snapshot().nodes["n1"].numa_usage.cpus.format() == "6-9"


def test_a_bad_topology_leaves_the_node_without_numa_awareness() -> None:
    problems: list[str] = []
    cache = Cache(on_problem=lambda kind, name, message: problems.append(f"{kind} {name}: {message}"))
    node, topology = machine_objects(load_machine("dgx1-v100"), "n1")
    topology["spec"]["cpuDetail"]["3"] = {"numa": 99}
    add(cache, "Node", node)
    add(cache, "Numatopology", topology)
    snapshot = cache.snapshot()
    assert snapshot.nodes["n1"].topology is None
    assert "cpuDetail[3].numa" in snapshot.nodes["n1"].topology_error
    assert problems and problems[0].startswith("Numatopology n1:")


def test_bad_allocation_annotation_keeps_the_pods_resources_accounted() -> None:
    problems: list[str] = []
    cache = Cache(on_problem=lambda kind, name, message: problems.append(message))
    node, _ = machine_objects(load_machine("dgx1-v100"), "n1")
    add(cache, "Node", node)
    add(cache, "Pod", pod("p", node="n1", annotations={ALLOCATION_ANNOTATION: "{oops"}))
    assert cache.snapshot().nodes["n1"].used.milli_cpu == 2000
    assert "not tracked" in problems[0]


def test_gang_members_wait_for_their_pod_group() -> None:
    cache = Cache()
    add(cache, "Pod", pod("w0", annotations={"scheduling.k8s.io/group-name": "train"}))
    assert "default/train" not in cache.snapshot().jobs
    assert [t.name for t in cache.tasks_waiting_for_group()] == ["w0"]
    add(
        cache,
        "PodGroup",
        {"kind": "PodGroup", "metadata": {"name": "train", "namespace": "default"}, "spec": {"minMember": 1}},
    )
    job = cache.snapshot().jobs["default/train"]
    assert job.min_available == 1 and [t.name for t in job.tasks.values()] == ["w0"]


def test_numatopology_from_a_machine_converts_losslessly() -> None:
    from numasched.cache.convert_topology import numatopology_to_topology

    machine = load_machine("dgx-a100")
    _, obj = machine_objects(machine, "a100", topology_policy=TopologyPolicy.RESTRICTED)
    topology = numatopology_to_topology(obj)
    assert topology.numa_ids == tuple(range(8))
    assert len(topology.cpus) == 256
    assert topology.cpu_info[128].core == 0 and topology.cpu_info[128].numa == 0
    assert topology.cpu_info[16].numa == 1 and topology.cpu_info[16].l3 != topology.cpu_info[0].l3
    assert topology.reserved_cpus.format() == "0,128"
    assert topology.distance(0, 4) == 32 and topology.distance(0, 1) == 12
    assert topology.policies.topology_manager_policy is TopologyPolicy.RESTRICTED
    gpus = topology.devices["nvidia.com/gpu"]
    assert [(d.id, d.numa) for d in gpus.devices][:3] == [("0", 3), ("1", 3), ("2", 1)]
    link = topology.link(("nvidia.com/gpu", "0"), ("nvidia.com/gpu", "5"))
    assert link is not None and link.nvlinks == 12 and link.nvswitch


def test_bad_device_topology_falls_back_to_numa_only_device_choice() -> None:
    problems: list[str] = []
    cache = Cache(on_problem=lambda kind, name, message: problems.append(f"{kind} {name}: {message}"))
    node, topology = machine_objects(load_machine("dgx1-v100"), "n1")
    annotation = json.loads(topology["metadata"]["annotations"]["numasched.io/device-topology"])
    annotation["links"].append(
        {"a": ["nvidia.com/gpu", "0"], "b": ["nvidia.com/gpu", "9"], "nvlinks": 1, "nvswitch": False, "pcie": "SYS"}
    )
    topology["metadata"]["annotations"]["numasched.io/device-topology"] = json.dumps(annotation)
    add(cache, "Node", node)
    add(cache, "Numatopology", topology)
    converted = cache.snapshot().nodes["n1"].topology
    assert converted is not None and converted.links == {}
    gpus = converted.devices["nvidia.com/gpu"].devices
    assert [(d.id, d.numa) for d in gpus] == [(str(i), 0 if i < 4 else 1) for i in range(8)]
    assert len(problems) == 1 and "uses NUMA nodes only" in problems[0] and "9" in problems[0]


NRT = {
    "apiVersion": "topology.node.k8s.io/v1alpha2",
    "kind": "NodeResourceTopology",
    "metadata": {"name": "n1"},
    "topologyPolicies": ["SingleNUMANodeContainerLevel"],
    "attributes": [{"name": "topologyManagerScope", "value": "pod"}],
    "zones": [
        {
            "name": f"node-{numa}",
            "type": "Node",
            "costs": [
                {"name": "node-0", "value": 10 if numa == 0 else 21},
                {"name": "node-1", "value": 21 - 11 * numa},
            ],
            "resources": [
                {"name": "cpu", "capacity": "24", "allocatable": "22", "available": "22"},
                {"name": "memory", "capacity": "64Gi", "allocatable": "60Gi", "available": "60Gi"},
                {"name": "nvidia.com/gpu", "capacity": "2", "allocatable": "2", "available": "2"},
            ],
        }
        for numa in (0, 1)
    ],
}


def test_node_resource_topology_gives_counts_per_numa_node() -> None:
    from numasched.api.topology import TopologyScope
    from numasched.cache.convert_topology import nrt_to_topology

    topology = nrt_to_topology(NRT)
    assert topology.numa_ids == (0, 1)
    assert [len(topology.cpus_by_numa[n]) for n in (0, 1)] == [22, 22]
    assert topology.memory["memory"] == {0: 60 * 2**30, 1: 60 * 2**30}
    assert [d.numa for d in topology.devices["nvidia.com/gpu"].devices] == [0, 0, 1, 1]
    assert topology.policies.topology_manager_policy is TopologyPolicy.SINGLE_NUMA_NODE
    assert topology.policies.topology_manager_scope is TopologyScope.POD
    assert topology.distance(0, 1) == 21 and not topology.cpu_ids_known


def test_bindings_on_count_only_topologies_carry_numa_nodes_not_placeholder_ids() -> None:
    from numasched.api.node import NodeInfo
    from numasched.api.numamask import NumaMask
    from numasched.cache.binder import binding_annotations
    from numasched.cache.convert_topology import nrt_to_topology

    node = NodeInfo(name="n1", topology=nrt_to_topology(NRT))
    task = pod_to_task(pod("p"))
    task.allocation = PodAllocation(
        (ContainerAllocation("main", IdSet.parse("0-1"), NumaMask.of(0), {"nvidia.com/gpu": ("node-0-0",)}),)
    )
    annotations = binding_annotations(task, node)
    assert json.loads(annotations[ALLOCATION_ANNOTATION]) == {"containers": {"main": {"numa": [0]}}}
    assert json.loads(annotations["volcano.sh/topology-decision"]) == {"numa": {"0": {}}}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda obj: obj.update(zones=[]), "zones is missing or empty"),
        (lambda obj: obj["zones"][0].update(name="socket"), "expected a name like node-0"),
        (
            lambda obj: obj["zones"][0]["resources"][0].update(allocatable="lots"),
            "zones\\[node-0\\].resources\\[cpu\\].allocatable: invalid quantity",
        ),
        (
            lambda obj: obj.update(attributes=[{"name": "topologyManagerPolicy", "value": "strict"}]),
            "unknown value 'strict'",
        ),
    ],
)
def test_bad_node_resource_topologies_are_refused(mutate: Any, message: str) -> None:
    import copy

    from numasched.cache.convert_topology import nrt_to_topology

    obj = copy.deepcopy(NRT)
    mutate(obj)
    with pytest.raises(ConversionError, match=message):
        nrt_to_topology(obj)
