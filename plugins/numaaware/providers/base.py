"""The hint provider protocol: what a CPU, device, memory or third-party provider implements.

A provider mirrors a kubelet hint provider (CPU manager, device manager, memory manager): for one
request (a container's requests, or the pod's effective requests in pod scope) it says which NUMA
affinities could satisfy each resource it handles, and, once the merged best hint is known, picks
the concrete ids (CPUs, device ids, bytes per NUMA node) inside that affinity.

Providers are pure: they read the request, the node's topology and a snapshot of what is free, and
never mutate anything. The numa-aware plugin owns the bookkeeping between containers and pods.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol, runtime_checkable

import attrs

from numasched.api.allocation import PodAllocation
from numasched.api.dra import ClaimInfo
from numasched.api.dra_claims import NodeDra, in_use_with_ledger
from numasched.api.hint import ResourceHints, TopologyHint
from numasched.api.idset import IdSet
from numasched.api.node import NodeInfo
from numasched.api.numamask import NumaMask
from numasched.api.resource import Resource
from numasched.api.task import ContainerInfo, QosClass
from numasched.api.topology import NumaTopology, TopologyScope

# The plugin whose arguments the built-in provider factories read (for configuration errors).
NUMA_AWARE_PLUGIN = "numa-aware"


class ProviderError(Exception):
    """A provider cannot allocate what it was asked for (e.g. the hint left too few free ids).

    The message names the resource and the shortfall; the plugin reports it as the reason the task
    does not fit the node.
    """


@attrs.frozen(slots=True)
class HintRequest:
    """One unit the topology manager aligns: a container (container scope) or the pod (pod scope).

    requests: what to align. In container scope the container's own requests; in pod scope the
    pod's effective requests (max of the sum of app containers and of the largest init container,
    as the kubelet computes them).
    containers: the containers behind the request: exactly one in container scope, all of the pod's
    containers (init ones first) in pod scope, so a provider can apply per-container rules (the CPU
    manager gives exclusive CPUs only to containers with an integer CPU request).
    """

    pod: str  # namespace/name, for messages and logs
    container: str  # the container's name; "" in pod scope
    requests: Resource
    qos: QosClass
    scope: TopologyScope = TopologyScope.CONTAINER
    containers: tuple[ContainerInfo, ...] = ()
    limits: Resource = attrs.field(factory=Resource)
    # The pod's ResourceClaims this request aligns (providers/dra.py); empty for most pods.
    claims: tuple[ClaimInfo, ...] = ()

    def amount(self, resource: str) -> float:
        """The requested quantity in the resource's unit (CPUs, bytes, devices), not thousandths."""
        if resource == "cpu":
            return self.requests.milli_cpu / 1000.0
        if resource == "memory":
            return self.requests.memory
        return self.requests.scalars.get(resource, 0.0) / 1000.0

    def describe(self) -> str:
        return f"container {self.container}" if self.container else f"pod {self.pod}"


@attrs.frozen(slots=True)
class FreeResources:
    """What is still free on a node for this request.

    cpus: CPUs the static CPU manager may still hand out exclusively.
    devices: free, healthy device ids per resource name, in the topology's order.
    memory: free bytes per NUMA node per resource ("memory", "hugepages-1Gi").
    """

    cpus: IdSet = attrs.field(factory=IdSet)
    devices: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    memory: Mapping[str, Mapping[int, int]] = attrs.field(factory=dict)
    # Sets of NUMA nodes already holding memory pinned together (one per memory allocation); the
    # memory manager never splits such a group nor mixes it with other nodes.
    memory_groups: frozenset[NumaMask] = frozenset()
    # Per resource ("cpu" or a device resource): ids held by pods whose ids no source reports
    # (NodeInfo.unknown_holders). They may be any of the free ids above, so a request is admitted
    # only where it fits under every way they could lie, and no id of such a resource is promised.
    unknown: Mapping[str, int] = attrs.field(factory=dict)
    # The pods behind `unknown`, per resource, for messages.
    unknown_pods: Mapping[str, tuple[str, ...]] = attrs.field(factory=dict)
    # The node's DRA devices, those in use already taken out (None: no ResourceSlice applies).
    dra: NodeDra | None = None

    def free_devices(self, resource: str) -> tuple[str, ...]:
        return tuple(self.devices.get(resource, ()))

    def free_memory(self, resource: str) -> Mapping[int, int]:
        return self.memory.get(resource, {})

    def unknown_count(self, resource: str) -> int:
        return self.unknown.get(resource, 0)


# What a provider assigns for one resource: CPU ids ("cpu"), device ids (a device resource), or
# bytes per NUMA node (memory and hugepages).
Assigned = IdSet | tuple[str, ...] | Mapping[int, int]
ProviderAllocation = dict[str, Assigned]


@runtime_checkable
class HintProvider(Protocol):
    """A source of topology hints and the allocator for the resources it names."""

    @property
    def name(self) -> str: ...

    @property
    def resources(self) -> frozenset[str]: ...

    def hints(self, request: HintRequest, topology: NumaTopology, free: FreeResources) -> ResourceHints | None:
        """Per resource: the hints (None = no preference, [] = cannot be satisfied); None overall
        when the provider has nothing to say about this request."""
        ...

    def allocate(
        self, request: HintRequest, best_hint: TopologyHint, topology: NumaTopology, free: FreeResources
    ) -> ProviderAllocation:
        """The ids chosen for each resource of the request, inside best_hint's affinity when it has
        one; an empty dict when the provider assigns nothing. Raises ProviderError on a shortfall."""
        ...


# Entry points in the group numasched.hint_providers name a factory: it takes the numa-aware
# plugin's arguments mapping (the `arguments` of the plugin in the scheduler config) and returns
# a provider.
HintProviderFactory = Callable[[Mapping[str, Any]], HintProvider]
HINT_PROVIDER_GROUP = "numasched.hint_providers"


def free_after(free: FreeResources, added: PodAllocation) -> FreeResources | None:
    """free_resources of a node once `added` joins its NUMA ledger (NodeInfo.numa_step), from
    its free_resources before, without reading the node's tasks again; None where these two cannot
    tell it (DRA devices, whose use the ledger changes; a negative memory amount)."""
    if free.dra is not None:
        return None
    memory: dict[str, dict[int, int]] | None = None
    devices: dict[str, tuple[str, ...]] | None = None
    groups = free.memory_groups
    for container in added.containers:
        if container.memory:
            if any(size < 0 for per_numa in container.memory.values() for size in per_numa.values()):
                return None
            if memory is None:
                memory = {resource: dict(per_numa) for resource, per_numa in free.memory.items()}
            for resource, per_numa in container.memory.items():
                left = memory.get(resource)
                if left is None:
                    continue  # not a resource of the topology: free_resources does not read it
                for numa, size in per_numa.items():
                    if numa in left:
                        left[numa] = max(0, left[numa] - size)
            held_on = NumaMask.from_ids(
                numa for per_numa in container.memory.values() for numa, size in per_numa.items() if size
            )
            if not held_on.is_empty():
                groups = groups | {held_on}
        for resource, ids in container.devices.items():
            if not ids or resource not in free.devices:
                continue
            if devices is None:
                devices = dict(free.devices)
            taken = frozenset(ids)
            devices[resource] = tuple(device for device in devices[resource] if device not in taken)
    return FreeResources(
        cpus=free.cpus - added.cpus(),
        devices=free.devices if devices is None else devices,
        memory=free.memory if memory is None else memory,
        memory_groups=groups,
        unknown=free.unknown,
        unknown_pods=free.unknown_pods,
        dra=None,
    )


def free_resources(node: NodeInfo) -> FreeResources:
    """A snapshot of what is free on a node with topology: CPUs, device ids, NUMA memory, and what
    pods whose ids are unknown hold (the reading rule: NodeInfo.free_cpus, free_devices).

    Callers on the hot path keep it per node and node generation (the numa-aware plugin does),
    rather than building it per pod."""
    topology = node.topology
    if topology is None:
        return FreeResources()
    devices = {resource: node.free_devices(resource) for resource in topology.devices}
    memory: dict[str, dict[int, int]] = {}
    for resource, per_numa in topology.memory.items():
        used = node.numa_usage.memory.get(resource, {})
        memory[resource] = {numa: max(0, size - used.get(numa, 0)) for numa, size in per_numa.items()}
    groups = {
        NumaMask.from_ids(numa for per_numa in container.memory.values() for numa, size in per_numa.items() if size)
        for task in node.tasks.values()
        if task.allocation is not None
        for container in task.allocation.containers
        if container.memory
    }
    groups.discard(NumaMask())
    holdings = node.unknown_holdings()
    return FreeResources(
        cpus=node.free_cpus(),
        devices=devices,
        memory=memory,
        memory_groups=frozenset(groups),
        unknown={resource: count for resource, (count, _) in holdings.items()},
        unknown_pods={resource: pods for resource, (_, pods) in holdings.items()},
        dra=None if node.dra is None else in_use_with_ledger(node.dra, node.numa_usage.devices),
    )
