"""The objects the exporter publishes: Volcano's Numatopology and, optionally, a NodeResourceTopology.

Pure functions of a NodeReport. The Numatopology's spec is exactly Volcano's schema (Go's
nodeinfo/v1alpha1 types; zero integers omitted as Go's omitempty does), with numares.<r>.allocatable
holding the FREE ids as Volcano's resource-exporter writes them, so Volcano's scheduler consumes it
unchanged and the API server's pruning under Volcano's CRD removes nothing. What Volcano's schema
cannot say goes into annotations of the same object (device topology, per-pod ids, NUMA distances,
memory per NUMA node, L3 groups), which cache/convert_topology.py reads back.
"""

from __future__ import annotations

import json
from typing import Any

from numasched.api.allocation import PodAllocation, allocation_to_mapping
from numasched.api.topology import KubeletPolicies, TopologyPolicy, TopologyScope
from numasched.cache.device_topology import DEVICE_TOPOLOGY_ANNOTATION, format_device_topology
from numasched.cache.numa_detail import NUMA_DETAIL_ANNOTATION, format_numa_detail, l3_groups
from numasched.exporter.kubelet_config import format_options
from numasched.exporter.report import NodeReport

NUMATOPOLOGY_GROUP = "nodeinfo.volcano.sh"
NUMATOPOLOGY_VERSION = "v1alpha1"
NUMATOPOLOGY_PLURAL = "numatopologies"
NRT_GROUP = "topology.node.k8s.io"
NRT_VERSION = "v1alpha2"
NRT_PLURAL = "noderesourcetopologies"
POD_ALLOCATIONS_ANNOTATION = "numasched.io/pod-allocations"
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
    return result


def _free_devices(report: NodeReport, resource: str) -> list[str]:
    """Healthy ids the kubelet will allocate, less those a container holds, in device order."""
    used = report.usage.used_devices(resource)
    return [device_id for device_id in report.allocatable_devices.get(resource, ()) if device_id not in used]


def _numares(report: NodeReport) -> dict[str, dict[str, Any]]:
    """Volcano's numares: per resource the FREE ids, as Volcano's resource-exporter writes them.

    cpu: the CPUs the CPU manager may hand out (reserved ones excluded) less those held
    exclusively; devices: healthy allocatable ids less those assigned, comma-separated (ids may be
    UUIDs, which contain '-'). An empty `allocatable` is written, not omitted: it says "nothing is
    free", which an absent field would not. capacity is the count of all CPUs / devices.
    """
    topology = report.topology
    numares: dict[str, dict[str, Any]] = {
        "cpu": {
            "allocatable": (topology.allocatable_cpus - report.usage.used_cpus()).format(),
            "capacity": len(topology.cpus),
        }
    }
    for resource, group in sorted(topology.devices.items()):
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
    allocations: dict[str, Any] = {}
    for pod in report.usage.pods:
        entry: dict[str, Any] = dict(allocation_to_mapping(PodAllocation(pod.containers)))
        if pod.uid:
            entry["uid"] = pod.uid
        allocations[pod.key] = entry
    return json.dumps(allocations, separators=(",", ":"), sort_keys=True)


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


def node_resource_topology_object(report: NodeReport) -> dict[str, Any]:
    """A NodeResourceTopology (v1alpha2): one zone per NUMA node with resources and costs."""
    topology = report.topology
    used_cpus = report.usage.used_cpus()
    zones: list[dict[str, Any]] = []
    for numa in topology.numa_ids:
        cpus = topology.cpus_by_numa.get(numa)
        resources: list[dict[str, Any]] = []
        if cpus is not None:
            allocatable = cpus & topology.allocatable_cpus
            resources.append(
                {
                    "name": "cpu",
                    "capacity": str(len(cpus)),
                    "allocatable": str(len(allocatable)),
                    "available": str(len(allocatable - used_cpus)),
                }
            )
        for resource, per_numa in sorted(report.memory_total.items()):
            if per_numa.get(numa):
                allocatable_bytes = topology.memory.get(resource, {}).get(numa, per_numa[numa])
                used = sum(
                    container.memory.get(resource, {}).get(numa, 0)
                    for pod in report.usage.pods
                    for container in pod.containers
                )
                resources.append(
                    {
                        "name": resource,
                        "capacity": str(per_numa[numa]),
                        "allocatable": str(allocatable_bytes),
                        "available": str(max(allocatable_bytes - used, 0)),
                    }
                )
        for resource, group in sorted(topology.devices.items()):
            here = [device.id for device in group.devices if device.numa == numa]
            if not here:
                continue
            allocatable_ids = set(report.allocatable_devices.get(resource, ())) & set(here)
            used_ids = report.usage.used_devices(resource)
            resources.append(
                {
                    "name": resource,
                    "capacity": str(len(here)),
                    "allocatable": str(len(allocatable_ids)),
                    "available": str(len(allocatable_ids - used_ids)),
                }
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
    return {
        "apiVersion": f"{NRT_GROUP}/{NRT_VERSION}",
        "kind": "NodeResourceTopology",
        "metadata": {"name": topology.node_name},
        "topologyPolicies": [legacy_topology_policy(policies)],
        "attributes": attributes,
        "zones": zones,
    }


def legacy_topology_policy(policies: KubeletPolicies) -> str:
    """The v1alpha1 topologyPolicies value: "None", or e.g. "SingleNUMANodePodLevel"."""
    prefix = _NRT_LEGACY_POLICY_PREFIX.get(policies.topology_manager_policy)
    if prefix is None:
        return "None"
    level = "PodLevel" if policies.topology_manager_scope == TopologyScope.POD else "ContainerLevel"
    return prefix + level
