"""Which devices of a node to give a request: link-aware, fragmentation-aware set choice.

The kubelet's NUMA hint says where devices may come from; among the devices it allows, this module
picks the concrete set, the way a topology-aware device plugin answers GetPreferredAllocation.
Sets are ranked by, in order:

1. the links between the members, summed over member pairs: NVLinks first (an NVSwitch fabric
   reports the same count for every pair, so there any set is as good as any other), then the
   PCIe path of the pairs without NVLink (NVLinked pairs do not talk over PCIe);
2. a bonus per member the caller may give (the NIC-aware GPU choice: GPUs with a free NIC on
   their PCIe switch);
3. what is left for the next requests: how many disjoint best-linked pairs (NV2 on a DGX-1 cube
   mesh, one PCIe switch on a PCIe-only machine) on one NUMA node the other free devices still
   hold, the placements a later 2-device request would want;
4. the PCIe closeness of all member pairs (on an NVSwitch fabric: same switch, same NUMA node);
5. the least NVLink, then PCIe, capacity taken away from the other free devices: a 1-GPU request
   takes the device whose removal costs the least;
6. the lowest device order, so the choice is deterministic.

Terms 1 and 2 are sums over members and member pairs: a branch-and-bound search over them finds
every best set exactly on nodes with up to EXACT_SEARCH_LIMIT candidates (greedy beyond), and
terms 3-6 rank those (up to TIE_LIMIT of them). Partitions (vendor-mandated device sets) confine
a set to one partition.

choose_devices is the single entry point of the policy, so it can be swapped as a whole.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Hashable, Iterable, Mapping, Sequence
from typing import NamedTuple

from numasched.api.topology import DeviceGroup, DeviceInfo, DeviceLink, NumaTopology, PcieDistance, derived_pcie

# Exact search up to this many candidate devices; a greedy pass beyond.
EXACT_SEARCH_LIMIT = 16
# Most sets equally good on links that the later terms rank; beyond, the first found (lowest ids).
TIE_LIMIT = 2048

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
    memo: DeviceChoices | None = None,
) -> tuple[str, ...]:
    """The best `count` devices of `resource` drawn from must_include plus candidates.

    free: every free device of the resource on the node (candidates are usually the subset the
    NUMA hint allows); the choice keeps free devices outside the set well connected.
    prefer: a bonus per device, weighed after NVLinks and before the effect on the rest.
    memo: answers kept by the caller for this device group and the links among its devices
    (DeviceChoices); the choice reads nothing else of the node.
    Returns the ids in the node's device order, or () when no allowed set exists (too few
    candidates, or no partition holds the set).
    """
    group = topology.devices.get(resource)
    if group is None or count <= 0:
        return ()
    if memo is None:
        return _normalized_choice(resource, count, candidates, topology, group, free, must_include, prefer, exact_limit)
    # The answer is a function of the arguments (and of what the memo stands for), so they are the
    # key as given: no normalising before a remembered answer is found.
    candidates, free, must_include = tuple(candidates), tuple(free), tuple(must_include)
    key = (
        resource,
        count,
        candidates,
        free,
        must_include,
        tuple(sorted(prefer.items())) if prefer else (),
        exact_limit,
    )
    chosen = memo.answers.get(key)
    if chosen is None:
        chosen = _normalized_choice(
            resource, count, candidates, topology, group, free, must_include, prefer, exact_limit
        )
        if len(memo.answers) >= MAX_CHOICES:
            memo.answers.clear()
        memo.answers[key] = chosen
    return chosen


def _normalized_choice(
    resource: str,
    count: int,
    candidates: Sequence[str],
    topology: NumaTopology,
    group: DeviceGroup,
    free: Iterable[str],
    must_include: Iterable[str],
    prefer: Mapping[str, int] | None,
    exact_limit: int,
) -> tuple[str, ...]:
    """choose_devices once the group is known: the ids in the group's order, deduplicated."""
    order = {device.id: index for index, device in enumerate(group.devices)}
    required = sorted({device_id for device_id in must_include if device_id in order}, key=order.__getitem__)
    pool = sorted({device_id for device_id in candidates if device_id in order} - set(required), key=order.__getitem__)
    if len(required) > count or len(required) + len(pool) < count:
        return ()
    others = {device_id for device_id in free if device_id in order}
    universe = sorted(others | set(pool) | set(required), key=order.__getitem__)
    return _choose(topology, group, count, required, pool, universe, prefer or {}, exact_limit)


# Distinct device choices kept per DeviceChoices before they are dropped and computed anew.
MAX_CHOICES = 4096


class DeviceChoices:
    """choose_devices' answers for one device group and the links among its devices.

    What a choice reads of the node is the group (devices, partitions) and those links, so nodes
    of one machine shape with the same devices free get the same devices; a table is shared by
    that content (DeviceChoices.key)."""

    __slots__ = ("__weakref__", "answers")

    def __init__(self) -> None:
        self.answers: dict[Hashable, tuple[str, ...]] = {}

    @staticmethod
    def key(topology: NumaTopology, group: DeviceGroup) -> Hashable:
        """The content a choice among the group's devices reads: the group and its own links."""
        resource = group.resource
        # The links as plain tuples, compared without a Python call per link.
        links = sorted(
            (pair, link.nvlinks, link.nvswitch, link.pcie)
            for pair, link in topology.links.items()
            if pair[0][0] == resource and pair[1][0] == resource
        )
        return (group, tuple(links))


def _choose(
    topology: NumaTopology,
    group: DeviceGroup,
    count: int,
    required: list[str],
    pool: list[str],
    universe: list[str],
    prefer: Mapping[str, int],
    exact_limit: int,
) -> tuple[str, ...]:
    """choose_devices over required, pool and universe (in the group's order, deduplicated)."""
    scorer = _SetScorer(topology, group, universe, prefer)
    blocks = [frozenset(group.by_id)] if not group.partitions else list(group.partitions)
    best: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    for block in blocks:
        if not set(required) <= block:
            continue
        inside = [scorer.index[device_id] for device_id in pool if device_id in block]
        members = [scorer.index[device_id] for device_id in required]
        picked = scorer.best(members, inside, count, exact_limit)
        if picked is None:
            continue
        rank = (scorer.rank(picked), tuple(-position for position in picked))
        if best is None or rank > best:
            best = rank
    if best is None:
        return ()
    return tuple(scorer.ids[-position] for position in best[1])


class _SetScorer:
    """Weights of the candidate universe (the node's free devices), indexed by position in it."""

    def __init__(
        self, topology: NumaTopology, group: DeviceGroup, universe: Sequence[str], prefer: Mapping[str, int]
    ) -> None:
        self.index = {device_id: position for position, device_id in enumerate(universe)}
        self.ids = list(universe)
        size = len(universe)
        devices = [(group.resource, group.by_id[device_id]) for device_id in universe]
        zero = PairWeight(0, 0)
        weights = [[zero] * size for _ in range(size)]
        for first in range(size):
            for second in range(first + 1, size):
                weights[first][second] = weights[second][first] = pair_weight(topology, devices[first], devices[second])
        self.nvlinks = [[weight.nvlinks for weight in row] for row in weights]
        self.closeness = [[weight.pcie_closeness for weight in row] for row in weights]
        self.degree_nv = [sum(row) for row in self.nvlinks]
        self.degree_pc = [sum(row) for row in self.closeness]
        self.bonus = [max(0, prefer.get(device_id, 0)) for device_id in universe]
        # The additive terms folded into one integer for the search, each scaled above the whole
        # span of the terms after it: NVLinks, the PCIe path of pairs without NVLink (their GPU
        # traffic crosses PCIe; NVLinked pairs talk over NVLink), the bonus.
        pairs = size * (size - 1) // 2
        scale_pc = sum(self.bonus) + 1
        scale_nv = scale_pc * (pairs * (_PCIE_CLOSENESS_TOP - 1) + 1)
        self.pair = [
            [
                links * scale_nv + (0 if links else closeness) * scale_pc
                for links, closeness in zip(nv_row, pc_row, strict=True)
            ]
            for nv_row, pc_row in zip(self.nvlinks, self.closeness, strict=True)
        ]
        self.unit = list(self.bonus)
        self.best_pairs = _best_pair_masks(
            group, devices, self.nvlinks, self.closeness, _best_link_tier(topology, group)
        )
        self._matchings: dict[int, int] = {}

    def rank(self, members: Sequence[int]) -> tuple[int, ...]:
        """The full order of a set: additive terms, pairs left, PCIe, capacity taken (greater is better)."""
        additive = sum(self.unit[member] for member in members)
        closeness = 0
        for offset, first in enumerate(members):
            for second in members[offset + 1 :]:
                additive += self.pair[first][second]
                closeness += self.closeness[first][second]
        left = ((1 << len(self.ids)) - 1) & ~sum(1 << member for member in members)
        return (
            additive,
            self._matching(left),
            closeness,
            -sum(self.degree_nv[member] for member in members),
            -sum(self.degree_pc[member] for member in members),
        )

    def _matching(self, left: int) -> int:
        """Most disjoint best-linked pairs among the devices in the bitmask `left`."""
        known = self._matchings.get(left)
        if known is not None:
            return known
        if left & (left - 1) == 0:
            return 0
        lowest = (left & -left).bit_length() - 1
        rest = left & ~(1 << lowest)
        best = self._matching(rest)
        partners = self.best_pairs[lowest] & rest
        while partners:
            partner = partners & -partners
            partners &= ~partner
            best = max(best, 1 + self._matching(rest & ~partner))
        self._matchings[left] = best
        return best

    def best(self, required: list[int], options: list[int], count: int, exact_limit: int) -> list[int] | None:
        """The best set of `count` members: required plus picks from options, in index order."""
        wanted = count - len(required)
        if wanted < 0 or len(options) < wanted:
            return None
        if len(options) + len(required) > exact_limit:
            return sorted(required + self._greedy(required, options, wanted))
        ties = self._exact(required, options, wanted)
        best = max(ties, key=lambda picks: (self.rank(sorted(required + picks)), [-p for p in sorted(picks)]))
        return sorted(required + best)

    def _greedy(self, chosen: list[int], options: list[int], wanted: int) -> list[int]:
        def gain_of(option: int, members: Sequence[int]) -> tuple[int, int, int]:
            return (
                self.unit[option] + sum(self.pair[option][member] for member in members),
                sum(self.closeness[option][member] for member in members),
                -self.degree_nv[option] * (sum(self.degree_pc) + 1) - self.degree_pc[option],
            )

        members = list(chosen)
        remaining = list(options)
        picked: list[int] = []
        for _ in range(wanted):
            choice = max(remaining, key=lambda option: (gain_of(option, members), -option))
            remaining.remove(choice)
            members.append(choice)
            picked.append(choice)
        return picked

    def _exact(self, chosen: list[int], options: list[int], wanted: int) -> list[list[int]]:
        """Every pick (up to TIE_LIMIT, lowest first) with the best additive score."""
        if wanted == 0:
            return [[]]
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
        ties: list[list[int]] = []
        picked: list[int] = []

        def search(start: int, score: int) -> None:
            remaining = wanted - len(picked)
            if remaining == 0:
                if best_score[0] is None or score > best_score[0]:
                    best_score[0] = score
                    ties[:] = [list(picked)]
                elif score == best_score[0] and len(ties) < TIE_LIMIT:
                    ties.append(list(picked))
                return
            if best_score[0] is not None:
                # Doubled to keep the half pair weights integral; once TIE_LIMIT sets tie, only a
                # strictly better set is worth the search.
                potentials = sorted(
                    (2 * (self.unit[o] + connection[o]) + top[o][remaining - 1] for o in options[start:]),
                    reverse=True,
                )
                bound = 2 * score + sum(potentials[:remaining])
                if bound < 2 * best_score[0] or (bound == 2 * best_score[0] and len(ties) >= TIE_LIMIT):
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
        return ties


def _best_link_tier(topology: NumaTopology, group: DeviceGroup) -> tuple[int, int]:
    """(NVLinks, PCIe closeness) of the machine's best pairs on one NUMA node (and partition):
    the most NVLinks such a pair has, or, with no NVLink among them, the closest PCIe path."""
    devices = [(group.resource, device) for device in group.devices]
    weights = [
        pair_weight(topology, first, second)
        for index, first in enumerate(devices)
        for second in devices[index + 1 :]
        if _local_pair(group, first[1], second[1])
    ]
    top_nv = max((weight.nvlinks for weight in weights), default=0)
    if top_nv > 0:
        return top_nv, 0
    return 0, max((weight.pcie_closeness for weight in weights), default=0)


def _local_pair(group: DeviceGroup, first: DeviceInfo, second: DeviceInfo) -> bool:
    if first.numa != second.numa:
        return False
    pair = {first.id, second.id}
    return not group.partitions or any(pair <= partition for partition in group.partitions)


def _best_pair_masks(
    group: DeviceGroup,
    devices: Sequence[tuple[str, DeviceInfo]],
    nvlinks: Sequence[Sequence[int]],
    closeness: Sequence[Sequence[int]],
    tier: tuple[int, int],
) -> list[int]:
    """Per device, a bitmask of the devices it forms a best-linked pair with (see _best_link_tier).

    Pairs across NUMA nodes do not count: the kubelet gives a 2-device request a single NUMA node
    whenever one has two free devices; nor do pairs no partition allows.
    """
    top_nv, top_pc = tier
    size = len(devices)
    masks = [0] * size
    if top_nv == 0 and top_pc == 0:
        return masks
    for first in range(size):
        for second in range(size):
            if first == second or not _local_pair(group, devices[first][1], devices[second][1]):
                continue
            linked = nvlinks[first][second] == top_nv if top_nv > 0 else closeness[first][second] == top_pc
            if linked:
                masks[first] |= 1 << second
    return masks


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
