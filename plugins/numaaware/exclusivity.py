"""singleNUMANodeExclusive: keep pods on one NUMA node apart from pods that span NUMA nodes.

Koordinator's semantics (nodenumaresource NodeAllocation.NUMANodeSharedStatus and
topologymanager checkExclusivePolicy), with every pinned pod of the node counted:

- a NUMA node is `idle` when no pod pinned there, `single` when only pods that sit on one NUMA
  node pinned there, `shared` as soon as a pod spanning several NUMA nodes pinned there;
- a pod whose placement sits on one NUMA node may not take a `shared` one; a pod whose placement
  spans NUMA nodes may not take any `single` one;
- it applies to pods that ask for it (or that Koordinator's default makes Required) and only under
  the restricted and single-numa-node policies, as in Koordinator's Filter.

Required rules such placements out (the predicate); Preferred ranks them below those that keep
the rule (the score). Where the agent pins the pod, the scheduler first looks for another
placement on the node that keeps the rule (the NUMA nodes it would break are left out of what is
free); where the kubelet pins it, its own choice is the only placement there is.

The node's state comes from its tasks' allocations (their decisions), so it holds across cycles
(the cache reads each bound pod's decision back) and within a session (statement allocations).
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from numasched.api.allocation import PodAllocation
from numasched.api.idset import IdSet
from numasched.api.numamask import NumaMask
from numasched.api.topology import NumaTopology, TopologyPolicy
from numasched.plugins.numaaware.pod_policy import Exclusivity
from numasched.plugins.numaaware.providers.base import FreeResources

# The policies under which Koordinator applies singleNUMANodeExclusive.
EXCLUSIVE_POLICIES = frozenset({TopologyPolicy.RESTRICTED, TopologyPolicy.SINGLE_NUMA_NODE})


@attrs.frozen(slots=True)
class NumaOccupancy:
    """Per NUMA node of one node: whether single-NUMA pods and spanning pods have pinned there."""

    single: frozenset[int] = frozenset()
    spanning: frozenset[int] = frozenset()

    @property
    def shared(self) -> frozenset[int]:
        """Koordinator's `shared` status: some spanning pod pinned there."""
        return self.spanning

    @property
    def single_only(self) -> frozenset[int]:
        """Koordinator's `single` status: single-NUMA pods and no spanning pod."""
        return self.single - self.spanning


def allocation_numa(allocation: PodAllocation, topology: NumaTopology) -> NumaMask:
    """The NUMA nodes a decision pins: its containers' NUMA nodes, else those of its CPUs."""
    mask = allocation.numa()
    if mask.count():
        return mask
    cpu_info = topology.cpu_info
    return NumaMask.from_ids({cpu_info[cpu].numa for cpu in allocation.cpus() if cpu in cpu_info})


def occupancy(allocations: Iterable[PodAllocation], topology: NumaTopology) -> NumaOccupancy:
    single: set[int] = set()
    spanning: set[int] = set()
    for allocation in allocations:
        ids = allocation_numa(allocation, topology).ids()
        if len(ids) == 1:
            single.update(ids)
        elif len(ids) > 1:
            spanning.update(ids)
    return NumaOccupancy(frozenset(single), frozenset(spanning))


def conflict(placement: NumaMask, state: NumaOccupancy) -> frozenset[int]:
    """The NUMA nodes of the placement that break the rule (empty: it keeps it). A placement that
    pins nothing takes part in nothing."""
    ids = placement.ids()
    if len(ids) == 1:
        return frozenset(ids) & state.shared
    return frozenset(ids) & state.single_only


def describe_conflict(placement: NumaMask, nodes: frozenset[int], exclusive: Exclusivity) -> str:
    """Why a placement breaks the rule, naming NUMA nodes but never the node (so equal nodes group)."""
    listed = ",".join(str(numa) for numa in sorted(nodes))
    if placement.count() == 1:
        what = f"the pod would sit on NUMA node {listed}, which a pod spanning NUMA nodes uses"
    else:
        what = f"the pod would span NUMA nodes {placement.ids()}, and NUMA node(s) {listed} hold single-NUMA pods"
    return f"singleNUMANodeExclusive {exclusive.value}: {what}"


def without_numa(free: FreeResources, numa_ids: frozenset[int], topology: NumaTopology) -> FreeResources:
    """What is free, less everything on these NUMA nodes: a placement found in it avoids them."""
    if not numa_ids:
        return free
    mask = NumaMask.from_ids(numa_ids)
    cpus = free.cpus - topology.cpus_in(mask)
    devices: dict[str, tuple[str, ...]] = {}
    for resource, ids in free.devices.items():
        group = topology.devices.get(resource)
        devices[resource] = tuple(
            device
            for device in ids
            if group is None or (info := group.by_id.get(device)) is None or info.numa not in numa_ids
        )
    memory = {
        resource: {numa: (0 if numa in numa_ids else size) for numa, size in per_numa.items()}
        for resource, per_numa in free.memory.items()
    }
    return attrs.evolve(free, cpus=IdSet(cpus), devices=devices, memory=memory)


def avoid_sets(state: NumaOccupancy) -> list[frozenset[int]]:
    """The NUMA nodes to leave out, in the order to try, when the first placement broke the rule:
    the shared ones (a single-NUMA placement then avoids them), the single ones (a spanning one
    avoids them), then both (only idle NUMA nodes)."""
    tried: list[frozenset[int]] = []
    for nodes in (state.shared, state.single_only, state.shared | state.single_only):
        if nodes and nodes not in tried:
            tried.append(nodes)
    return tried
