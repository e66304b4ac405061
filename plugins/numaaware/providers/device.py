"""The device hint provider: the kubelet device manager's hints and allocation, per resource name.

One provider serves any number of device resources (nvidia.com/gpu, amd.com/gpu,
huawei.com/Ascend910, rdma/hca, ...). For each it reproduces the kubelet device manager:

hints (generateDeviceTopologyHints): for every NUMA mask, by size then lexicographic, a hint when
the mask holds at least `request` free devices; preferred when the mask has as few NUMA nodes as
the narrowest mask the node's devices (all of them, free or not, healthy or not) could satisfy.
A device reporting no NUMA node counts in no mask. A resource none of whose devices reports a NUMA
node has no preference (None); a request larger than the free devices cannot be met ([]). Devices
take part regardless of the pod's QoS class.

allocation (devicesToAllocate with filterByAffinity): devices on the hint's NUMA nodes first;
when they suffice the choice among them is the link-aware set choice (what the kubelet asks a
device plugin's GetPreferredAllocation for); otherwise all of them, then the best of the devices
on other NUMA nodes, then devices without a NUMA node.

Where the node reports partitions (vendor-mandated device sets) a set must lie in one partition,
so a mask only yields a hint when one partition has enough devices in it; without partitions the
hints are exactly the kubelet's.

NICs listed in nic_resources are chosen after the pod's accelerators, next to them (same PCIe
switch, else same NUMA node), strictly or not as nic_alignment says.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np
import structlog

from numasched.api.hint import ResourceHints, TopologyHint
from numasched.api.numamask import NumaMask, iterate_masks
from numasched.api.topology import DeviceGroup, NumaTopology
from numasched.plugins.numaaware.providers.base import (
    NUMA_AWARE_PLUGIN,
    FreeResources,
    HintRequest,
    ProviderAllocation,
    ProviderError,
)
from numasched.plugins.numaaware.providers.device_sets import (
    DeviceChoices,
    NicAlignment,
    choose_devices,
    choose_nics,
    nic_preference,
)
from numasched.plugins.numaaware.providers.mask_table import MaskTable
from numasched.plugins.numaaware.providers.topology_memo import ContentMemo, TopologyMemo
from numasched.scheduler.framework.arguments import PluginArgumentError, quote_value

log = structlog.get_logger(__name__)

DEVICE_PROVIDER_NAME = "device"
DEFAULT_ACCELERATOR_RESOURCES = (
    "nvidia.com/gpu",
    "amd.com/gpu",
    "huawei.com/Ascend910",
    "huawei.com/Ascend310",
    "habana.ai/gaudi",
    "intel.com/gpu",
)
DEFAULT_NIC_RESOURCES = ("rdma/hca",)

# Resource names HintRequest.amount reads from outside the request's scalars.
_NOT_SCALARS = frozenset({"cpu", "memory"})

# Plugin arguments read by device_provider_factory.
ARG_DEVICE_RESOURCES = "device-resources"
ARG_NIC_RESOURCES = "nic-resources"
ARG_NIC_ALIGNMENT = "nic-alignment"


def requested_devices(request: HintRequest, resource: str) -> int:
    """Whole devices asked for; a fractional quantity rounds up as the kubelet's Value() does."""
    amount = request.amount(resource)
    return max(0, math.ceil(amount - 1e-9))


def _numa_ids(group: DeviceGroup, ids: Iterable[str]) -> list[int | None]:
    return [group.by_id[device_id].numa for device_id in ids if device_id in group.by_id]


@attrs.frozen(slots=True)
class DeviceGroupIndex:
    """What device_hint_table derives from one device group and the node's NUMA ids alone."""

    has_numa: bool
    # A set lies in one partition where the node has partitions; else the whole group is one.
    blocks: tuple[frozenset[str], ...]
    # Every NUMA mask (iterate_masks order), its ids, and the most devices one block has in it.
    masks: tuple[tuple[NumaMask, tuple[int, ...], int], ...]
    # device_hint_table's answers by the free devices per block and NUMA node, the request and the
    # unknown holdings; shared by every index of equal masks, so nodes of one shape at equal
    # counts compute them once whichever devices are free.
    hints_by_counts: dict[Hashable, tuple[TopologyHint, ...]] = attrs.field(factory=dict, eq=False, repr=False)
    # The masks as arrays (the most devices one block has in a mask as the totals).
    mask_table: MaskTable = attrs.field(kw_only=True, eq=False, repr=False)
    # device_hint_table's answers by the free device ids themselves, the request and the unknown
    # holdings, for this group alone: nodes of one shape free the same ids again and again, and
    # such an answer needs no count.
    hints_by_free: dict[Hashable, tuple[TopologyHint, ...]] = attrs.field(
        factory=dict, kw_only=True, eq=False, repr=False
    )

    @classmethod
    def of(
        cls,
        group: DeviceGroup,
        numa_ids: Sequence[int],
        shared_hints: dict[Hashable, dict[Hashable, tuple[TopologyHint, ...]]] | None = None,
    ) -> DeviceGroupIndex:
        blocks: tuple[frozenset[str], ...] = tuple(group.partitions) or (frozenset(group.by_id),)
        total_numa = [
            _numa_ids(group, [device.id for device in group.devices if device.id in block]) for block in blocks
        ]
        masks = tuple(
            (mask, tuple(mask.ids()), max(_count_in(mask, numas) for numas in total_numa))
            for mask in iterate_masks(numa_ids)
        )
        shape = (len(numa_ids), tuple((mask.bits, total) for mask, _, total in masks))
        hints_by_counts = {} if shared_hints is None else shared_hints.setdefault(shape, {})
        return cls(
            any(device.numa is not None for device in group.devices),
            blocks,
            masks,
            hints_by_counts,
            mask_table=MaskTable(masks, numa_ids),
        )


def device_group_indexes(
    topology: NumaTopology, shared_hints: dict[Hashable, dict[Hashable, tuple[TopologyHint, ...]]] | None = None
) -> dict[str, DeviceGroupIndex]:
    return {
        resource: DeviceGroupIndex.of(group, topology.numa_ids, shared_hints)
        for resource, group in topology.devices.items()
    }


def _shared_index_memo() -> TopologyMemo[dict[str, DeviceGroupIndex]]:
    """Per topology its device indexes, whose hints are shared by mask shape.

    An index depends on its device group and the node's NUMA ids alone, so topologies of one
    machine shape (and a node's successive topology objects) share each group's index; the dict
    per topology is its own."""
    shared_hints: dict[Hashable, dict[Hashable, tuple[TopologyHint, ...]]] = {}
    shared_indexes: ContentMemo[DeviceGroupIndex] = ContentMemo()

    def index_of(group: DeviceGroup, numa_ids: tuple[int, ...]) -> DeviceGroupIndex:
        return shared_indexes.get((group, numa_ids), lambda: DeviceGroupIndex.of(group, numa_ids, shared_hints))

    def indexes_of(topology: NumaTopology) -> dict[str, DeviceGroupIndex]:
        return {resource: index_of(group, topology.numa_ids) for resource, group in topology.devices.items()}

    return TopologyMemo(indexes_of)


def _choices_per_topology() -> TopologyMemo[dict[str, DeviceChoices]]:
    """Per topology, its resources' DeviceChoices, each found on first use (DeviceProvider._choices)."""
    return TopologyMemo(lambda topology: {})


# Distinct (counts, request) answers kept per mask shape before they are dropped and computed anew.
_MAX_HINTS_BY_COUNTS = 4096


def device_hint_table(
    group: DeviceGroup,
    numa_ids: Sequence[int],
    free: Sequence[str],
    request: int,
    *,
    index: DeviceGroupIndex | None = None,
    unknown: int = 0,
) -> tuple[TopologyHint, ...] | None:
    """The kubelet device manager's hints for `request` devices of one resource.

    None: no device has NUMA information (no preference); []: not satisfiable on this node.
    `index`: DeviceGroupIndex.of(group, numa_ids) when the caller keeps one.
    `unknown`: devices held by pods whose ids nobody reports; they may be any of `free`, so a mask
    yields a hint only when its free devices minus `unknown` still cover the request (the worst
    case). Whether a hint is preferred still depends on the node's devices alone.
    """
    if request <= 0:
        return None
    if index is None:
        index = DeviceGroupIndex.of(group, numa_ids)
    if not index.has_numa:
        return None
    free_key = (free if type(free) is tuple else tuple(free), request, unknown)
    known = index.hints_by_free.get(free_key)
    if known is None:
        if len(index.hints_by_free) >= _MAX_HINTS_BY_COUNTS:
            index.hints_by_free.clear()
        known = index.hints_by_free[free_key] = _hints_of_free(group, free, request, index, unknown)
    return known


def _hints_of_free(
    group: DeviceGroup, free: Sequence[str], request: int, index: DeviceGroupIndex, unknown: int
) -> tuple[TopologyHint, ...]:
    """device_hint_table for a group with NUMA information, from the free devices per block and
    NUMA node (answers kept by those counts in index.hints_by_counts)."""
    free_ids = [device_id for device_id in dict.fromkeys(free) if device_id in group.by_id]
    needed = request + max(0, unknown)
    if len(free_ids) < needed:
        return ()
    free_per_block: list[dict[int, int]] = []
    for block in index.blocks:
        per_numa: dict[int, int] = {}
        for device_id in free_ids:
            numa = group.by_id[device_id].numa
            if numa is not None and device_id in block:
                per_numa[numa] = per_numa.get(numa, 0) + 1
        free_per_block.append(per_numa)
    counts = (tuple(tuple(sorted(per_numa.items())) for per_numa in free_per_block), request, needed)
    known = index.hints_by_counts.get(counts)
    if known is None:
        if len(index.hints_by_counts) >= _MAX_HINTS_BY_COUNTS:
            index.hints_by_counts.clear()
        known = index.hints_by_counts[counts] = _hints_for_counts(index, free_per_block, request, needed)
    return known


def _hints_for_counts(
    index: DeviceGroupIndex, free_per_block: Sequence[Mapping[int, int]], request: int, needed: int
) -> tuple[TopologyHint, ...]:
    """device_hint_table from the free devices per block and NUMA node: every mask where one block
    has the devices needed, preferred when no narrower mask could hold the request (MaskTable)."""
    table = index.mask_table
    widest = len(index.masks[-1][1]) if index.masks else 0
    free = np.array(
        [[per_numa.get(numa, 0) for numa in table.numa_ids] for per_numa in free_per_block], dtype=np.int64
    ).reshape(len(free_per_block), len(table.numa_ids))
    # Per block and mask, its free devices there; a mask fits when one block has enough.
    fits = (free @ table.members.T).max(axis=0, initial=0) >= needed
    return table.hints(fits, table.narrowest(request, widest), index.hints_by_counts)


def _count_in(mask: NumaMask, numas: Iterable[int | None]) -> int:
    return sum(1 for numa in numas if numa is not None and mask.is_set(numa))


def split_by_affinity(
    group: DeviceGroup, free: Sequence[str], affinity: NumaMask | None
) -> tuple[list[str], list[str], list[str]]:
    """Free devices on the mask's NUMA nodes, on other NUMA nodes, and without a NUMA node
    (the kubelet's filterByAffinity); with no affinity every device is "without"."""
    aligned: list[str] = []
    unaligned: list[str] = []
    without: list[str] = []
    for device_id in free:
        device = group.by_id.get(device_id)
        if device is None:
            continue
        if affinity is None or device.numa is None:
            without.append(device_id)
        elif affinity.is_set(device.numa):
            aligned.append(device_id)
        else:
            unaligned.append(device_id)
    return aligned, unaligned, without


def allocate_devices(
    resource: str,
    request: int,
    affinity: NumaMask | None,
    topology: NumaTopology,
    free: Sequence[str],
    *,
    prefer: Mapping[str, int] | None = None,
    memo: DeviceChoices | None = None,
) -> tuple[str, ...]:
    """The device ids for `request` devices of one resource inside (first) the hint's affinity.

    `memo`: the resource's DeviceChoices on this node, when the caller keeps one.
    Raises ProviderError naming the resource and the shortfall."""
    group = topology.devices.get(resource)
    if group is None:
        raise ProviderError(f"{resource}: node {topology.node_name} reports no such devices")
    free_ids = [device_id for device_id in dict.fromkeys(free) if device_id in group.by_id]
    if len(free_ids) < request:
        raise ProviderError(f"{resource}: {request} requested, {len(free_ids)} free on node {topology.node_name}")
    aligned, unaligned, without = split_by_affinity(group, free_ids, affinity)
    if len(aligned) >= request:
        chosen = choose_devices(resource, request, aligned, topology, free=free_ids, prefer=prefer, memo=memo)
    else:
        # Every aligned device first (the alignment the topology manager promised), then the
        # nearest of the rest: devices on other NUMA nodes before devices without one.
        chosen = ()
        if len(aligned) + len(unaligned) >= request:
            chosen = choose_devices(
                resource, request, unaligned, topology, free=free_ids, must_include=aligned, prefer=prefer, memo=memo
            )
        if not chosen:
            chosen = choose_devices(
                resource,
                request,
                unaligned + without,
                topology,
                free=free_ids,
                must_include=aligned,
                prefer=prefer,
                memo=memo,
            )
    if not chosen:
        partitions = f" within one of its {len(group.partitions)} partitions" if group.partitions else ""
        raise ProviderError(
            f"{resource}: no set of {request} free devices{partitions} on node {topology.node_name}"
            f" (free: {', '.join(free_ids) or 'none'})"
        )
    return chosen


def _check_unknown(resource: str, request: int, free: FreeResources, topology: NumaTopology) -> None:
    """Whatever the hint (none at all under the none policy), the node must have `request` devices
    free however the holdings of pods with unknown ids lie; else the kubelet may find too few."""
    unknown = free.unknown_count(resource)
    if unknown <= 0:
        return
    group = topology.devices.get(resource)
    free_ids = [device for device in dict.fromkeys(free.free_devices(resource)) if group and device in group.by_id]
    if len(free_ids) - unknown < request:
        raise ProviderError(
            f"{resource}: {request} requested, {len(free_ids)} look free on node {topology.node_name} but "
            f"{unknown} are held by pods whose ids are unknown ({', '.join(free.unknown_pods.get(resource, ()))})"
        )


@attrs.frozen(slots=True)
class DeviceProvider:
    """Hints and device choice for the configured device resources (see the module doc)."""

    accelerator_resources: frozenset[str] = frozenset(DEFAULT_ACCELERATOR_RESOURCES)
    nic_resources: frozenset[str] = frozenset(DEFAULT_NIC_RESOURCES)
    nic_alignment: NicAlignment = NicAlignment.PREFERRED
    provider_name: str = DEVICE_PROVIDER_NAME
    # DeviceGroupIndex per resource, per node topology, for as long as this provider lives.
    indexes: TopologyMemo[dict[str, DeviceGroupIndex]] = attrs.field(
        factory=_shared_index_memo, init=False, eq=False, repr=False
    )
    # DeviceChoices per resource, per node topology (_choices), shared by content: topologies of one
    # machine shape (and a node's successive topology objects) share them.
    choices: TopologyMemo[dict[str, DeviceChoices]] = attrs.field(
        factory=_choices_per_topology, init=False, eq=False, repr=False
    )
    shared_choices: ContentMemo[DeviceChoices] = attrs.field(factory=ContentMemo, init=False, eq=False, repr=False)
    # The resources in name order, the order they are allocated in.
    ordered_resources: tuple[str, ...] = attrs.field(init=False, eq=False, repr=False)

    @ordered_resources.default
    def _ordered_resources(self) -> tuple[str, ...]:
        return tuple(sorted(self.accelerator_resources | self.nic_resources))

    def _requested(self, request: HintRequest) -> dict[str, int]:
        """Devices asked for per resource (those asked for at all), in name order. A resource the
        request does not name asks for none (HintRequest.amount), so only named ones are read."""
        scalars = request.requests.scalars
        return {
            resource: count
            for resource in self.ordered_resources
            if (resource in scalars or resource in _NOT_SCALARS) and (count := requested_devices(request, resource)) > 0
        }

    def _choices(self, topology: NumaTopology, resource: str) -> DeviceChoices | None:
        """The resource's DeviceChoices on this topology; only a resource allocated on the node
        pays for reading its content (its device group and links)."""
        found = self.choices.get(topology)
        memo = found.get(resource)
        if memo is None:
            group = topology.devices.get(resource)
            if group is None:
                return None
            memo = found[resource] = self.shared_choices.get(DeviceChoices.key(topology, group), DeviceChoices)
        return memo

    @property
    def name(self) -> str:
        return self.provider_name

    @property
    def resources(self) -> frozenset[str]:
        return self.accelerator_resources | self.nic_resources

    def hints(self, request: HintRequest, topology: NumaTopology, free: FreeResources) -> ResourceHints | None:
        result: ResourceHints = {}
        for resource, count in self._requested(request).items():
            group = topology.devices.get(resource)
            if group is None:
                # Not a device this node reports: the kubelet would have no topology for it.
                result[resource] = None
                continue
            index = self.indexes.get(topology)[resource]
            result[resource] = device_hint_table(
                group,
                topology.numa_ids,
                free.free_devices(resource),
                count,
                index=index,
                unknown=free.unknown_count(resource),
            )
        return result or None

    def allocate(
        self, request: HintRequest, best_hint: TopologyHint, topology: NumaTopology, free: FreeResources
    ) -> ProviderAllocation:
        requested = self._requested(request)
        wanted = {resource: count for resource, count in requested.items() if resource in topology.devices}
        accelerators = [resource for resource in wanted if resource not in self.nic_resources]
        nics = [resource for resource in wanted if resource in self.nic_resources]
        free_nics = {resource: free.free_devices(resource) for resource in nics}
        result: ProviderAllocation = {}
        chosen_accelerators: dict[str, tuple[str, ...]] = {}
        for resource in accelerators:
            prefer = nic_preference(topology, resource, nics, free_nics) if nics else None
            _check_unknown(resource, wanted[resource], free, topology)
            chosen = allocate_devices(
                resource,
                wanted[resource],
                best_hint.affinity,
                topology,
                free.free_devices(resource),
                prefer=prefer,
                memo=self._choices(topology, resource),
            )
            chosen_accelerators[resource] = chosen
            result[resource] = chosen
        for resource in nics:
            _check_unknown(resource, wanted[resource], free, topology)
            result[resource] = self._allocate_nics(
                request, resource, wanted[resource], best_hint, topology, free_nics[resource], chosen_accelerators
            )
        return result

    def _allocate_nics(
        self,
        request: HintRequest,
        resource: str,
        count: int,
        best_hint: TopologyHint,
        topology: NumaTopology,
        free: Sequence[str],
        accelerators: Mapping[str, Sequence[str]],
    ) -> tuple[str, ...]:
        if not any(accelerators.values()):
            return allocate_devices(resource, count, best_hint.affinity, topology, free)
        group = topology.devices[resource]
        aligned, unaligned, without = split_by_affinity(group, free, best_hint.affinity)
        chosen: tuple[str, ...] = ()
        if len(aligned) >= count:
            chosen = choose_nics(resource, count, aligned, topology, accelerators, self.nic_alignment)
        if not chosen:
            chosen = choose_nics(
                resource, count, aligned + unaligned + without, topology, accelerators, self.nic_alignment
            )
        if not chosen:
            level = "PCIe switch or NUMA node" if self.nic_alignment is NicAlignment.REQUIRED else "node"
            raise ProviderError(
                f"{resource}: {count} NIC(s) for {request.describe()} cannot be placed on the same {level} as its "
                f"devices on node {topology.node_name} (free: {', '.join(free) or 'none'})"
            )
        return chosen


def _names(raw: Any, default: Collection[str], argument: str) -> frozenset[str]:
    """Resource names from a list or comma-separated text; anything else is a configuration error
    (a silent default would turn alignment of the intended resources off)."""
    if raw is None:
        return frozenset(default)
    if isinstance(raw, str):
        names = [part.strip() for part in raw.split(",") if part.strip()]
    elif isinstance(raw, list | tuple) and all(isinstance(part, str) for part in raw):
        names = [part.strip() for part in raw if part.strip()]
    else:
        raise PluginArgumentError(
            NUMA_AWARE_PLUGIN,
            argument,
            f"expected a list of resource names or comma-separated text, got {quote_value(raw)}",
        )
    return frozenset(names)


def device_provider_factory(arguments: Mapping[str, Any]) -> DeviceProvider:
    """Build the provider from the numa-aware plugin's arguments.

    device-resources: accelerator resource names (list or comma-separated text);
    nic-resources: NIC resource names; nic-alignment: required | preferred (default preferred).
    """
    accelerators = _names(arguments.get(ARG_DEVICE_RESOURCES), DEFAULT_ACCELERATOR_RESOURCES, ARG_DEVICE_RESOURCES)
    nics = _names(arguments.get(ARG_NIC_RESOURCES), DEFAULT_NIC_RESOURCES, ARG_NIC_RESOURCES)
    raw_alignment = arguments.get(ARG_NIC_ALIGNMENT, NicAlignment.PREFERRED.value)
    try:
        if not isinstance(raw_alignment, str):
            raise ValueError(raw_alignment)
        alignment = NicAlignment(raw_alignment.strip().lower())
    except ValueError:
        choices = ", ".join(choice.value for choice in NicAlignment)
        raise PluginArgumentError(
            NUMA_AWARE_PLUGIN, ARG_NIC_ALIGNMENT, f"expected one of {choices}, got {quote_value(raw_alignment)}"
        ) from None
    return DeviceProvider(accelerator_resources=accelerators - nics, nic_resources=nics, nic_alignment=alignment)
