"""What the scheduler decided for a pod: exclusive CPUs, NUMA nodes and device ids per container.

Serialised as the numasched.io/allocation annotation on the binding, and as Volcano's
volcano.sh/topology-decision, so the node side can enforce it and a restarted scheduler can
rebuild its ledger.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs

from numasched.api.idset import IdSet, IdSetError
from numasched.api.numamask import NumaMask, NumaMaskError

ALLOCATION_ANNOTATION = "numasched.io/allocation"
VOLCANO_DECISION_ANNOTATION = "volcano.sh/topology-decision"


class AllocationError(ValueError):
    """An allocation annotation that cannot be read."""


@attrs.frozen(slots=True)
class ContainerAllocation:
    name: str
    cpuset: IdSet = attrs.field(factory=IdSet)
    numa: NumaMask | None = None
    devices: dict[str, tuple[str, ...]] = attrs.field(factory=dict)
    # Bytes per NUMA node per resource ("memory", "hugepages-2Mi") pinned by the memory manager.
    memory: dict[str, dict[int, int]] = attrs.field(factory=dict)


@attrs.frozen(slots=True)
class PodAllocation:
    containers: tuple[ContainerAllocation, ...] = ()

    def cpus(self) -> IdSet:
        result = IdSet()
        for container in self.containers:
            result = result | container.cpuset
        return result

    def devices(self, resource: str) -> frozenset[str]:
        return frozenset(device for container in self.containers for device in container.devices.get(resource, ()))

    def resources(self) -> set[str]:
        return {name for container in self.containers for name in container.devices}

    def numa(self) -> NumaMask:
        result = NumaMask()
        for container in self.containers:
            if container.numa is not None:
                result = result | container.numa
        return result

    def is_empty(self) -> bool:
        return all(
            not container.cpuset and not container.devices and not container.memory for container in self.containers
        )


@attrs.frozen(slots=True)
class ReportedAllocations:
    """What a node's topology object says its pods hold (Volcano's spec.podAllocations list, our
    numasched.io/pod-allocations annotation on the Numatopology).

    allocations: the ids known per pod (CPUs from Volcano's cpuset values, devices from our
    annotation), keyed by pod uid and by namespace/name; these win over our own ledger.
    accounted: uid and namespace/name of every pod the report lists, ids known or not: the source's
    availability (numares.<r>.allocatable) was computed with these pods' holdings already removed.
    """

    allocations: Mapping[str, PodAllocation] = attrs.field(factory=dict)
    accounted: frozenset[str] = frozenset()

    def for_pod(self, uid: str, key: str) -> PodAllocation | None:
        return self.allocations.get(uid) or self.allocations.get(key)

    def accounts_for(self, uid: str, key: str) -> bool:
        return uid in self.accounted or key in self.accounted


def allocation_to_json(allocation: PodAllocation) -> str:
    """The numasched.io/allocation annotation value (containers in pod order)."""
    return json.dumps(allocation_to_mapping(allocation), separators=(",", ":"))


def allocation_to_mapping(allocation: PodAllocation) -> dict[str, Any]:
    """{"containers": {name: {"cpuset", "numa", "devices", "memory"}}}, empty fields left out."""
    containers: dict[str, Any] = {}
    for container in allocation.containers:
        entry: dict[str, Any] = {}
        if container.cpuset:
            entry["cpuset"] = container.cpuset.format()
        if container.numa is not None:
            entry["numa"] = container.numa.ids()
        if container.devices:
            entry["devices"] = {name: list(ids) for name, ids in sorted(container.devices.items())}
        if container.memory:
            entry["memory"] = {
                name: {str(numa): size for numa, size in sorted(per_numa.items())}
                for name, per_numa in sorted(container.memory.items())
            }
        containers[container.name] = entry
    return {"containers": containers}


def allocation_from_json(text: str) -> PodAllocation:
    """Parse the numasched.io/allocation annotation; raises AllocationError saying what is wrong."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise AllocationError(f"not JSON: {error}") from None
    return allocation_from_mapping(document)


def allocation_from_mapping(document: Any) -> PodAllocation:
    """The inverse of allocation_to_mapping; raises AllocationError saying what is wrong."""
    if not isinstance(document, Mapping) or not isinstance(document.get("containers"), Mapping):
        raise AllocationError('expected {"containers": {name: {...}}}')
    containers: list[ContainerAllocation] = []
    for name, entry in document["containers"].items():
        if not isinstance(entry, Mapping):
            raise AllocationError(f"container {name}: expected an object")
        try:
            cpuset = IdSet.parse(str(entry.get("cpuset", "")))
            numa_ids = entry.get("numa")
            numa = NumaMask.from_ids(int(i) for i in numa_ids) if isinstance(numa_ids, list) else None
            devices_raw = entry.get("devices", {})
            if not isinstance(devices_raw, Mapping):
                raise AllocationError(f"container {name}: devices must be an object")
            devices = {str(res): tuple(str(i) for i in ids) for res, ids in devices_raw.items()}
            memory_raw = entry.get("memory", {})
            if not isinstance(memory_raw, Mapping):
                raise AllocationError(f"container {name}: memory must be an object")
            memory = {
                str(res): {int(numa_id): int(size) for numa_id, size in per_numa.items()}
                for res, per_numa in memory_raw.items()
            }
        except (IdSetError, NumaMaskError, TypeError, ValueError, AttributeError) as error:
            raise AllocationError(f"container {name}: {error}") from None
        containers.append(ContainerAllocation(str(name), cpuset, numa, devices, memory))
    return PodAllocation(tuple(containers))
