"""The objects the exporter publishes: Volcano's Numatopology and, optionally, a NodeResourceTopology.

Pure functions of a NodeReport. Field names follow Volcano's schema (zero integers omitted, as Go's
omitempty does) plus our additive fields, which cache/convert_topology.py reads back.
"""

from __future__ import annotations

from typing import Any

from numasched.api.allocation import PodAllocation, allocation_to_mapping
from numasched.cache.device_topology import DEVICE_TOPOLOGY_ANNOTATION, format_device_topology
from numasched.exporter.kubelet_config import format_options
from numasched.exporter.report import NodeReport

NUMATOPOLOGY_GROUP = "nodeinfo.volcano.sh"
NUMATOPOLOGY_VERSION = "v1alpha1"
NUMATOPOLOGY_PLURAL = "numatopologies"
NRT_GROUP = "topology.node.k8s.io"
NRT_VERSION = "v1alpha2"
NRT_PLURAL = "noderesourcetopologies"
GPU_RESOURCE = "nvidia.com/gpu"


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


def _numares(report: NodeReport) -> dict[str, dict[str, Any]]:
    topology = report.topology
    numares: dict[str, dict[str, Any]] = {
        "cpu": {"allocatable": topology.allocatable_cpus.format(), "capacity": len(topology.cpus)}
    }
    for resource, group in sorted(topology.devices.items()):
        entry: dict[str, Any] = {"capacity": len(group.devices)}
        allocatable = report.allocatable_devices.get(resource, ())
        if allocatable:
            entry["allocatable"] = ",".join(allocatable)
        numares[resource] = entry
    return {name: {key: value for key, value in entry.items() if value} for name, entry in numares.items()}


def _memory_detail(report: NodeReport) -> dict[str, Any]:
    detail: dict[str, Any] = {}
    for numa in report.topology.numa_ids:
        memory_map: dict[str, dict[str, int]] = {}
        for resource, per_numa in sorted(report.memory_total.items()):
            total = per_numa.get(numa, 0)
            if not total:
                continue
            allocatable = report.topology.memory.get(resource, {}).get(numa, total)
            memory_map[resource] = {"total": total, "allocatable": allocatable}
        if memory_map:
            detail[str(numa)] = {"memoryMap": memory_map}
    return detail


def _pod_allocations(report: NodeReport) -> dict[str, Any]:
    allocations: dict[str, Any] = {}
    for pod in report.usage.pods:
        entry: dict[str, Any] = dict(allocation_to_mapping(PodAllocation(pod.containers)))
        if pod.uid:
            entry["uid"] = pod.uid
        allocations[pod.key] = entry
    return allocations


def numatopology_object(report: NodeReport) -> dict[str, Any]:
    """The node's Numatopology (cluster-scoped, named after the node), without resourceVersion."""
    topology = report.topology
    spec: dict[str, Any] = {
        "policies": _policies(report),
        "numares": _numares(report),
        "cpuDetail": {
            str(info.cpu): _nonzero(numa=info.numa, socket=info.socket, core=info.core, l3=info.l3)
            for info in topology.cpus
        },
    }
    if report.reserved:
        spec["resReserved"] = dict(report.reserved)
    gpus = topology.devices.get(GPU_RESOURCE)
    if gpus is not None:
        spec["gpuDetail"] = {
            device.id: _nonzero(numa=device.numa) for device in gpus.devices if device.numa is not None
        }
    if topology.distances:
        spec["numaDistances"] = {
            str(numa): {str(other): distance for other, distance in sorted(row.items())}
            for numa, row in sorted(topology.distances.items())
        }
    memory_detail = _memory_detail(report)
    if memory_detail:
        spec["MemoryDetail"] = memory_detail
    spec["podAllocations"] = _pod_allocations(report)
    metadata: dict[str, Any] = {"name": topology.node_name}
    if topology.devices:
        metadata["annotations"] = {DEVICE_TOPOLOGY_ANNOTATION: format_device_topology(topology.devices, topology.links)}
    return {
        "apiVersion": f"{NUMATOPOLOGY_GROUP}/{NUMATOPOLOGY_VERSION}",
        "kind": "Numatopology",
        "metadata": metadata,
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
    return {
        "apiVersion": f"{NRT_GROUP}/{NRT_VERSION}",
        "kind": "NodeResourceTopology",
        "metadata": {"name": topology.node_name},
        "topologyPolicies": [],
        "attributes": [
            {"name": "topologyManagerPolicy", "value": policies.topology_manager_policy.value},
            {"name": "topologyManagerScope", "value": policies.topology_manager_scope.value},
        ],
        "zones": zones,
    }
