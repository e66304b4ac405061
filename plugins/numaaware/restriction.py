"""NUMA restrictions: another plugin keeps a pod on some NUMA nodes of a node, or off the node.

A plugin that implements RestrictsNuma (numa-affinity-group is the built-in one) is asked once per
pod being decided; it answers None (no restriction for this pod anywhere) or a function of the
node giving a NumaRestriction or None. numa-aware decides the pod on the node as it always does
(the kubelet's own choice of NUMA nodes and ids, which numa-aware reproduces), and admits the
node only when that outcome keeps the group together: the NUMA nodes its pinned
resources land on lie within the allowed ones and include one of the core (every pinned pod of
the group there holds a core NUMA node, so any two of them share one).

The placement is checked, never steered: where the kubelet pins a container itself (exclusive
CPUs under the static CPU manager, devices, pinned memory) it chooses by its own hint, the
narrowest that fits, lowest NUMA nodes first, and ignores what the scheduler would prefer. A pod
whose kubelet choice would split the group waits rather than be bound where it would split; a
pod that pins nothing floats over the node and never splits anything.

Companions: pods of the same job and group still to be placed on this node after this one (a
gang). The node is admitted only when the pod and then each companion, placed one after another
as the kubelet would place them, all keep together; so the first pod of a gang never goes where
the rest of its group cannot follow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import attrs

from numasched.api.allocation import PodAllocation
from numasched.api.numamask import NumaMask
from numasched.plugins.numaaware.admission import Placement
from numasched.plugins.numaaware.providers.base import FreeResources

if TYPE_CHECKING:
    from numasched.api.node import NodeInfo
    from numasched.api.task import TaskInfo
    from numasched.scheduler.framework.session import Session


@attrs.frozen(slots=True, eq=False)
class NumaRestriction:
    """Where on one node a pod's pinned resources may go.

    allowed: the NUMA nodes its group's pinned pods hold there (empty: none yet);
    companions: pods to be placed after it on the same node, in the order they will be;
    label: who restricts, for messages ("numa affinity group team/g1 (required)").
    """

    allowed: NumaMask
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


def any_restricting(ssn: Session) -> bool:
    """Whether a plugin of the session restricts NUMA placement."""
    return any(isinstance(plugin, RestrictsNuma) for plugin in ssn.plugins.values())


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


def apart(numa: NumaMask, allowed: NumaMask, core: NumaMask) -> str:
    """Why a pod on these NUMA nodes would not be with its group ("" when it would): outside
    the NUMA nodes the group holds, or sharing none of its core. A pod pinning nothing is with
    any group."""
    if numa.is_empty():
        return ""
    if not allowed.is_empty() and not numa.is_subset_of(allowed):
        return f"NUMA node(s) {numa.format()}, outside NUMA node(s) {allowed.format()} its group holds there"
    if not core.is_empty() and (numa & core).is_empty():
        return (
            f"NUMA node(s) {numa.format()}, sharing none of NUMA node(s) {core.format()} every pod of its group holds"
        )
    return ""


def joined(allowed: NumaMask, core: NumaMask, numa: NumaMask) -> tuple[NumaMask, NumaMask]:
    """The group's NUMA nodes and core once a pod on `numa` joins it."""
    if numa.is_empty():
        return allowed, core
    return allowed | numa, numa if core.is_empty() else core & numa


def keeps_group(
    numa: NumaMask,
    allocation: PodAllocation | None,
    restriction: NumaRestriction,
    free: FreeResources,
    place: PlaceFn,
) -> str:
    """Why the pod, placed on `numa` with `allocation` (as the kubelet will place it), or a
    companion placed after it, would not be with its group; "" when all would (module doc)."""
    problem = apart(numa, restriction.allowed, restriction.core)
    if problem:
        return f"{restriction.label}: the pod would be aligned to {problem}"
    allowed, core = joined(restriction.allowed, restriction.core, numa)
    pool = free_after(free, allocation)
    for companion in restriction.companions:
        following = place(companion, pool)
        if not following.admitted:
            return (
                f"{restriction.label}: {companion.key} of the same gang could not follow onto this node: "
                f"{following.reason}"
            )
        problem = apart(following.numa, allowed, core)
        if problem:
            return f"{restriction.label}: {companion.key} of the same gang would follow onto {problem}"
        allowed, core = joined(allowed, core, following.numa)
        pool = free_after(pool, following.allocation)
    return ""
