"""Which devices of a node to give a request: link-aware, fragmentation-aware set choice.

The kubelet's NUMA hint says where devices may come from; among the devices it allows, this module
picks the concrete set, the way a topology-aware device plugin answers GetPreferredAllocation:

1. the best-connected set: most NVLinks between its members (an NVSwitch fabric reports the same
   count for every pair, so any set is as good as any other there), then the shortest PCIe paths;
2. among equally connected sets, the one that leaves the node's other free devices best connected
   (least NVLink, then PCIe, capacity destroyed), so later large or NVLink-hungry requests still
   find a good set: a 1-GPU request takes the device whose removal costs the least;
3. then the lowest device order, so the choice is deterministic.

Every criterion is a sum over members or member pairs, so the whole order folds into one integer
(each criterion scaled above the total span of the ones below it) and a branch-and-bound search
finds the exact best set on nodes with up to EXACT_SEARCH_LIMIT candidates; beyond that a greedy
pass bounds the time. Partitions (vendor-mandated device sets) confine a set to one partition.

choose_devices is the single entry point of the policy, so it can be swapped as a whole.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import NamedTuple

from numasched.api.topology import DeviceGroup, DeviceInfo, DeviceLink, NumaTopology, PcieDistance

# Exact search up to this many candidate devices; a greedy pass beyond.
EXACT_SEARCH_LIMIT = 16

# PCIe closeness of a pair: PIX (one switch) 5 ... SYS (across sockets) 1, unknown 0.
_PCIE_CLOSENESS_TOP = max(PcieDistance) + 1


class NicAlignment(enum.StrEnum):
    """How strictly a pod's NICs must sit next to its accelerators (plugin argument nic-alignment)."""

    REQUIRED = "required"
    PREFERRED = "preferred"


class PairWeight(NamedTuple):
    nvlinks: int
    pcie_closeness: int


class SetQuality(NamedTuple):
    """Comparable quality of a chosen set on a node; greater is better.

    nvlinks and pcie_closeness sum over the set's member pairs; largest_block_left is the most
    free devices that remain on one NUMA node (one partition where the node has partitions).
    """

    nvlinks: int
    pcie_closeness: int
    largest_block_left: int


def pcie_closeness(distance: PcieDistance | None) -> int:
    return 0 if distance is None else _PCIE_CLOSENESS_TOP - int(distance)


def derived_pcie(first: DeviceInfo, second: DeviceInfo) -> PcieDistance | None:
    """The PCIe path of two devices known only from their switch and NUMA node."""
    if first.pci_switch is not None and first.pci_switch == second.pci_switch:
        return PcieDistance.PIX
    if first.numa is None or second.numa is None:
        return None
    return PcieDistance.NODE if first.numa == second.numa else PcieDistance.SYS


def pair_weight(topology: NumaTopology, first: tuple[str, DeviceInfo], second: tuple[str, DeviceInfo]) -> PairWeight:
    """How well two devices are connected: the reported link, else what their placement implies."""
    link: DeviceLink | None = topology.link((first[0], first[1].id), (second[0], second[1].id))
    if link is None:
        return PairWeight(0, pcie_closeness(derived_pcie(first[1], second[1])))
    pcie = link.pcie if link.pcie is not None else derived_pcie(first[1], second[1])
    return PairWeight(link.nvlinks, pcie_closeness(pcie))


def set_quality(resource: str, ids: Iterable[str], topology: NumaTopology, free: Iterable[str] = ()) -> SetQuality:
    """Score a set for node ordering: link quality of the set, then the largest aligned free block
    that taking it leaves (free: the node's free devices of the resource, before taking ids)."""
    group = topology.devices.get(resource)
    if group is None:
        return SetQuality(0, 0, 0)
    chosen = [device_id for device_id in dict.fromkeys(ids) if device_id in group.by_id]
    nvlinks = closeness = 0
    for index, first in enumerate(chosen):
        for second in chosen[index + 1 :]:
            weight = pair_weight(topology, (resource, group.by_id[first]), (resource, group.by_id[second]))
            nvlinks += weight.nvlinks
            closeness += weight.pcie_closeness
    left = [device_id for device_id in free if device_id in group.by_id and device_id not in set(chosen)]
    return SetQuality(nvlinks, closeness, largest_aligned_block(group, left))


def largest_aligned_block(group: DeviceGroup, ids: Iterable[str]) -> int:
    """The most of ids that share one NUMA node, or one partition where the group has partitions."""
    members = [device_id for device_id in ids if device_id in group.by_id]
    if group.partitions:
        return max((sum(1 for device_id in members if device_id in part) for part in group.partitions), default=0)
    per_numa: dict[int | None, int] = {}
    for device_id in members:
        numa = group.by_id[device_id].numa
        per_numa[numa] = per_numa.get(numa, 0) + 1
    return max(per_numa.values(), default=0)


def choose_devices(
    resource: str,
    count: int,
    candidates: Sequence[str],
    topology: NumaTopology,
    *,
    free: Iterable[str] = (),
    must_include: Iterable[str] = (),
    prefer: Mapping[str, int] | None = None,
    exact_limit: int = EXACT_SEARCH_LIMIT,
) -> tuple[str, ...]:
    """The best `count` devices of `resource` drawn from must_include plus candidates.

    free: every free device of the resource on the node (candidates are usually the subset the
    NUMA hint allows); the choice keeps free devices outside the set well connected.
    prefer: a bonus per device, weighed after link quality and before the effect on the rest
    (the NIC-aware GPU choice uses it). Returns the ids in the node's device order, or () when
    no allowed set exists (too few candidates, or no partition holds the set).
    """
    group = topology.devices.get(resource)
    if group is None or count <= 0:
        return ()
    order = {device.id: index for index, device in enumerate(group.devices)}
    required = sorted({device_id for device_id in must_include if device_id in order}, key=order.__getitem__)
    pool = sorted({device_id for device_id in candidates if device_id in order} - set(required), key=order.__getitem__)
    if len(required) > count or len(required) + len(pool) < count:
        return ()
    others = {device_id for device_id in free if device_id in order}
    universe = sorted(others | set(pool) | set(required), key=order.__getitem__)
    scorer = _SetScorer(topology, group, universe, prefer or {})
    if not group.partitions:
        return scorer.best(required, pool, count, exact_limit)
    best: tuple[int, tuple[int, ...], tuple[str, ...]] | None = None
    for partition in group.partitions:
        if not set(required) <= partition:
            continue
        inside = [device_id for device_id in pool if device_id in partition]
        chosen = scorer.best(required, inside, count, exact_limit)
        if not chosen:
            continue
        rank = (scorer.score(chosen), tuple(-order[device_id] for device_id in chosen), chosen)
        if best is None or rank > best:
            best = rank
    return best[2] if best is not None else ()


class _SetScorer:
    """Pair weights and per-device terms folded into one integer per set (greater is better)."""

    def __init__(
        self, topology: NumaTopology, group: DeviceGroup, universe: Sequence[str], prefer: Mapping[str, int]
    ) -> None:
        self.index = {device_id: position for position, device_id in enumerate(universe)}
        self.ids = list(universe)
        size = len(universe)
        devices = [(group.resource, group.by_id[device_id]) for device_id in universe]
        weights = [[PairWeight(0, 0)] * size for _ in range(size)]
        for first in range(size):
            for second in range(first + 1, size):
                weight = pair_weight(topology, devices[first], devices[second])
                weights[first][second] = weights[second][first] = weight
        degree_nv = [sum(weight.nvlinks for weight in row) for row in weights]
        degree_pc = [sum(weight.pcie_closeness for weight in row) for row in weights]
        bonus = [max(0, prefer.get(device_id, 0)) for device_id in universe]
        # Lexicographic order (set nvlinks, set PCIe, bonus, -NVLink and -PCIe capacity taken from
        # the free devices) as one integer: each scale exceeds the whole span of the terms below.
        pairs = size * (size - 1) // 2
        span_pc_degree = sum(degree_pc) + 1
        span_nv_degree = sum(degree_nv) + 1
        scale_nv_degree = span_pc_degree
        scale_bonus = scale_nv_degree * span_nv_degree
        scale_pc = scale_bonus * (sum(bonus) + 1)
        max_pc = max((weight.pcie_closeness for row in weights for weight in row), default=0)
        scale_nv = scale_pc * (pairs * max_pc + 1)
        self.pair = [
            [weight.nvlinks * scale_nv + weight.pcie_closeness * scale_pc for weight in row] for row in weights
        ]
        self.unit = [
            bonus[position] * scale_bonus - degree_nv[position] * scale_nv_degree - degree_pc[position]
            for position in range(size)
        ]

    def score(self, ids: Sequence[str]) -> int:
        positions = [self.index[device_id] for device_id in ids]
        total = sum(self.unit[position] for position in positions)
        for offset, first in enumerate(positions):
            total += sum(self.pair[first][second] for second in positions[offset + 1 :])
        return total

    def best(self, required: Sequence[str], pool: Sequence[str], count: int, exact_limit: int) -> tuple[str, ...]:
        if len(required) + len(pool) < count:
            return ()
        chosen = [self.index[device_id] for device_id in required]
        options = [self.index[device_id] for device_id in pool]
        if len(options) + len(chosen) > exact_limit:
            picked = self._greedy(chosen, options, count - len(chosen))
        else:
            picked = self._exact(chosen, options, count - len(chosen))
        return tuple(self.ids[position] for position in sorted(chosen + picked))

    def _greedy(self, chosen: list[int], options: list[int], wanted: int) -> list[int]:
        gain = {option: self.unit[option] + sum(self.pair[option][member] for member in chosen) for option in options}
        picked: list[int] = []
        for _ in range(wanted):
            best = max(gain, key=lambda option: (gain[option], -option))
            picked.append(best)
            del gain[best]
            for option in gain:
                gain[option] += self.pair[option][best]
        return picked

    def _exact(self, chosen: list[int], options: list[int], wanted: int) -> list[int]:
        if wanted == 0:
            return []
        # top[o][m]: the m largest pair weights from option o to other options, summed; half of it
        # bounds what o can add through pairs with later picks.
        top: dict[int, list[int]] = {}
        for option in options:
            weights = sorted((self.pair[option][other] for other in options if other != option), reverse=True)
            sums = [0]
            for weight in weights:
                sums.append(sums[-1] + weight)
            top[option] = sums
        base = sum(self.unit[member] for member in chosen)
        for offset, first in enumerate(chosen):
            base += sum(self.pair[first][second] for second in chosen[offset + 1 :])
        connection = {option: sum(self.pair[option][member] for member in chosen) for option in options}
        best_score: list[int | None] = [None]
        best_pick: list[int] = []
        picked: list[int] = []

        def search(start: int, score: int) -> None:
            remaining = wanted - len(picked)
            if remaining == 0:
                if best_score[0] is None or score > best_score[0]:
                    best_score[0] = score
                    best_pick[:] = picked
                return
            rest = options[start:]
            if len(rest) < remaining:
                return
            if best_score[0] is not None:
                # Doubled to keep the half pair weights integral.
                potentials = sorted(
                    (2 * (self.unit[o] + connection[o]) + top[o][remaining - 1] for o in rest), reverse=True
                )
                if 2 * score + sum(potentials[:remaining]) <= 2 * best_score[0]:
                    return
            for position in range(start, len(options) - remaining + 1):
                option = options[position]
                gained = self.unit[option] + connection[option]
                picked.append(option)
                for other in options[position + 1 :]:
                    connection[other] += self.pair[other][option]
                search(position + 1, score + gained)
                for other in options[position + 1 :]:
                    connection[other] -= self.pair[other][option]
                picked.pop()

        search(0, base)
        return best_pick


# --- NICs next to accelerators ------------------------------------------------------------------


def nic_tier(
    topology: NumaTopology,
    nic: tuple[str, DeviceInfo],
    accelerators: Iterable[tuple[str, DeviceInfo]],
) -> int:
    """0: shares a PCIe switch with one of the accelerators; 1: shares its NUMA node; 2: neither."""
    tier = 2
    for accelerator in accelerators:
        link = topology.link((nic[0], nic[1].id), (accelerator[0], accelerator[1].id))
        same_switch = nic[1].pci_switch is not None and nic[1].pci_switch == accelerator[1].pci_switch
        if same_switch or (link is not None and link.pcie is PcieDistance.PIX):
            return 0
        if nic[1].numa is not None and nic[1].numa == accelerator[1].numa:
            tier = 1
    return tier


def node_has_switch_pairs(topology: NumaTopology, nic_resource: str, accelerator_resources: Collection[str]) -> bool:
    """Whether any NIC of the node shares a PCIe switch with any of its accelerators."""
    group = topology.devices.get(nic_resource)
    if group is None:
        return False
    accelerators = [
        (resource, device)
        for resource in accelerator_resources
        if resource in topology.devices
        for device in topology.devices[resource].devices
    ]
    return any(nic_tier(topology, (nic_resource, nic), accelerators) == 0 for nic in group.devices)


def choose_nics(
    resource: str,
    count: int,
    candidates: Sequence[str],
    topology: NumaTopology,
    accelerators: Mapping[str, Sequence[str]],
    alignment: NicAlignment,
) -> tuple[str, ...]:
    """NICs for a pod whose accelerators are already chosen.

    Nearest first: on a PCIe switch of one of the accelerators (spread over the accelerators'
    switches), then on their NUMA nodes, then any. With REQUIRED alignment every NIC must share a
    switch with an accelerator when the node has such pairs at all, else share a NUMA node with
    one; () when that cannot be met.
    """
    group = topology.devices.get(resource)
    if group is None or count <= 0:
        return ()
    chosen_accelerators = [
        (accelerator_resource, topology.devices[accelerator_resource].by_id[device_id])
        for accelerator_resource, ids in accelerators.items()
        if accelerator_resource in topology.devices
        for device_id in ids
        if device_id in topology.devices[accelerator_resource].by_id
    ]
    if not chosen_accelerators:
        return choose_devices(resource, count, candidates, topology)
    order = {device.id: index for index, device in enumerate(group.devices)}
    pool = sorted({device_id for device_id in candidates if device_id in order}, key=order.__getitem__)
    tiers = {
        device_id: nic_tier(topology, (resource, group.by_id[device_id]), chosen_accelerators) for device_id in pool
    }
    if alignment is NicAlignment.REQUIRED:
        worst = 0 if node_has_switch_pairs(topology, resource, list(accelerators)) else 1
        pool = [device_id for device_id in pool if tiers[device_id] <= worst]
    if len(pool) < count:
        return ()
    # Spread NICs over the accelerators' switches: one per switch before a second on any.
    switch_use: dict[str | None, int] = {}
    picked: list[str] = []
    remaining = list(pool)
    for _ in range(count):
        best = min(
            remaining,
            key=lambda device_id: (
                tiers[device_id],
                switch_use.get(group.by_id[device_id].pci_switch, 0),
                order[device_id],
            ),
        )
        remaining.remove(best)
        picked.append(best)
        switch = group.by_id[best].pci_switch
        switch_use[switch] = switch_use.get(switch, 0) + 1
    return tuple(sorted(picked, key=order.__getitem__))


def nic_preference(
    topology: NumaTopology,
    accelerator_resource: str,
    nic_resources: Iterable[str],
    free_nics: Mapping[str, Sequence[str]],
) -> dict[str, int]:
    """A bonus of 1 for each accelerator that has a free NIC on its PCIe switch, for choose_devices."""
    group = topology.devices.get(accelerator_resource)
    if group is None:
        return {}
    nics = [
        (nic_resource, topology.devices[nic_resource].by_id[device_id])
        for nic_resource in nic_resources
        if nic_resource in topology.devices
        for device_id in free_nics.get(nic_resource, ())
        if device_id in topology.devices[nic_resource].by_id
    ]
    bonus: dict[str, int] = {}
    for device in group.devices:
        if any(nic_tier(topology, nic, [(accelerator_resource, device)]) == 0 for nic in nics):
            bonus[device.id] = 1
    return bonus
