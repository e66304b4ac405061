"""NUMA restrictions: another plugin holds a pod's pinned resources to some NUMA nodes of a node.

A plugin that implements RestrictsNuma (numa-affinity-group is the built-in one) is asked once per
pod being decided; it answers None (no restriction for this pod anywhere) or a function of the
node giving a NumaRestriction or None. numa-aware then places the pod with the node's free
resources cut down to the allowed NUMA nodes (free_within) instead of running its shared,
memoised admission.

Why the kubelet still admits what is placed this way: every hint computed from a subset of the
free ids is also a hint of the whole node (a mask whose free ids suffice in the subset suffices
on the node), and whether a hint is preferred is measured against the node's total, not what is
free; so a merged hint the policy admits here is one it admits on the whole node, and the ids
chosen inside it (written on the binding, enforced by the node agent) lie in the allowed NUMA
nodes. Only pinned resources (exclusive CPUs, aligned devices, pinned memory) are held: a pod
that pins nothing floats over the node, as the kubelet lets it.

Companions: pods of the same job and group still to be placed on this node after this one. The
pod is then held to the narrowest set of NUMA nodes (containing the allowed ones) on which it and
every companion, placed one after another as numa-aware would place them, all fit; so the first
pod of a gang never takes NUMA nodes that leave no room for the rest of its group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import attrs

from numasched.api.allocation import PodAllocation
from numasched.api.numamask import NumaMask, iterate_masks
from numasched.api.topology import NumaTopology
from numasched.plugins.numaaware.admission import Placement
from numasched.plugins.numaaware.providers.base import FreeResources

if TYPE_CHECKING:
    from numasched.api.node import NodeInfo
    from numasched.api.task import TaskInfo
    from numasched.scheduler.framework.session import Session


@attrs.frozen(slots=True, eq=False)
class NumaRestriction:
    """Where on one node a pod's pinned resources may go.

    allowed: the NUMA nodes its group already holds there (empty: none yet);
    required: True refuses the node when the pod (with its companions) fits on no allowed set;
      False then places it as if unrestricted;
    companions: pods to be placed after it on the same NUMA nodes, in the order they will be;
    label: who restricts, for messages ("numa affinity group team/g1 (required)").
    """

    allowed: NumaMask
    required: bool
    companions: tuple[TaskInfo, ...] = ()
    label: str = ""
    # NUMA nodes every pinned pod of the group there holds (empty: none in common, or none yet);
    # a pod placed must hold one of them too, so every two pods of the group share a NUMA node.
    core: NumaMask = attrs.field(factory=NumaMask)


# What a restricting plugin answers per pod: per node, its restriction there (None: none).
NodeRestriction = Callable[["NodeInfo"], NumaRestriction | None]


@runtime_checkable
class RestrictsNuma(Protocol):
    """A plugin that holds pods to NUMA nodes (numa-aware asks it once per pod)."""

    def numa_restriction(self, task: TaskInfo) -> NodeRestriction | None: ...


def restriction_of(ssn: Session | None, task: TaskInfo) -> NodeRestriction | None:
    """The first restricting plugin's answer for the pod (in tier order); None without a session
    (a tool calling numa-aware directly) or when no plugin restricts it."""
    if ssn is None:
        return None
    for plugin in ssn.plugins.values():
        if isinstance(plugin, RestrictsNuma):
            restrict = plugin.numa_restriction(task)
            if restrict is not None:
                return restrict
    return None


def free_within(free: FreeResources, topology: NumaTopology, allowed: NumaMask) -> FreeResources:
    """What is free on the allowed NUMA nodes only. Devices that report no NUMA node stay (no
    hint places them anywhere in particular); what unknown holders hold stays counted, since it
    may lie on the allowed NUMA nodes."""
    cpus = free.cpus & topology.cpus_in(allowed)
    devices: dict[str, tuple[str, ...]] = {}
    for resource, ids in free.devices.items():
        group = topology.devices.get(resource)
        if group is None:
            devices[resource] = tuple(ids)
            continue
        kept = []
        for device in ids:
            info = group.by_id.get(device)
            if info is None or info.numa is None or allowed.is_set(info.numa):
                kept.append(device)
        devices[resource] = tuple(kept)
    memory = {
        resource: {numa: size for numa, size in per_numa.items() if allowed.is_set(numa)}
        for resource, per_numa in free.memory.items()
    }
    return attrs.evolve(free, cpus=cpus, devices=devices, memory=memory)


def free_after(free: FreeResources, allocation: PodAllocation | None) -> FreeResources:
    """What stays free once a placed pod holds its allocation."""
    if allocation is None:
        return free
    taken_cpus = allocation.cpus()
    devices = {
        resource: tuple(device for device in ids if device not in allocation.devices(resource))
        for resource, ids in free.devices.items()
    }
    memory = {resource: dict(per_numa) for resource, per_numa in free.memory.items()}
    groups = set(free.memory_groups)
    for container in allocation.containers:
        pinned: set[int] = set()
        for resource, per_numa in container.memory.items():
            target = memory.setdefault(resource, {})
            for numa, size in per_numa.items():
                target[numa] = max(0, target.get(numa, 0) - size)
                if size:
                    pinned.add(numa)
        if pinned:
            groups.add(NumaMask.from_ids(pinned))
    return attrs.evolve(
        free, cpus=free.cpus - taken_cpus, devices=devices, memory=memory, memory_groups=frozenset(groups)
    )


# Places one pod on the node's topology with the given free resources (numa-aware's full placement
# under that pod's policy on the node).
PlaceFn = Callable[["TaskInfo", FreeResources], Placement]


def candidate_masks(numa_ids: Sequence[int], allowed: NumaMask, grow: bool) -> list[NumaMask]:
    """The NUMA sets a pod may be held to: the allowed set alone, or (grow) every set containing
    it, fewest NUMA nodes first and then in the order the kubelet iterates masks."""
    if not grow:
        return [allowed]
    return [mask for mask in iterate_masks(numa_ids) if allowed.is_subset_of(mask)]


def place_within(
    task: TaskInfo,
    restriction: NumaRestriction,
    topology: NumaTopology,
    free: FreeResources,
    place: PlaceFn,
) -> Placement:
    """The pod's placement held to the restriction (module doc): on the narrowest candidate set
    where it and its companions all fit, each sharing a NUMA node with the group's core; if none,
    a refusal (required) or the unrestricted placement (preferred)."""
    grow = bool(restriction.companions) or restriction.allowed.is_empty()
    first_refusal = ""
    for mask in candidate_masks(sorted(topology.numa_ids), restriction.allowed, grow):
        placement = _place_member(task, free, mask, restriction.core, topology, place)
        if not placement.admitted:
            first_refusal = first_refusal or placement.reason
            continue
        core = _narrowed(restriction.core, placement.numa)
        refusal = _companions_refusal(
            restriction.companions, free_after(free, placement.allocation), mask, core, topology, place
        )
        if not refusal:
            return placement
        first_refusal = first_refusal or refusal
    if not restriction.required:
        return place(task, free)
    return Placement(False, refusal_reason(restriction, first_refusal))


def _narrowed(core: NumaMask, numa: NumaMask) -> NumaMask:
    """The group's common NUMA nodes once a pod holding `numa` joins (a pod pinning nothing
    changes nothing)."""
    if numa.is_empty():
        return core
    return numa if core.is_empty() else core & numa


def _place_member(
    task: TaskInfo, free: FreeResources, within: NumaMask, core: NumaMask, topology: NumaTopology, place: PlaceFn
) -> Placement:
    """The pod inside `within`, holding a NUMA node of the core: on the core alone when it fits
    there (a single-NUMA pod must), else anywhere inside `within` that touches the core."""
    if not core.is_empty():
        placement = place(task, free_within(free, topology, core & within))
        if placement.admitted:
            return placement
    placement = place(task, free_within(free, topology, within))
    if (
        placement.admitted
        and not core.is_empty()
        and not placement.numa.is_empty()
        and (placement.numa & core).is_empty()
    ):
        return Placement(
            False, f"it would share no NUMA node with its group's pods (all of them hold NUMA node(s) {core.format()})"
        )
    return placement


def _companions_refusal(
    companions: Sequence[TaskInfo],
    free: FreeResources,
    within: NumaMask,
    core: NumaMask,
    topology: NumaTopology,
    place: PlaceFn,
) -> str:
    """Why the companions cannot follow, one after another ("" when they can)."""
    for companion in companions:
        placement = _place_member(companion, free, within, core, topology, place)
        if not placement.admitted:
            return f"{companion.key} would not fit beside it: {placement.reason}"
        core = _narrowed(core, placement.numa)
        free = free_after(free, placement.allocation)
    return ""


def refusal_reason(restriction: NumaRestriction, detail: str) -> str:
    """Why a required restriction refuses the node: the group, the NUMA nodes it holds, what of
    the unit does not fit."""
    allowed = restriction.allowed
    where = f"NUMA node(s) {allowed.format()}" if not allowed.is_empty() else "any set of NUMA nodes"
    companions = restriction.companions
    if companions:
        unit = f"the pod and its {len(companions)} pending group peer(s) of the same job do not fit together on {where}"
        if not allowed.is_empty():
            unit += " or any wider set containing them"
    else:
        unit = f"the pod does not fit on {where}, which its group holds here"
    return f"{restriction.label}: {unit}" + (f" ({detail})" if detail else "")
