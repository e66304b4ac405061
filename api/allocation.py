"""What a pod holds or is given: exclusive CPUs, NUMA nodes, device ids and pinned memory per container.

Two annotations carry it, each written and read by the functions here:
- numasched.io/allocation, the scheduler's decision on the binding (and Volcano's
  volcano.sh/topology-decision beside it), so the node side can enforce it and a restarted
  scheduler can rebuild its ledger: allocation_to_json / allocation_from_json;
- numasched.io/pod-allocations, on a node's Numatopology, what the exporter sees each pod hold:
  pod_allocations_to_json / pod_allocations_from_mapping.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Hashable, Iterable, Iterator, Mapping
from typing import Any

import attrs

from numasched.api.idset import IdSet, IdSetError
from numasched.api.numamask import MAX_NUMA_ID, NumaMask, NumaMaskError

ALLOCATION_ANNOTATION = "numasched.io/allocation"
VOLCANO_DECISION_ANNOTATION = "volcano.sh/topology-decision"
POD_ALLOCATIONS_ANNOTATION = "numasched.io/pod-allocations"


class AllocationError(ValueError):
    """An allocation annotation that cannot be read."""


class PodAllocationsError(AllocationError):
    """An entry of the pod-allocations map that cannot be read: the entry's key as found, the
    field below the entry ("" for the entry itself, ".uid"), and what is wrong; the reader names
    the object and the map in front of them."""

    def __init__(self, key: object, field: str, message: str) -> None:
        super().__init__(f"[{key!r:.60}]{field}: {message}")
        self.key = key
        self.field = field
        self.message = message


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
        if len(self.containers) == 1:
            # Most pods: the one container's set is the answer (sets are immutable).
            return self.containers[0].cpuset
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

    @functools.cached_property
    def names_nothing(self) -> bool:
        """No ids and no NUMA node chosen in any container: nothing for a binding to carry. Kept
        per allocation object (one admission is bound on many nodes alike)."""
        return self.is_empty() and not any(container.numa for container in self.containers)

    @functools.cached_property
    def json_text(self) -> str:
        """allocation_to_json, once per allocation object: the scheduler places one completed
        admission on many nodes alike, and the binding writes it for each pod."""
        return allocation_to_json(self)

    @functools.cached_property
    def texts_by_layout(self) -> dict[Hashable, str]:
        """Texts about this allocation that also depend on where its ids sit on a node (the
        binder's Volcano decision), kept per allocation object by what they read of the node."""
        return {}


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
        """The pod's ids; when the report lists it once by uid and once by namespace/name (Volcano's
        exporter writes the uid from the CPU manager checkpoint, the name from PodResources), both."""
        by_uid = self.allocations.get(uid) if uid else None
        by_key = self.allocations.get(key) if key else None
        if by_uid is None or by_key is None or by_uid is by_key:
            return by_uid or by_key
        return merge_pod_allocations(by_uid, by_key)

    def accounts_for(self, uid: str, key: str) -> bool:
        return uid in self.accounted or key in self.accounted


@attrs.frozen(slots=True)
class HeldAllocation:
    """One pod of the numasched.io/pod-allocations annotation: what it holds, under its key."""

    # "<namespace>/<name>", or the uid when the name is unknown.
    key: str
    uid: str
    allocation: PodAllocation


def merge_pod_allocations(first: PodAllocation, second: PodAllocation) -> PodAllocation:
    """Two reports of one pod together, container by container: an id either holds is held, and
    pinned memory is the larger claim per NUMA node (never the smaller claim)."""
    merged: dict[str, ContainerAllocation] = {container.name: container for container in first.containers}
    for container in second.containers:
        known = merged.get(container.name)
        if known is None:
            merged[container.name] = container
            continue
        devices = {
            resource: tuple(dict.fromkeys(known.devices.get(resource, ()) + container.devices.get(resource, ())))
            for resource in sorted(known.devices.keys() | container.devices.keys())
        }
        memory: dict[str, dict[int, int]] = {}
        for resource in sorted(known.memory.keys() | container.memory.keys()):
            mine, theirs = known.memory.get(resource, {}), container.memory.get(resource, {})
            memory[resource] = {
                numa: max(mine.get(numa, 0), theirs.get(numa, 0)) for numa in sorted(mine.keys() | theirs.keys())
            }
        if known.numa is None or container.numa is None:
            numa = known.numa if container.numa is None else container.numa
        else:
            numa = known.numa | container.numa
        merged[container.name] = ContainerAllocation(
            name=container.name, cpuset=known.cpuset | container.cpuset, numa=numa, devices=devices, memory=memory
        )
    return PodAllocation(tuple(merged.values()))


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
    except (ValueError, RecursionError) as error:
        # ValueError covers JSONDecodeError and integers longer than Python will convert.
        raise AllocationError(f"not JSON: {str(error)[:120]}") from None
    return allocation_from_mapping(document)


def pod_allocations_to_json(pods: Iterable[HeldAllocation]) -> str:
    """The numasched.io/pod-allocations annotation value: {"<key>": {"uid", "containers": {name:
    {"cpuset", "numa", "devices", "memory"}}}}, keys sorted, so equal content gives equal text; a
    pod without a uid has none written; of two pods with one key the later is kept."""
    entries: dict[str, Any] = {}
    for pod in pods:
        entry = allocation_to_mapping(pod.allocation)
        if pod.uid:
            entry["uid"] = pod.uid
        entries[pod.key] = entry
    return json.dumps(entries, separators=(",", ":"), sort_keys=True)


def pod_allocations_from_mapping(document: Mapping[Any, Any]) -> Iterator[HeldAllocation]:
    """The pods of a decoded pod-allocations map, one by one in the map's order (so a reader can
    check each against the node before reading the next); PodAllocationsError names the entry.

    The same shape is the legacy map form of a Numatopology's spec.podAllocations.
    """
    for key, entry in document.items():
        if not isinstance(key, str) or not key:
            raise PodAllocationsError(key, "", "pod keys must be non-empty namespace/name strings")
        if entry is None:
            entry = {}
        if not isinstance(entry, Mapping):
            raise PodAllocationsError(key, "", f"expected an object, got {type(entry).__name__}")
        uid = entry.get("uid", "")
        if not isinstance(uid, str):
            raise PodAllocationsError(key, ".uid", f"expected a string, got {type(uid).__name__}")
        try:
            allocation = allocation_from_mapping(entry)
        except AllocationError as error:
            raise PodAllocationsError(key, "", str(error)) from None
        yield HeldAllocation(key=key, uid=uid, allocation=allocation)


# More ids of one resource in one container than any node has: the annotation is wrong, not big.
MAX_DEVICES_PER_CONTAINER = 1024


def allocation_from_mapping(document: Any) -> PodAllocation:
    """The inverse of allocation_to_mapping; raises AllocationError saying what is wrong (and
    nothing else, whatever JSON it is given)."""
    if not isinstance(document, Mapping) or not isinstance(document.get("containers"), Mapping):
        raise AllocationError('expected {"containers": {name: {...}}}')
    containers: list[ContainerAllocation] = []
    for name, entry in document["containers"].items():
        if not isinstance(name, str):
            raise AllocationError(f"container names must be strings, got {name!r:.40}")
        if not isinstance(entry, Mapping):
            raise AllocationError(f"container {name}: expected an object")
        try:
            containers.append(
                ContainerAllocation(
                    name,
                    _cpuset(entry.get("cpuset", "")),
                    _numa(entry.get("numa")),
                    _devices(entry.get("devices", {})),
                    _memory(entry.get("memory", {})),
                )
            )
        except (IdSetError, NumaMaskError, AllocationError) as error:
            raise AllocationError(f"container {name}: {error}") from None
    return PodAllocation(tuple(containers))


def _cpuset(raw: Any) -> IdSet:
    if not isinstance(raw, str):
        raise AllocationError(f"cpuset must be a string like 0-3, got {raw!r:.40}")
    return IdSet.parse(raw)


def _numa(raw: Any) -> NumaMask | None:
    if raw is None:
        return None
    if not isinstance(raw, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in raw):
        raise AllocationError(f"numa must be a list of NUMA ids, got {raw!r:.40}")
    return NumaMask.from_ids(raw)


def _devices(raw: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(raw, Mapping):
        raise AllocationError("devices must be an object of resource -> list of ids")
    devices: dict[str, tuple[str, ...]] = {}
    for resource, ids in raw.items():
        if not isinstance(resource, str) or not isinstance(ids, list) or len(ids) > MAX_DEVICES_PER_CONTAINER:
            raise AllocationError(
                f"devices[{resource!r:.40}] must be a list of at most {MAX_DEVICES_PER_CONTAINER} ids"
            )
        if not all(isinstance(i, str) and i for i in ids):
            raise AllocationError(f"devices[{resource}]: ids must be non-empty strings")
        devices[resource] = tuple(ids)
    return devices


def _memory(raw: Any) -> dict[str, dict[int, int]]:
    if not isinstance(raw, Mapping):
        raise AllocationError("memory must be an object")
    memory: dict[str, dict[int, int]] = {}
    for resource, per_numa in raw.items():
        if not isinstance(resource, str) or not isinstance(per_numa, Mapping):
            raise AllocationError(f"memory[{resource!r:.40}] must be an object of NUMA id -> bytes")
        sizes: dict[int, int] = {}
        for numa_key, size in per_numa.items():
            if (
                not isinstance(numa_key, str)
                or not re.fullmatch(r"[0-9]{1,2}", numa_key)
                or int(numa_key) > MAX_NUMA_ID
            ):
                raise AllocationError(f"memory[{resource}]: {numa_key!r:.40} is not a NUMA id 0-{MAX_NUMA_ID}")
            if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size < 1 << 63:
                raise AllocationError(f"memory[{resource}][{numa_key}]: expected bytes, got {size!r:.40}")
            sizes[int(numa_key)] = size
        memory[resource] = sizes
    return memory
