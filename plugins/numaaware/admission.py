"""A pod's topology admission on one node, as the kubelet's Topology Manager would run it.

Scope `container`: every container is aligned on its own, init containers first (in order), then
app containers; each is merged, admitted and allocated before the next one is considered, so a
later container sees what earlier ones took. Scope `pod`: the providers' hints for the pod's
effective request are merged once, then each container is allocated with that one hint.

Resources held by a finished init container are reusable by the containers after it (the
kubelet's CPU, device and memory reuse), except a restartable sidecar's, which it keeps.

Admission without allocation (admit_pod). The scheduler asks every feasible node whether the pod
fits and how many NUMA nodes it would span; only the chosen node needs the exact CPUs, devices and
memory. admit_pod answers with the hints and the merge alone, and leaves the choice of ids to
allocate_admitted, when all of these hold (otherwise it runs the full placement, place_pod):

* the providers are the built-in CPU, device and memory providers (a third-party provider may
  refuse at allocation, or pin something no hint announced);
* the policy is not none (under none the allocation itself is the admission);
* one request decides the pod: at most one container is pinned by any provider (in container
  scope a later container's hints depend on what earlier ones took, and memory pinned by one
  container forms a group the next must respect); in pod scope that container asks the
  providers for exactly what the pod does;
* that request asks for no NIC (NICs are placed next to the accelerators, possibly off the hint,
  and nic-alignment required refuses only at allocation) and for no device that reports no NUMA
  node (no hint, yet allocated and possibly short);
* the merged hint is preferred, with an affinity unless nothing has a hint at all.

A preferred merged hint is a mask M that every resource with hints stated, as narrow as that
resource's total on the node allows. Its providers then find ids inside M (the hint exists only
because M holds enough free) and whatever they choose needs every NUMA node of M (a narrower set
would have been a narrower preferred mask), so the allocation cannot fail and spans exactly M:
the verdict and the score are those of the full placement. A best-effort pod whose merged hint is
not preferred is decided by the allocation (it may fall short, and it may spill out of the hint),
so it gets the full placement.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping, Sequence

import attrs

from numasched.api.allocation import ContainerAllocation, PodAllocation
from numasched.api.hint import ResourceHints, TopologyHint
from numasched.api.idset import IdSet
from numasched.api.numamask import NumaMask
from numasched.api.resource import is_memory_resource
from numasched.api.task import ContainerInfo, TaskInfo
from numasched.api.topology import CpuManagerPolicy, NumaTopology, TopologyPolicy, TopologyScope
from numasched.plugins.numaaware.policy import merge
from numasched.plugins.numaaware.providers.base import (
    Assigned,
    FreeResources,
    HintProvider,
    HintRequest,
    ProviderAllocation,
    ProviderError,
)
from numasched.plugins.numaaware.providers.cpu import CpuHintProvider, guaranteed_cpus
from numasched.plugins.numaaware.providers.device import DeviceProvider, requested_devices
from numasched.plugins.numaaware.providers.dra import DraHintProvider
from numasched.plugins.numaaware.providers.memory import MemoryHintProvider, requested_memory

_GIB = 1 << 30
_NO_IDS = IdSet()


@attrs.frozen(slots=True)
class Placement:
    """The outcome of aligning a pod on a node: admitted with an allocation, or a reason."""

    admitted: bool
    reason: str = ""
    allocation: PodAllocation | None = None
    # NUMA nodes touched by everything assigned (CPUs, devices, memory); empty when nothing is pinned.
    numa: NumaMask = attrs.field(factory=NumaMask)


def containers_in_order(task: TaskInfo) -> list[ContainerInfo]:
    """Init containers first, in their order, then app containers: the kubelet's admission order."""
    return [c for c in task.containers if c.init] + [c for c in task.containers if not c.init]


def container_request(task: TaskInfo, container: ContainerInfo) -> HintRequest:
    claims = task.claims.claims if task.claims is not None and container is _first_app(task) else ()
    return HintRequest(
        pod=task.key,
        container=container.name,
        requests=container.requests,
        qos=task.qos,
        scope=TopologyScope.CONTAINER,
        containers=(container,),
        limits=container.limits,
        claims=claims,
    )


def _first_app(task: TaskInfo) -> ContainerInfo | None:
    """The container a pod's ResourceClaims are aligned with in container scope."""
    return next((container for container in task.containers if not container.init), None)


def pod_request(task: TaskInfo) -> HintRequest:
    return HintRequest(
        pod=task.key,
        container="",
        requests=task.init_resreq,
        qos=task.qos,
        scope=TopologyScope.POD,
        containers=tuple(containers_in_order(task)),
        claims=task.claims.claims if task.claims is not None else (),
    )


# -- free-resource bookkeeping between containers ---------------------------------------------------

# What a pod may reuse before any of its containers ran (pools are never changed in place).
_NOTHING_FREE = FreeResources()


def _union(first: FreeResources, second: FreeResources) -> FreeResources:
    if _holds_nothing(second) and _distinct_device_tuples(first):
        # What the general case would build has first's very content.
        return first
    devices = {
        resource: tuple(dict.fromkeys((*first.free_devices(resource), *second.free_devices(resource))))
        for resource in set(first.devices) | set(second.devices)
    }
    memory: dict[str, dict[int, int]] = {}
    for source in (first.memory, second.memory):
        for resource, per_numa in source.items():
            target = memory.setdefault(resource, {})
            for numa, size in per_numa.items():
                target[numa] = target.get(numa, 0) + size
    return FreeResources(
        first.cpus | second.cpus, devices, memory, first.memory_groups, first.unknown, first.unknown_pods, first.dra
    )


def _holds_nothing(pool: FreeResources) -> bool:
    return not pool.cpus and not pool.devices and not pool.memory


def _distinct_device_tuples(pool: FreeResources) -> bool:
    return all(type(ids) is tuple and len(set(ids)) == len(ids) for ids in pool.devices.values())


def _take(pool: FreeResources, assigned: Mapping[str, Assigned]) -> FreeResources:
    """The pool without what was assigned (memory: as much of it as the pool holds)."""
    if not assigned:
        return pool
    cpus = pool.cpus
    # Copied only when something of theirs is taken (pools are never changed in place).
    devices: dict[str, tuple[str, ...]] | None = None
    memory: dict[str, dict[int, int]] | None = None
    for resource, value in assigned.items():
        if isinstance(value, IdSet):
            cpus = cpus - value
        elif isinstance(value, tuple):
            if devices is None:
                devices = dict(pool.devices)
            taken = set(value)
            devices[resource] = tuple(device for device in pool.free_devices(resource) if device not in taken)
        else:
            if memory is None:
                memory = {resource: dict(per_numa) for resource, per_numa in pool.memory.items()}
            per_numa = memory.setdefault(resource, {})
            for numa, size in value.items():
                per_numa[numa] = max(0, per_numa.get(numa, 0) - size)
    return FreeResources(
        cpus,
        pool.devices if devices is None else devices,
        pool.memory if memory is None else memory,
        pool.memory_groups,
        pool.unknown,
        pool.unknown_pods,
        pool.dra,
    )


def _add(pool: FreeResources, assigned: Mapping[str, Assigned]) -> FreeResources:
    devices = {resource: value for resource, value in assigned.items() if isinstance(value, tuple)}
    memory = {resource: dict(value) for resource, value in assigned.items() if not isinstance(value, IdSet | tuple)}
    cpus = IdSet()
    for value in assigned.values():
        if isinstance(value, IdSet):
            cpus = cpus | value
    return _union(pool, FreeResources(cpus, devices, memory))


def _memory_groups(pool: FreeResources, assigned: Mapping[str, Assigned]) -> FreeResources:
    """A container's pinned memory forms a group later containers must respect."""
    ids = {
        numa
        for value in assigned.values()
        if not isinstance(value, IdSet | tuple)
        for numa, size in value.items()
        if size
    }
    if not ids:
        return pool
    return attrs.evolve(pool, memory_groups=pool.memory_groups | {NumaMask.from_ids(ids)})


# -- messages ---------------------------------------------------------------------------------------


def _format_amount(resource: str, amount: float) -> str:
    if is_memory_resource(resource):
        return f"{amount / _GIB:g}Gi" if amount >= _GIB else f"{amount:g}"
    return f"{amount:g}"


def free_per_numa(resource: str, topology: NumaTopology, free: FreeResources) -> dict[int, str]:
    """What is free of a resource on each NUMA node, for a person reading a fit error."""
    numa_ids = sorted(topology.numa_ids)
    if resource == "cpu":
        cpus_by_numa = topology.cpus_by_numa
        return {numa: str(free.cpus.count_common(cpus_by_numa.get(numa, _NO_IDS))) for numa in numa_ids}
    if resource in free.memory:
        per_numa = free.memory[resource]
        return {numa: _format_amount(resource, per_numa.get(numa, 0)) for numa in numa_ids}
    group = topology.devices.get(resource)
    if group is not None:
        counts = dict.fromkeys(numa_ids, 0)
        for device in free.free_devices(resource):
            info = group.by_id.get(device)
            if info is not None and info.numa in counts:
                counts[info.numa] += 1
        return {numa: str(count) for numa, count in counts.items()}
    return {}


def _where(policy: TopologyPolicy) -> str:
    if policy is TopologyPolicy.SINGLE_NUMA_NODE:
        return "on 1 NUMA node"
    return "on the fewest NUMA nodes that could hold it"


def rejection_reason(
    request: HintRequest,
    providers_hints: Sequence[ResourceHints | None],
    policy: TopologyPolicy,
    topology: NumaTopology,
    free: FreeResources,
    merges: MergeMemo | None = None,
) -> str:
    """Name the resource the merge could not align (or the resources that conflict). `merges`:
    merged hints kept by the caller (MergeMemo), asked for each resource alone where the node
    does not prefer the closest NUMA nodes (the option the plain merge here leaves out)."""
    resources: list[str] = []
    remembered = merges is not None and not topology.policies.prefer_closest_numa_nodes
    for provider_hints in providers_hints:
        for resource, hints in (provider_hints or {}).items():
            resources.append(resource)
            if remembered and merges is not None:
                _, alone = merges.merge(policy, [{resource: hints}], topology)
            else:
                _, alone = merge(policy, [{resource: hints}], topology.numa_ids)
            if not alone:
                # ResourceClaims are named, not counted (their hints are the claims' together).
                amount = request.amount(resource)
                what = f"{resource} {_format_amount(resource, amount)}" if amount else resource
                return _with_free(
                    f"{request.describe()}: {what} cannot be aligned {_where(policy)}",
                    [resource],
                    topology,
                    free,
                )
    names = " and ".join(resources) or "its resources"
    return _with_free(
        f"{request.describe()}: {names} cannot be aligned together {_where(policy)}", resources, topology, free
    )


def unknown_holdings_note(resources: Sequence[str], free: FreeResources) -> str:
    """ "; 4 nvidia.com/gpu held by pods whose ids are unknown (ns/a, ns/b)" for the resources of a
    message that have such holdings, else ""."""
    notes = [
        f"{free.unknown_count(resource)} {resource} held by pods whose ids are unknown "
        f"({', '.join(free.unknown_pods.get(resource, ()))})"
        for resource in resources
        if free.unknown_count(resource) > 0
    ]
    return f"; {'; '.join(notes)}, so any free id may be one of theirs" if notes else ""


def _with_free(message: str, resources: Sequence[str], topology: NumaTopology, free: FreeResources) -> str:
    parts: list[str] = []
    for resource in resources:
        per_numa = free_per_numa(resource, topology, free)
        if per_numa:
            text = ", ".join(f"{numa}->{value}" for numa, value in per_numa.items())
            parts.append(text if len(resources) == 1 else f"{resource} {text}")
    unknown = unknown_holdings_note(resources, free)
    if not parts:
        return f"{message} ({unknown[2:]})" if unknown else message
    return f"{message} (free per NUMA: {'; '.join(parts)}{unknown})"


# -- the walk ---------------------------------------------------------------------------------------


def _assigned_numa(
    assigned: Mapping[str, Assigned], topology: NumaTopology, providers: Sequence[HintProvider] = ()
) -> NumaMask:
    ids: set[int] = set()
    cpu_provider = next((provider for provider in providers if isinstance(provider, CpuHintProvider)), None)
    for resource, value in assigned.items():
        if isinstance(value, IdSet):
            # By the CPU provider's shared index where it has one (no per-CPU lookups).
            numa_ids = None if cpu_provider is None else cpu_provider.numa_nodes_of(topology, value)
            if numa_ids is None:
                numa_ids = {topology.cpu_info[cpu].numa for cpu in value if cpu in topology.cpu_info}
            ids.update(numa_ids)
        elif isinstance(value, tuple):
            group = topology.devices.get(resource)
            if group is not None:
                for device in value:
                    info = group.by_id.get(device)
                    if info is not None and info.numa is not None:
                        ids.add(info.numa)
        else:
            ids.update(numa for numa, size in value.items() if size)
    return NumaMask.from_ids(ids)


def _container_allocation(name: str, assigned: Mapping[str, Assigned], numa: NumaMask) -> ContainerAllocation:
    cpuset = IdSet()
    devices: dict[str, tuple[str, ...]] = {}
    memory: dict[str, dict[int, int]] = {}
    for resource, value in assigned.items():
        if isinstance(value, IdSet):
            cpuset = cpuset | value
        elif isinstance(value, tuple):
            if value:
                devices[resource] = value
        elif value:
            memory[resource] = dict(value)
    return ContainerAllocation(name, cpuset, numa if numa.count() else None, devices, memory)


def _allocate(
    request: HintRequest,
    hint: TopologyHint,
    providers: Sequence[HintProvider],
    topology: NumaTopology,
    free: FreeResources,
) -> ProviderAllocation:
    assigned: ProviderAllocation = {}
    pool = free
    last = len(providers) - 1
    for position, provider in enumerate(providers):
        chosen = provider.allocate(request, hint, topology, pool)
        assigned.update(chosen)
        if position < last:
            pool = _take(pool, chosen)
    return assigned


def _hints(
    request: HintRequest,
    providers: Sequence[HintProvider],
    topology: NumaTopology,
    free: FreeResources,
    pinning: Sequence[bool] | None = None,
) -> list[ResourceHints | None]:
    """Each provider's hints for the request; `pinning` (DecisionUnit.pinning, one flag per
    provider): a provider that pins nothing for this request has none (None) and is not asked."""
    if pinning is None or len(pinning) != len(providers):
        return [provider.hints(request, topology, free) for provider in providers]
    return [
        provider.hints(request, topology, free) if pins else None
        for provider, pins in zip(providers, pinning, strict=True)
    ]


def place_pod(
    task: TaskInfo,
    topology: NumaTopology,
    free: FreeResources,
    providers: Sequence[HintProvider],
    policy: TopologyPolicy,
    *,
    scope: TopologyScope | None = None,
) -> Placement:
    """Align every container of the task on this node, or say why the kubelet would refuse it."""
    scope = scope or topology.policies.topology_manager_scope
    pod_hint: TopologyHint | None = None
    if scope is TopologyScope.POD and policy is not TopologyPolicy.NONE:
        request = pod_request(task)
        providers_hints = _hints(request, providers, topology, free)
        pod_hint, admitted = _merge(policy, providers_hints, topology)
        if not admitted:
            return Placement(False, rejection_reason(request, providers_hints, policy, topology, free))
    return _walk(task, topology, free, providers, policy, pod_hint)


# Merged hints by what the merge reads (MergeMemo); past this many the memo starts over.
MAX_MERGES = 8192


class MergeMemo:
    """Merged hints remembered by policy, NUMA ids and the very hint tuples the providers gave
    (by identity: the CPU and device providers give the same tuple for every node of one shape
    at equal free counts). Each entry keeps the tuples it was merged from, so their ids cannot be
    reused by other objects while the entry lives."""

    __slots__ = ("_merged",)

    def __init__(self) -> None:
        self._merged: dict[Hashable, tuple[tuple[TopologyHint, bool], list[object]]] = {}

    def merge(
        self, policy: TopologyPolicy, providers_hints: Sequence[ResourceHints | None], topology: NumaTopology
    ) -> tuple[TopologyHint, bool]:
        # The key, flat: per provider None, or its number of resources and then per resource its
        # name and its hints' identity (None for no preference): read back in one way only.
        key: list[Hashable] = [policy, topology.numa_ids]
        held: list[object] = []
        for provider_hints in providers_hints:
            if provider_hints is None:
                key.append(None)
                continue
            key.append(len(provider_hints))
            for resource, hints in provider_hints.items():
                key.append(resource)
                if hints is None:
                    key.append(None)
                elif isinstance(hints, tuple):
                    key.append(id(hints))
                    held.append(hints)
                else:
                    # A list may change after the call: its identity does not name its content.
                    return _merge_now(policy, providers_hints, topology)
        found = self._merged.get(tuple(key))
        # An entry keeps the tuples its key names alive, so an id in a key names the very tuple.
        if found is not None:
            return found[0]
        if len(self._merged) >= MAX_MERGES:
            self._merged.clear()
        merged = _merge_now(policy, providers_hints, topology)
        self._merged[tuple(key)] = (merged, held)
        return merged

    def __len__(self) -> int:
        return len(self._merged)


def _merge(
    policy: TopologyPolicy,
    providers_hints: Sequence[ResourceHints | None],
    topology: NumaTopology,
    memo: MergeMemo | None = None,
) -> tuple[TopologyHint, bool]:
    """merge for this node; with a memo, remembered across calls (MergeMemo). Under
    prefer-closest-numa-nodes the distances also count, and the merge is not remembered."""
    if memo is None or topology.policies.prefer_closest_numa_nodes:
        return _merge_now(policy, providers_hints, topology)
    return memo.merge(policy, providers_hints, topology)


def _merge_now(
    policy: TopologyPolicy, providers_hints: Sequence[ResourceHints | None], topology: NumaTopology
) -> tuple[TopologyHint, bool]:
    return merge(
        policy,
        providers_hints,
        topology.numa_ids,
        prefer_closest=topology.policies.prefer_closest_numa_nodes,
        distances=topology.distances,
    )


def _walk(
    task: TaskInfo,
    topology: NumaTopology,
    free: FreeResources,
    providers: Sequence[HintProvider],
    policy: TopologyPolicy,
    fixed_hint: TopologyHint | None,
) -> Placement:
    """Allocate the containers in the kubelet's order: each with fixed_hint when it is given (pod
    scope, or a hint already merged for the pod), else with its own merged hint."""
    available = free
    reusable = _NOTHING_FREE
    allocations: list[ContainerAllocation] = []
    touched = NumaMask()
    containers = containers_in_order(task)
    last = len(containers) - 1
    for position, container in enumerate(containers):
        request = container_request(task, container)
        pool = _union(available, reusable)
        if fixed_hint is not None:
            hint = fixed_hint
        elif policy is TopologyPolicy.NONE:
            hint = TopologyHint(None, False)
        else:
            providers_hints = _hints(request, providers, topology, pool)
            hint, admitted = _merge(policy, providers_hints, topology)
            if not admitted:
                return Placement(False, rejection_reason(request, providers_hints, policy, topology, pool))
        try:
            assigned = _allocate(request, hint, providers, topology, pool)
        except ProviderError as error:
            return Placement(False, f"{request.describe()}: {error}")
        if position < last:
            # What the next containers may use (nothing is left to use after the last one).
            available = _memory_groups(_take(available, assigned), assigned)
            reusable = _take(reusable, assigned)
            if container.init and not container.sidecar:
                reusable = _add(reusable, assigned)
        numa = _assigned_numa(assigned, topology, providers)
        touched = touched | numa
        allocation = _container_allocation(container.name, assigned, numa)
        if allocation.cpuset or allocation.devices or allocation.memory:
            allocations.append(allocation)
    return Placement(True, "", PodAllocation(tuple(allocations)) if allocations else None, touched)


# -- admission without allocation -------------------------------------------------------------------


@attrs.frozen(slots=True)
class Admission:
    """A pod admitted on a node by its hints and the merge alone (see the module doc).

    hint: the merged hint every container is allocated with (allocate_admitted); numa: the NUMA
    nodes that allocation will touch, exactly what the full placement's `numa` would be.
    """

    hint: TopologyHint
    numa: NumaMask


_BUILT_IN_PROVIDERS: frozenset[type] = frozenset({CpuHintProvider, DeviceProvider, MemoryHintProvider, DraHintProvider})


def _pins(provider: HintProvider, request: HintRequest, topology: NumaTopology) -> bool:
    """Whether a built-in provider has a hint for the request, that is, would assign it something:
    exclusive CPUs, devices of its resources, or pinned memory (whatever is free)."""
    if isinstance(provider, CpuHintProvider):
        return topology.policies.cpu_manager_policy == CpuManagerPolicy.STATIC and guaranteed_cpus(request) > 0
    if isinstance(provider, DeviceProvider):
        return any(requested_devices(request, resource) > 0 for resource in provider.resources)
    if isinstance(provider, MemoryHintProvider):
        return provider.applies(request, topology) and bool(requested_memory(request, topology))
    if isinstance(provider, DraHintProvider):
        return bool(request.claims)
    return True


def _pins_nothing(request: HintRequest, topology: NumaTopology, providers: Sequence[HintProvider]) -> bool:
    return not any(_pins(provider, request, topology) for provider in providers)


def _allocation_follows_hint(request: HintRequest, topology: NumaTopology, providers: Sequence[HintProvider]) -> bool:
    """Whether the devices of the request are all chosen inside a preferred hint: false for NICs
    (placed next to the accelerators, and under nic-alignment required refused only at allocation)
    and for devices that report no NUMA node (no hint, yet allocated and possibly short); false
    for ResourceClaims (their devices' NUMA nodes may be unknown, and they may be chosen off it)."""
    if request.claims:
        return False
    for provider in providers:
        if not isinstance(provider, DeviceProvider):
            continue
        for resource in provider.resources:
            if requested_devices(request, resource) == 0:
                continue
            if resource in provider.nic_resources:
                return False
            group = topology.devices.get(resource)
            if group is not None and not any(device.numa is not None for device in group.devices):
                return False
    return True


def _same_demand(first: HintRequest, second: HintRequest, topology: NumaTopology) -> bool:
    """Whether the built-in providers would ask for the same amounts for both requests."""
    return (
        guaranteed_cpus(first) == guaranteed_cpus(second)
        and first.requests.scalars == second.requests.scalars
        and requested_memory(first, topology) == requested_memory(second, topology)
    )


class Unasked(enum.Enum):
    """admit_pod's `unit` not given: it is computed."""

    UNASKED = enum.auto()


UNASKED = Unasked.UNASKED


@attrs.frozen(slots=True)
class DecisionUnit:
    """What decides the pod on a node: nothing (no container is pinned), or one request.
    `pinning`: per provider (in the providers' order) whether it pins anything for the request
    (_pins); one that does not has no hint for it. None: not known, every provider is asked."""

    request: HintRequest | None
    pinning: tuple[bool, ...] | None = attrs.field(default=None, eq=False)


class Decides(enum.Enum):
    """What decides a pod on a machine (UnitPlan)."""

    NOTHING = "nothing"  # no container is pinned
    POD = "pod"  # the pod-level request (pod scope)
    CONTAINER = "container"  # one container's request


@attrs.frozen(slots=True)
class UnitPlan:
    """Which request decides a pod on a machine (decision_unit), apart from the pod's names: pods
    of one shape on machines of one content have one plan. `position`: for CONTAINER, the deciding
    container's place in task.containers (the pod's shape fixes the order of its containers), so a
    unit is built without ordering them."""

    decides: Decides
    position: int = -1
    # Per provider whether it pins anything for the deciding request (DecisionUnit.pinning); the
    # pod's shape and the machine's content decide it. Empty: not known.
    pinning: tuple[bool, ...] = attrs.field(default=(), eq=False, kw_only=True)

    def unit(self, task: TaskInfo) -> DecisionUnit:
        if self.decides is Decides.NOTHING:
            return DecisionUnit(None)
        pinning = self.pinning or None
        if self.decides is Decides.POD:
            return DecisionUnit(pod_request(task), pinning)
        return DecisionUnit(container_request(task, task.containers[self.position]), pinning)


def unit_plan(
    task: TaskInfo, topology: NumaTopology, providers: Sequence[HintProvider], scope: TopologyScope
) -> UnitPlan | None:
    """decision_unit's plan; None when the full placement is needed. It reads the pod's shape
    (QoS, containers' kinds, requests and limits, claims), the topology's content and scope, and
    the providers, nothing else."""
    if not all(type(provider) in _BUILT_IN_PROVIDERS for provider in providers):
        return None
    ordered = containers_in_order(task)
    requests = [container_request(task, container) for container in ordered]
    active = [index for index, request in enumerate(requests) if not _pins_nothing(request, topology, providers)]
    if len(active) > 1:
        return None
    if scope is TopologyScope.POD:
        whole = pod_request(task)
        if not active:
            return UnitPlan(Decides.NOTHING) if _pins_nothing(whole, topology, providers) else None
        if not _same_demand(whole, requests[active[0]], topology):
            return None
        if not _allocation_follows_hint(whole, topology, providers):
            return None
        return UnitPlan(Decides.POD, pinning=tuple(_pins(provider, whole, topology) for provider in providers))
    if not active:
        return UnitPlan(Decides.NOTHING)
    decisive = requests[active[0]]
    if not _allocation_follows_hint(decisive, topology, providers):
        return None
    deciding = ordered[active[0]]
    position = next(place for place, container in enumerate(task.containers) if container is deciding)
    pinning = tuple(_pins(provider, decisive, topology) for provider in providers)
    return UnitPlan(Decides.CONTAINER, position, pinning=pinning)


def decision_unit(
    task: TaskInfo, topology: NumaTopology, providers: Sequence[HintProvider], scope: TopologyScope
) -> DecisionUnit | None:
    """The single request whose merged hint decides the pod, when admission may be decided without
    allocating; None when the full placement is needed."""
    plan = unit_plan(task, topology, providers, scope)
    return None if plan is None else plan.unit(task)


def _states_hints(providers_hints: Sequence[ResourceHints | None]) -> bool:
    for provider_hints in providers_hints:
        if provider_hints:
            for hints in provider_hints.values():
                if hints is not None:
                    return True
    return False


def admit_pod(
    task: TaskInfo,
    topology: NumaTopology,
    free: FreeResources,
    providers: Sequence[HintProvider],
    policy: TopologyPolicy,
    *,
    scope: TopologyScope | None = None,
    merges: MergeMemo | None = None,
    unit: DecisionUnit | Unasked | None = UNASKED,
) -> Placement | Admission:
    """place_pod's verdict and NUMA span, without choosing ids where that is exact (module doc):
    an Admission, to be completed by allocate_admitted on the chosen node, or the full Placement.
    `merges`: merged hints kept by the caller across calls (_merge). `unit`: decision_unit of
    this task, topology and scope when the caller kept it (it depends on nothing else)."""
    scope = scope or topology.policies.topology_manager_scope
    if policy is TopologyPolicy.NONE:
        unit = None
    elif isinstance(unit, Unasked):
        unit = decision_unit(task, topology, providers, scope)
    if unit is None:
        return place_pod(task, topology, free, providers, policy, scope=scope)
    if unit.request is None:
        return Placement(True)
    providers_hints = _hints(unit.request, providers, topology, free, unit.pinning)
    hint, admitted = _merge(policy, providers_hints, topology, merges)
    if not admitted:
        return Placement(False, rejection_reason(unit.request, providers_hints, policy, topology, free, merges))
    if hint.preferred and not _states_hints(providers_hints):
        return Admission(hint, NumaMask())
    if hint.preferred and hint.affinity is not None:
        # Every stated hint is this mask and is as narrow as the resource allows, so whatever is
        # chosen inside it needs all of its NUMA nodes.
        return Admission(hint, hint.affinity)
    # Not preferred (best-effort): whether the ids can be found, and where, decides.
    return _walk(task, topology, free, providers, policy, hint)


def allocate_admitted(
    task: TaskInfo,
    admission: Admission,
    topology: NumaTopology,
    free: FreeResources,
    providers: Sequence[HintProvider],
    policy: TopologyPolicy,
) -> Placement:
    """The ids for an admitted pod: place_pod's allocation with the hint admission merged."""
    return _walk(task, topology, free, providers, policy, admission.hint)
