"""Property: on nodes whose free CPUs and devices are expressed ONLY as Volcano's resource-exporter
expresses them, every pod numasched binds is one the kubelet admits.

Each example draws nodes of the fixture machine shapes with a kubelet Topology Manager policy and a
true state: pods bound by another scheduler hold random exclusive CPUs and GPUs, without decision
annotations. The Numatopology says only what volcano-sh/resource-exporter says: numares.<r>.allocatable
= the free ids (the kubelet's shared pool for cpu, reserved CPUs included), podAllocations as Volcano's
list (cpu_manager_state form with a uid, or PodResources form with name and namespace) and possibly
missing pods, policies without a scope; fields Volcano's CRD does not declare are dropped as the API
server prunes them (the device-topology annotation, which lives in metadata, stays: it is where the
GPUs' NUMA nodes come from).

numasched's real scheduling path (SimCluster + the scheduler loop) then places random pods, and the
independent kubelet model (hack/kubelet_model.py) replays every binding in bind order on the node's TRUE
state: the pod must be admitted, and the ids numasched decided must really be free there.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import anyio
import hypothesis.strategies as st
from conftest import load_hack_module, load_machine
from hypothesis import HealthCheck, given, settings

from numasched.api.allocation import ALLOCATION_ANNOTATION, allocation_from_json
from numasched.api.idset import IdSet
from numasched.api.pod_fingerprint import pods_fingerprint
from numasched.api.topology import TopologyPolicy
from numasched.cache.cache import Cache
from numasched.cache.machine_shapes import machine_objects, reserved_cpus_for
from numasched.cache.simcluster import ClusterEvent, SimCluster
from numasched.conf.loader import load_config_text
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.simulate import simulate

km: Any = load_hack_module("kubelet_model")

GPU = "nvidia.com/gpu"
SHAPES = ("pcie-8gpu-2numa", "dgx1-v100", "hgx-h100", "dgx-a100", "epyc-1s-nps4")
POLICIES = ("single-numa-node", "restricted", "best-effort")
MACHINES = {name: load_machine(name) for name in SHAPES}
EXAMPLES = int(os.environ.get("NUMASCHED_PROPERTY_EXAMPLES", "25"))

CONFIG = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
  - name: nodeorder
  - name: numa-aware
    arguments:
      weight: 10
      devices: ["nvidia.com/gpu"]
"""


def all_cpus(machine: Mapping[str, Any]) -> list[int]:
    return sorted(cpu for core in machine["cores"] for cpu in IdSet.parse(str(core["cpus"])))


def gpu_ids(machine: Mapping[str, Any]) -> list[str]:
    return [str(d["id"]) for d in (machine.get("devices") or {}).get(GPU, [])]


@st.composite
def holders(draw: st.DrawFn, machine: Mapping[str, Any], node_name: str) -> list[dict[str, Any]]:
    """Pods bound by someone else: ids they really hold, and how (or whether) the exporter lists them."""
    reserved = set(reserved_cpus_for(machine, 2))
    free_cpus = [cpu for cpu in all_cpus(machine) if cpu not in reserved]
    free_gpus = gpu_ids(machine)
    found: list[dict[str, Any]] = []
    for index in range(draw(st.integers(0, 3))):
        cpus = sorted(draw(st.lists(st.sampled_from(free_cpus), max_size=24, unique=True))) if free_cpus else []
        gpus = draw(st.lists(st.sampled_from(free_gpus), max_size=4, unique=True)) if free_gpus else []
        if not cpus and not gpus:
            continue
        free_cpus = [cpu for cpu in free_cpus if cpu not in cpus]
        free_gpus = [gpu for gpu in free_gpus if gpu not in gpus]
        listing = draw(st.sampled_from(("uid", "name", "missing")))
        found.append({"name": f"{node_name}-holder-{index}", "cpus": cpus, "gpus": gpus, "listing": listing})
    return found


@st.composite
def nodes(draw: st.DrawFn) -> list[dict[str, Any]]:
    count = draw(st.integers(1, 2))
    drawn: list[dict[str, Any]] = []
    for index in range(count):
        shape = draw(st.sampled_from(SHAPES))
        name = f"node-{index}"
        machine = MACHINES[shape]
        drawn.append(
            {
                "name": name,
                "shape": shape,
                "policy": draw(st.sampled_from(POLICIES)),
                "holders": draw(holders(machine, name)),
            }
        )
    return drawn


@st.composite
def pending_pods(draw: st.DrawFn) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1, 6))):
        cpu = draw(st.sampled_from((1, 2, 4, 8, 16, 30)))
        gpus = draw(st.sampled_from((0, 0, 1, 2, 4, 8)))
        guaranteed = draw(st.booleans()) or gpus == 0
        pods.append({"name": f"pod-{index}", "cpu": cpu, "gpus": gpus, "guaranteed": guaranteed})
    return pods


def pod_object(name: str, cpu: int, gpus: int, *, guaranteed: bool, node: str = "", uid: str = "") -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": str(cpu), "memory": "4Gi"}
    limits = dict(requests)
    if not guaranteed:
        limits["cpu"] = str(cpu * 2)
    if gpus:
        requests[GPU] = limits[GPU] = str(gpus)
    spec: dict[str, Any] = {
        "schedulerName": "default-scheduler" if node else "numasched",
        "containers": [{"name": "main", "resources": {"requests": requests, "limits": limits}}],
    }
    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    if node:
        spec["nodeName"] = node
        metadata["uid"] = uid
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": "Running"}}


def exporter_objects(drawn: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Node, Numatopology as Volcano's exporter writes it (after pruning), and the holder pods."""
    machine = MACHINES[drawn["shape"]]
    name = drawn["name"]
    node, topology = machine_objects(machine, name, topology_policy=TopologyPolicy(drawn["policy"]))
    spec = topology["spec"]
    held_cpus = {cpu for holder in drawn["holders"] for cpu in holder["cpus"]}
    held_gpus = {gpu for holder in drawn["holders"] for gpu in holder["gpus"]}
    # Volcano's exporter: the shared pool (reserved CPUs included) and the free devices.
    spec["numares"]["cpu"]["allocatable"] = IdSet(sorted(set(all_cpus(machine)) - held_cpus)).format()
    if GPU in spec["numares"]:
        spec["numares"][GPU]["allocatable"] = ",".join(g for g in gpu_ids(machine) if g not in held_gpus)
    spec["policies"] = {key: value for key, value in spec["policies"].items() if key != "TopologyManagerScope"}
    # Volcano's CRD declares neither of these: the API server prunes them.
    spec.pop("numaDistances", None)
    spec.pop("MemoryDetail", None)
    allocations: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for holder in drawn["holders"]:
        uid = f"uid-{holder['name']}"
        cpus, gpus = holder["cpus"], holder["gpus"]
        # A pod with exclusive CPUs is Guaranteed; one holding only GPUs may be Burstable.
        pods.append(pod_object(holder["name"], max(len(cpus), 1), len(gpus), guaranteed=bool(cpus), node=name, uid=uid))
        if not cpus or holder["listing"] == "missing":
            continue  # the exporter lists only pods with exclusive CPUs, and may lag behind
        entry: dict[str, Any] = {
            "containerAllocations": [{"name": "main", "allocations": {"cpu": IdSet(cpus).format()}}]
        }
        if holder["listing"] == "uid":
            entry["uid"] = uid
        else:
            entry.update({"name": holder["name"], "namespace": "default"})
        allocations.append(entry)
    if allocations:
        spec["podAllocations"] = allocations
    return [node, topology, *pods]


def true_state(drawn: Mapping[str, Any]) -> Any:
    machine = MACHINES[drawn["shape"]]
    node = km.node_from_machine(
        machine, drawn["name"], reserved_cpus=reserved_cpus_for(machine, 2), topology_policy=drawn["policy"]
    )
    state = km.NodeState.empty(node)
    for holder in drawn["holders"]:
        assert not state.take(holder["cpus"], {GPU: holder["gpus"]})
    return state


def run_numasched(objects: list[dict[str, Any]]) -> SimCluster:
    cluster = SimCluster(Cache())
    for obj in objects:
        cluster.add(obj)
    registry = default_registry()
    config = load_config_text(CONFIG, "property", registry.known_plugin_names(), registry.known_action_names())
    anyio.run(lambda: simulate(cluster, config, registry, max_cycles=10, progress=False))
    return cluster


def check_bindings(cluster: SimCluster, states: Mapping[str, Any]) -> None:
    """Replay every binding in bind order on the true state, as the node would see it."""
    bound = [e.name for e in cluster.events if e.reason == "Scheduled"]
    for key in bound:
        pod = cluster.objects["Pod"][key]
        node_name = pod["spec"]["nodeName"]
        state = states[node_name]
        admission = km.admit(state, km.pod_from_object(pod))
        assert admission.admitted, f"{key} bound to {node_name}, which the kubelet rejects: {admission.reason}"
        text = (pod["metadata"].get("annotations") or {}).get(ALLOCATION_ANNOTATION)
        decision = allocation_from_json(text) if text else None
        cpus: set[int] = set(admission.cpus)
        devices: dict[str, set[str]] = {r: set(ids) for r, ids in admission.devices.items()}
        if decision is not None:
            if decision.cpus():
                cpus = set(decision.cpus())
            for resource in decision.resources():
                devices[resource] = set(decision.devices(resource))
            touched = km.numa_of_ids(state.node, cpus, devices)
            if state.node.topology_policy == "single-numa-node":
                assert len(touched) <= 1, f"{key} decided across NUMA nodes {sorted(touched)} on {node_name}"
        clashes = state.take(cpus, devices)
        assert not clashes, f"{key} on {node_name} decided ids that are taken or reserved: {clashes}"


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(drawn_nodes=nodes(), pods=pending_pods())
def test_every_binding_on_volcano_exporter_nodes_is_admitted_by_the_kubelet(
    drawn_nodes: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> None:
    objects: list[dict[str, Any]] = []
    for drawn in drawn_nodes:
        objects.extend(exporter_objects(drawn))
    for pod in pods:
        objects.append(pod_object(pod["name"], pod["cpu"], pod["gpus"], guaranteed=pod["guaranteed"]))
    cluster = run_numasched(objects)
    check_bindings(cluster, {drawn["name"]: true_state(drawn) for drawn in drawn_nodes})


def test_the_property_can_fail() -> None:
    """The check itself: a binding the kubelet would reject (a 4-GPU pod on free GPUs 0-2,7 of a
    single-numa-node node, #4998) is caught."""
    drawn = {
        "name": "node-0",
        "shape": "pcie-8gpu-2numa",
        "policy": "single-numa-node",
        "holders": [{"name": "h", "cpus": [], "gpus": ["3", "4", "5", "6"], "listing": "missing"}],
    }
    cluster = SimCluster(Cache())
    for obj in exporter_objects(drawn):
        cluster.add(obj)
    wrong = pod_object("wrong", 4, 4, guaranteed=True, node="node-0", uid="uid-wrong")
    cluster.add(wrong)
    cluster.events.append(ClusterEvent("Pod", "default/wrong", "Normal", "Scheduled", "assigned by hand"))
    try:
        check_bindings(cluster, {"node-0": true_state(drawn)})
    except AssertionError as error:
        assert "rejects" in str(error)
    else:
        raise AssertionError("a binding the kubelet rejects went unnoticed")


# ---- the same property on nodes described only by NFD's NodeResourceTopology ------------------
#
# Property: on nodes described only by a NodeResourceTopology as NFD's topology-updater publishes it
# (v1alpha2: per-zone capacity / allocatable / available counts, no ids, topologyManagerPolicy and
# topologyManagerScope attributes, zone costs, the pods fingerprint or not), every pod numasched binds
# is one the kubelet admits.
#
# The true state has real ids (the fixture machines; reserved CPUs and random holdings of pods bound by
# another scheduler, without decision annotations); the NRT says only how many are free per zone. As
# the ids numasched decides for such a node cannot be the ones the kubelet picks (no object names
# them), the replay lets the kubelet model pick: only admission is judged, with the kubelet's Topology
# Manager policy and scope (pod scope included) as the attributes say.

NRT_SHAPES = ("pcie-8gpu-2numa", "dgx1-v100", "hgx-h100", "epyc-1s-nps4")
V1ALPHA2_POLICY = {"single-numa-node": "SingleNUMANode", "restricted": "Restricted", "best-effort": "BestEffort"}


def truth_node(drawn: Mapping[str, Any]) -> Any:
    machine = MACHINES[drawn["shape"]]
    return km.node_from_machine(
        machine,
        drawn["name"],
        reserved_cpus=reserved_cpus_for(machine, 2),
        topology_policy=drawn["policy"],
        topology_scope=drawn["scope"],
    )


@st.composite
def nrt_nodes(draw: st.DrawFn) -> list[dict[str, Any]]:
    drawn: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1, 2))):
        shape = draw(st.sampled_from(NRT_SHAPES))
        entry: dict[str, Any] = {
            "name": f"nrt-{index}",
            "shape": shape,
            "policy": draw(st.sampled_from(POLICIES)),
            "scope": draw(st.sampled_from(("container", "pod"))),
            "fingerprint": draw(st.booleans()),
        }
        free = km.NodeState.empty(truth_node(entry))
        holders = []
        for number in range(draw(st.integers(0, 3))):
            cpus = sorted(draw(st.lists(st.sampled_from(sorted(free.free_cpus)), max_size=24, unique=True)))
            gpu_pool = sorted(free.free_devices.get(GPU, set()))
            gpus = draw(st.lists(st.sampled_from(gpu_pool), max_size=4, unique=True)) if gpu_pool else []
            if not cpus and not gpus:
                continue
            free.take(cpus, {GPU: gpus})
            holders.append({"name": f"{entry['name']}-holder-{number}", "cpus": cpus, "gpus": gpus})
        entry["holders"] = holders
        drawn.append(entry)
    return drawn


def nfd_objects(drawn: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Node, the NRT NFD's topology-updater would publish for the true state, and the holder pods."""
    node = truth_node(drawn)
    state = km.NodeState.empty(node)
    pods = []
    for holder in drawn["holders"]:
        state.take(holder["cpus"], {GPU: holder["gpus"]})
        cpu = max(len(holder["cpus"]), 1)
        pods.append(
            pod_object(holder["name"], cpu, len(holder["gpus"]), guaranteed=bool(holder["cpus"]), node=drawn["name"])
        )
        pods[-1]["metadata"]["uid"] = f"uid-{holder['name']}"
    zones = []
    for numa in node.numa_ids:
        cpus = node.cpus_in([numa])
        allocatable_cpus = cpus - node.reserved_cpus
        resources: list[dict[str, Any]] = [
            {
                "name": "cpu",
                "capacity": str(len(cpus)),
                "allocatable": str(len(allocatable_cpus)),
                "available": str(len(allocatable_cpus & state.free_cpus)),
            }
        ]
        gpus = [d for d, n in node.devices.get(GPU, {}).items() if n == numa]
        if gpus:
            free = [d for d in gpus if d in state.free_devices.get(GPU, set())]
            count = str(len(gpus))
            resources.append({"name": GPU, "capacity": count, "allocatable": count, "available": str(len(free))})
        costs = [{"name": f"node-{other}", "value": 10 if other == numa else 21} for other in node.numa_ids]
        zones.append({"name": f"node-{numa}", "type": "Node", "costs": costs, "resources": resources})
    attributes = [
        {"name": "topologyManagerPolicy", "value": drawn["policy"]},
        {"name": "topologyManagerScope", "value": drawn["scope"]},
    ]
    if drawn["fingerprint"]:
        value = pods_fingerprint(("default", holder["name"]) for holder in drawn["holders"])
        attributes.append({"name": "nodeTopologyPodsFingerprint", "value": value})
    level = "PodLevel" if drawn["scope"] == "pod" else "ContainerLevel"
    nrt = {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": drawn["name"]},
        "topologyPolicies": [V1ALPHA2_POLICY[drawn["policy"]] + level],
        "attributes": attributes,
        "zones": zones,
    }
    total = len(node.cpu_numa)
    capacity: dict[str, str] = {"cpu": str(total), "memory": "1024Gi", "pods": "110"}
    if node.devices.get(GPU):
        capacity[GPU] = str(len(node.devices[GPU]))
    allocatable = {**capacity, "cpu": str(total - len(node.reserved_cpus))}
    node_object = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": drawn["name"], "labels": {"kubernetes.io/hostname": drawn["name"]}},
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    return [node_object, nrt, *pods]


@st.composite
def pending(draw: st.DrawFn) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = []
    for index in range(draw(st.integers(1, 6))):
        containers = draw(st.integers(1, 2))
        cpu = draw(st.sampled_from((1, 2, 4, 8, 16, 30)))
        gpus = draw(st.sampled_from((0, 0, 1, 2, 4)))
        guaranteed = draw(st.booleans()) or gpus == 0
        pod = pod_object(f"pod-{index}", cpu, gpus, guaranteed=guaranteed)
        if containers == 2:
            pod["spec"]["containers"].append({**pod["spec"]["containers"][0], "name": "sidecar"})
        pods.append(pod)
    return pods


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(drawn_nodes=nrt_nodes(), pods=pending())
def test_every_binding_on_nfd_nrt_nodes_is_admitted_by_the_kubelet(
    drawn_nodes: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> None:
    objects: list[dict[str, Any]] = []
    for drawn in drawn_nodes:
        objects.extend(nfd_objects(drawn))
    cluster = run_numasched(objects + pods)
    states = {}
    for drawn in drawn_nodes:
        state = km.NodeState.empty(truth_node(drawn))
        for holder in drawn["holders"]:
            assert not state.take(holder["cpus"], {GPU: holder["gpus"]})
        states[drawn["name"]] = state
    for key in [e.name for e in cluster.events if e.reason == "Scheduled"]:
        pod = cluster.objects["Pod"][key]
        node_name = pod["spec"]["nodeName"]
        admission = km.admit(states[node_name], km.pod_from_object(pod))
        free = (
            f"free cpus {IdSet(sorted(states[node_name].free_cpus)).format()}, {dict(states[node_name].free_devices)}"
        )
        assert admission.admitted, f"{key} bound to {node_name}, which the kubelet rejects: {admission.reason}; {free}"
        km.apply(states[node_name], admission)
