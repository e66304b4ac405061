"""Memory and hugepages per NUMA node: the kubelet memory manager's Static policy as a provider.

Only Guaranteed pods on nodes whose memory manager policy is Static get NUMA-pinned memory, and
only for the memory resources the node's topology reports per NUMA node. Hints follow the memory
manager: a NUMA mask is a candidate when its allocatable memory covers the request, it respects
the groups earlier allocations formed (a NUMA node pinned alone cannot join a group, a node of a
group cannot be used alone or with other nodes), and its free memory covers the request; a hint
is preferred when its mask is as narrow as the narrowest mask whose allocatable memory suffices.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from numasched.api.hint import ResourceHints, TopologyHint
from numasched.api.numamask import NumaMask, iterate_masks
from numasched.api.task import QosClass
from numasched.api.topology import NumaTopology
from numasched.plugins.numaaware.providers.base import (
    FreeResources,
    HintRequest,
    ProviderAllocation,
    ProviderError,
)

STATIC_POLICY = "Static"
HUGEPAGES_PREFIX = "hugepages-"


def requested_memory(request: HintRequest, topology: NumaTopology) -> dict[str, int]:
    """Bytes requested per memory resource the topology reports per NUMA node."""
    wanted: dict[str, int] = {}
    for resource in topology.memory:
        if resource == "memory":
            size = int(request.requests.memory)
        elif resource.startswith(HUGEPAGES_PREFIX):
            # Scalars are kept in thousandths of their unit.
            size = round(request.requests.scalars.get(resource, 0.0) / 1000.0)
        else:
            continue
        if size > 0:
            wanted[resource] = size
    return wanted


def _group_of(numa: int, groups: frozenset[NumaMask]) -> NumaMask | None:
    """The widest existing group holding this NUMA node (kubelet: its memory state's cells)."""
    found: NumaMask | None = None
    for group in groups:
        if group.is_set(numa) and (found is None or group.count() > found.count()):
            found = group
    return found


def _respects_groups(mask: NumaMask, groups: frozenset[NumaMask]) -> bool:
    single = mask.count() == 1
    for numa in mask.ids():
        group = _group_of(numa, groups)
        if group is None:
            continue
        if single and group.count() > 1:
            return False
        if not single and group != mask:
            return False
    return True


def memory_hints(
    wanted: Mapping[str, int], topology: NumaTopology, free: FreeResources
) -> dict[str, list[TopologyHint]]:
    """The memory manager's hints for every requested memory resource (the same masks for all)."""
    numa_ids = sorted(topology.numa_ids)
    min_affinity = len(numa_ids)
    masks: list[NumaMask] = []
    for mask in iterate_masks(numa_ids):
        ids = mask.ids()
        allocatable = {
            resource: sum(topology.memory.get(resource, {}).get(numa, 0) for numa in ids) for resource in wanted
        }
        if any(allocatable[resource] < size for resource, size in wanted.items()):
            continue
        min_affinity = min(min_affinity, mask.count())
        if not _respects_groups(mask, free.memory_groups):
            continue
        free_total = {resource: sum(free.free_memory(resource).get(numa, 0) for numa in ids) for resource in wanted}
        if any(free_total[resource] < size for resource, size in wanted.items()):
            continue
        masks.append(mask)
    return {resource: [TopologyHint(mask, mask.count() == min_affinity) for mask in masks] for resource in wanted}


def _fill(size: int, mask: NumaMask, free_per_numa: Mapping[int, int]) -> dict[int, int] | None:
    """Take `size` bytes from the mask's NUMA nodes in id order; None when they hold too little."""
    taken: dict[int, int] = {}
    left = size
    for numa in mask.ids():
        if left == 0:
            break
        amount = min(left, free_per_numa.get(numa, 0))
        if amount > 0:
            taken[numa] = amount
            left -= amount
    return taken if left == 0 else None


@attrs.frozen(slots=True)
class MemoryHintProvider:
    """Memory and hugepages per NUMA node (see base.HintProvider)."""

    @property
    def name(self) -> str:
        return "memory"

    @property
    def resources(self) -> frozenset[str]:
        return frozenset({"memory"})

    @staticmethod
    def applies(request: HintRequest, topology: NumaTopology) -> bool:
        return (
            topology.policies.memory_manager_policy == STATIC_POLICY
            and request.qos == QosClass.GUARANTEED
            and bool(topology.memory)
        )

    def hints(self, request: HintRequest, topology: NumaTopology, free: FreeResources) -> ResourceHints | None:
        if not self.applies(request, topology):
            return None
        wanted = requested_memory(request, topology)
        if not wanted:
            return None
        # The kubelet returns no hints when nothing fits and fails later in Allocate; "cannot be
        # satisfied" gives the same verdict with a reason that names the resource.
        hints: ResourceHints = dict(memory_hints(wanted, topology, free).items())
        return hints

    def allocate(
        self, request: HintRequest, best_hint: TopologyHint, topology: NumaTopology, free: FreeResources
    ) -> ProviderAllocation:
        if not self.applies(request, topology):
            return {}
        wanted = requested_memory(request, topology)
        if not wanted:
            return {}
        candidates = memory_hints(wanted, topology, free)
        masks = next(iter(candidates.values()), [])
        affinity = best_hint.affinity
        # The memory manager extends a merged affinity too narrow for the request to the narrowest
        # of its own hints that contains it, preferred hints first.
        ordered = [hint for hint in masks if hint.preferred] + [hint for hint in masks if not hint.preferred]
        chosen: NumaMask | None = None
        if affinity is not None and any(hint.affinity == affinity for hint in masks):
            chosen = affinity
        else:
            for hint in ordered:
                assert hint.affinity is not None
                if affinity is None or affinity.is_subset_of(hint.affinity):
                    chosen = hint.affinity
                    break
        if chosen is None:
            wanted_text = ", ".join(f"{resource} {size}" for resource, size in sorted(wanted.items()))
            raise ProviderError(
                f"memory: no NUMA nodes of node {topology.node_name} can hold {wanted_text} for "
                f"{request.describe()} of pod {request.pod}"
                + (f" within NUMA {affinity.format()}" if affinity is not None else "")
            )
        result: ProviderAllocation = {}
        for resource, size in wanted.items():
            taken = _fill(size, chosen, free.free_memory(resource))
            if taken is None:
                raise ProviderError(
                    f"{resource}: NUMA {chosen.format()} of node {topology.node_name} has less than "
                    f"{size} bytes free for {request.describe()} of pod {request.pod}"
                )
            result[resource] = taken
        return result


def memory_provider_factory(arguments: Mapping[str, Any]) -> MemoryHintProvider:
    """Entry-point factory (group numasched.hint_providers); the memory provider takes no arguments."""
    del arguments
    return MemoryHintProvider()
