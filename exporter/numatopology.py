"""The objects the exporter publishes: Volcano's Numatopology and, optionally, a NodeResourceTopology.

Pure functions of a NodeReport. The Numatopology's spec is exactly Volcano's schema (Go's
nodeinfo/v1alpha1 types; zero integers omitted as Go's omitempty does), with numares.<r>.allocatable
holding the FREE ids as Volcano's resource-exporter writes them, so Volcano's scheduler consumes it
unchanged and the API server's pruning under Volcano's CRD removes nothing. What Volcano's schema
cannot say goes into annotations of the same object (device topology, per-pod ids, NUMA distances,
memory per NUMA node, L3 groups), in the formats of numasched.api (allocation, device_topology,
numa_detail, pod_fingerprint), which the scheduler's cache reads back with the same modules.
"""

from __future__ import annotations

from typing import Any

from numasched.api.allocation import (
    POD_ALLOCATIONS_ANNOTATION as POD_ALLOCATIONS_ANNOTATION,  # tests/test_volcano_schema.py imports it from here
)
from numasched.api.allocation import (
    HeldAllocation,
    PodAllocation,
    pod_allocations_to_json,
)
from numasched.api.device_topology import DEVICE_TOPOLOGY_ANNOTATION, format_device_topology
from numasched.api.numa_detail import NUMA_DETAIL_ANNOTATION, format_numa_detail, l3_groups
from numasched.api.pod_fingerprint import ATTRIBUTE as FINGERPRINT_ATTRIBUTE
from numasched.api.pod_fingerprint import ATTRIBUTE_METHOD as FINGERPRINT_METHOD_ATTRIBUTE
from numasched.api.pod_fingerprint import METHOD_WITH_EXCLUSIVE_RESOURCES, pods_fingerprint
from numasched.api.resource import is_memory_resource
from numasched.api.topology import (
    RESERVED_CPUS_POLICY,
    CpuManagerPolicy,
    KubeletPolicies,
    TopologyPolicy,
    TopologyScope,
)
from numasched.exporter.kubelet_config import format_options
from numasched.exporter.report import NodeReport

NUMATOPOLOGY_GROUP = "nodeinfo.volcano.sh"
NUMATOPOLOGY_VERSION = "v1alpha1"
NUMATOPOLOGY_PLURAL = "numatopologies"
NRT_GROUP = "topology.node.k8s.io"
NRT_VERSION = "v1alpha2"
NRT_PLURAL = "noderesourcetopologies"
# NodeResourceTopology's deprecated topologyPolicies value for a kubelet policy and scope, as
# v1alpha1 consumers (older scheduler-plugins) read it.
_NRT_LEGACY_POLICY_PREFIX = {
    TopologyPolicy.SINGLE_NUMA_NODE: "SingleNUMANode",
    TopologyPolicy.RESTRICTED: "Restricted",
    TopologyPolicy.BEST_EFFORT: "BestEffort",
}


def _nonzero(**fields: int) -> dict[str, int]:
    return {name: value for name, value in fields.items() if value}


def _policies(report: NodeReport) -> dict[str, str]:
    policies = report.topology.policies
    result = {
        "CPUManagerPolicy": policies.cpu_manager_policy.value,
        "TopologyManagerPolicy": policies.topology_manager_policy.value,
        "TopologyManagerScope": policies.topology_manager_scope.value,
        "MemoryManagerPolicy": policies.memory_manager_policy,
    }
    if policies.cpu_manager_options:
        result["CPUManagerPolicyOptions"] = format_options(policies.cpu_manager_options)
    if policies.topology_manager_options:
        result["TopologyManagerPolicyOptions"] = format_options(policies.topology_manager_options)
    if policies.cpu_manager_policy is CpuManagerPolicy.STATIC and report.topology.reserved_cpus:
        # The exact reserved set (resReserved can only give a count, from which a reader has to
        # guess the kubelet's choice). Policies is a string map in Volcano's schema: kept on pruning.
        result[RESERVED_CPUS_POLICY] = report.topology.reserved_cpus.format()
    return result


def _free_devices(report: NodeReport, resource: str) -> list[str]:
    """Healthy ids the kubelet will allocate, less those a container holds, in device order."""
    used = report.usage.used_devices(resource)
    return [device_id for device_id in report.allocatable_devices.get(resource, ()) if device_id not in used]


def use_known(report: NodeReport, resource: str) -> bool:
    """Whether the exporter sees what is held of `resource`, so it may say what is free.

    PodResources reports CPUs, devices and pinned memory; the CPU manager checkpoint CPUs, the
    device manager checkpoint devices.
    Without a static CPU manager (or the memory manager's Static policy) nothing of that kind can
    be held exclusively, so all of it is free whatever the sources say.
    """
    policies = report.topology.policies
    if resource == "cpu":
        return report.usage.source in ("podresources", "checkpoint") or (
            policies.cpu_manager_policy == CpuManagerPolicy.NONE
        )
    if is_memory_resource(resource):
        return report.usage.source == "podresources" or policies.memory_manager_policy == "None"
    return report.usage.source == "podresources" or report.usage.devices_known


def _numares(report: NodeReport) -> dict[str, dict[str, Any]]:
    """Volcano's numares: per resource the FREE ids, as Volcano's resource-exporter writes them.

    cpu: the CPUs the CPU manager may hand out (reserved ones excluded) less those held
    exclusively; devices: healthy allocatable ids less those assigned, comma-separated (ids may be
    UUIDs, which contain '-'); capacity: the count of all CPUs / devices. An empty `allocatable` is
    written, not omitted, when nothing is free. A resource whose use the exporter cannot see (the
    PodResources API is unavailable) is left out entirely: the object then makes no statement
    about it, rather than calling free what a pod may hold.
    """
    topology = report.topology
    numares: dict[str, dict[str, Any]] = {}
    if use_known(report, "cpu"):
        numares["cpu"] = {
            "allocatable": (topology.allocatable_cpus - report.usage.used_cpus()).format(),
            "capacity": len(topology.cpus),
        }
    for resource, group in sorted(topology.devices.items()):
        if not use_known(report, resource):
            continue
        numares[resource] = {"allocatable": ",".join(_free_devices(report, resource))}
        if group.devices:
            numares[resource]["capacity"] = len(group.devices)
    return numares


def _volcano_pod_allocations(report: NodeReport) -> list[dict[str, Any]]:
    """Volcano's spec.podAllocations list: per container, "cpu" as a cpuset and every other
    resource as a quantity (device count, pinned bytes), sorted as Volcano's exporter sorts."""
    pods: list[dict[str, Any]] = []
    for pod in report.usage.pods:
        containers: list[dict[str, Any]] = []
        for container in sorted(pod.containers, key=lambda item: item.name):
            allocations: dict[str, str] = {}
            if container.cpuset:
                allocations["cpu"] = container.cpuset.format()
            for resource, ids in sorted(container.devices.items()):
                if ids:
                    allocations[resource] = str(len(ids))
            for resource, per_numa in sorted(container.memory.items()):
                total = sum(per_numa.values())
                if total:
                    allocations[resource] = str(total)
            if allocations:
                containers.append({"name": container.name, "allocations": allocations})
        if not containers:
            continue
        entry: dict[str, Any] = {"uid": pod.uid, "name": pod.name, "namespace": pod.namespace}
        entry = {key: value for key, value in entry.items() if value}
        entry["containerAllocations"] = containers
        pods.append(entry)
    return sorted(pods, key=lambda item: (item.get("uid", ""), item.get("namespace", ""), item.get("name", "")))


def pod_allocations_annotation(report: NodeReport) -> str:
    """The numasched.io/pod-allocations annotation: the ids each pod holds, which Volcano's list
    cannot carry (it has device counts, not ids): {"<ns>/<name>" (or the uid when the name is
    unknown): {"uid", "containers": {name: {"cpuset", "numa", "devices", "memory"}}}}."""
    return pod_allocations_to_json(
        HeldAllocation(key=pod.key, uid=pod.uid, allocation=PodAllocation(pod.containers)) for pod in report.usage.pods
    )


def numa_detail_annotation(report: NodeReport) -> str:
    topology = report.topology
    return format_numa_detail(topology.distances, report.memory_total, topology.memory, l3_groups(topology))


def numatopology_object(report: NodeReport) -> dict[str, Any]:
    """The node's Numatopology (cluster-scoped, named after the node), without resourceVersion.

    spec holds exactly what Volcano's CRD declares, so the object survives its pruning and
    Volcano's scheduler reads it as it reads Volcano's own exporter's; the rest is in annotations.
    """
    topology = report.topology
    spec: dict[str, Any] = {
        "policies": _policies(report),
        "numares": _numares(report),
        "cpuDetail": {
            str(info.cpu): _nonzero(numa=info.numa, socket=info.socket, core=info.core) for info in topology.cpus
        },
    }
    if report.reserved:
        spec["resReserved"] = dict(report.reserved)
    pod_allocations = _volcano_pod_allocations(report)
    if pod_allocations:
        spec["podAllocations"] = pod_allocations
    annotations = {
        POD_ALLOCATIONS_ANNOTATION: pod_allocations_annotation(report),
        NUMA_DETAIL_ANNOTATION: numa_detail_annotation(report),
    }
    if topology.devices:
        annotations[DEVICE_TOPOLOGY_ANNOTATION] = format_device_topology(topology.devices, topology.links)
    return {
        "apiVersion": f"{NUMATOPOLOGY_GROUP}/{NUMATOPOLOGY_VERSION}",
        "kind": "Numatopology",
        "metadata": {"name": topology.node_name, "annotations": annotations},
        "spec": spec,
    }


def _nrt_resource(report: NodeReport, name: str, capacity: int, allocatable: int, available: int) -> dict[str, str]:
    # The schema requires `available`; when the exporter cannot see what is held, 0 is the value
    # that never offers what a pod may hold (as numares leaves such a resource out).
    return {
        "name": name,
        "capacity": str(capacity),
        "allocatable": str(allocatable),
        "available": str(available if use_known(report, name) else 0),
    }


def node_resource_topology_object(report: NodeReport) -> dict[str, Any]:
    """A NodeResourceTopology (v1alpha2): one zone per NUMA node with resources and costs.

    Zone resources: cpu, memory and huge pages, devices, each with capacity, allocatable and
    available (allocatable less what pods hold); costs are the NUMA distances. Attributes
    topologyManagerPolicy / topologyManagerScope (kubelet spellings) and, when set,
    topologyManagerPolicyOptions ("k=v,k=v"), and nodeTopologyPodsFingerprint (+ its method) when
    PodResources names every holder; topologyPolicies the deprecated v1alpha1 value.
    """
    topology = report.topology
    used_cpus = report.usage.used_cpus()
    zones: list[dict[str, Any]] = []
    for numa in topology.numa_ids:
        cpus = topology.cpus_by_numa.get(numa)
        resources: list[dict[str, Any]] = []
        if cpus is not None:
            allocatable = cpus & topology.allocatable_cpus
            resources.append(_nrt_resource(report, "cpu", len(cpus), len(allocatable), len(allocatable - used_cpus)))
        for resource, per_numa in sorted(report.memory_total.items()):
            if per_numa.get(numa):
                allocatable_bytes = topology.memory.get(resource, {}).get(numa, per_numa[numa])
                used = sum(
                    container.memory.get(resource, {}).get(numa, 0)
                    for pod in report.usage.pods
                    for container in pod.containers
                )
                resources.append(
                    _nrt_resource(report, resource, per_numa[numa], allocatable_bytes, max(allocatable_bytes - used, 0))
                )
        for resource, group in sorted(topology.devices.items()):
            here = [device.id for device in group.devices if device.numa == numa]
            if not here:
                continue
            allocatable_ids = set(report.allocatable_devices.get(resource, ())) & set(here)
            used_ids = report.usage.used_devices(resource)
            resources.append(
                _nrt_resource(report, resource, len(here), len(allocatable_ids), len(allocatable_ids - used_ids))
            )
        zone: dict[str, Any] = {"name": f"node-{numa}", "type": "Node", "resources": resources}
        row = topology.distances.get(numa)
        if row:
            zone["costs"] = [{"name": f"node-{other}", "value": distance} for other, distance in sorted(row.items())]
        zones.append(zone)
    policies = topology.policies
    attributes = [
        {"name": "topologyManagerPolicy", "value": policies.topology_manager_policy.value},
        {"name": "topologyManagerScope", "value": policies.topology_manager_scope.value},
    ]
    if policies.topology_manager_options:
        attributes.append(
            {"name": "topologyManagerPolicyOptions", "value": format_options(policies.topology_manager_options)}
        )
    fingerprint = _pods_fingerprint(report)
    if fingerprint is not None:
        attributes.append({"name": FINGERPRINT_ATTRIBUTE, "value": fingerprint})
        attributes.append({"name": FINGERPRINT_METHOD_ATTRIBUTE, "value": METHOD_WITH_EXCLUSIVE_RESOURCES})
    return {
        "apiVersion": f"{NRT_GROUP}/{NRT_VERSION}",
        "kind": "NodeResourceTopology",
        "metadata": {"name": topology.node_name},
        "topologyPolicies": [legacy_topology_policy(policies)],
        "attributes": attributes,
        "zones": zones,
    }


def _pods_fingerprint(report: NodeReport) -> str | None:
    """The podfingerprint of the pods whose holdings `available` reflects (those PodResources
    reports holding something, method with-exclusive-resources), so a reader can tell whether the
    published amounts already account for the pods it sees on the node. None when the exporter
    does not see every holder by name."""
    usage = report.usage
    if usage.source != "podresources" or any(not pod.name for pod in usage.pods):
        return None
    return pods_fingerprint((pod.namespace, pod.name) for pod in usage.pods)


def legacy_topology_policy(policies: KubeletPolicies) -> str:
    """The v1alpha1 topologyPolicies value: "None", or e.g. "SingleNUMANodePodLevel"."""
    prefix = _NRT_LEGACY_POLICY_PREFIX.get(policies.topology_manager_policy)
    if prefix is None:
        return "None"
    level = "PodLevel" if policies.topology_manager_scope == TopologyScope.POD else "ContainerLevel"
    return prefix + level
