"""Allocate a pod's ResourceClaims on one node, scoring the device sets that satisfy them.

Pure: the node's devices (from its ResourceSlices), what is in use, the DeviceClasses, the node's
topology and an optional NUMA restriction go in; an allocation per claim (or the reason there is
none) comes out. Nothing is mutated; the caller (numa-aware provider, cache, binder) records the
result.

Upstream's allocator (k8s.io/dynamic-resource-allocation/structured) takes the first device set
that satisfies the claims, in slice order. This one searches (bounded) for the sets that satisfy
every request and constraint, and keeps the best by, in order:

1. NUMA span: fewest NUMA nodes under the chosen devices (inside the NUMA restriction, if any);
   then the smallest sum of NUMA distances between them (one socket before two);
2. NVLink/NVSwitch partitions: fewest partitions touched (the topology's fabric partitions, found
   through the device's pciBusID, or a partition attribute named in AllocatorOptions);
3. PCIe closeness: fewest PCIe roots (`resource.kubernetes.io/pcieRoot`) under the devices, so a
   GPU and its NIC share a root when they can;
4. fragmentation: fewest NUMA nodes and PCIe roots that were wholly free before and are not after;
5. the device order of the slices (upstream's order), so ties are deterministic.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from fractions import Fraction

import attrs

from numasched.api.dra import (
    ALLOCATION_RESULTS_MAX,
    PCI_BUS_ID_ATTRIBUTE,
    PCIE_ROOT_ATTRIBUTE,
    AllocationMode,
    AttributeValue,
    ClaimAllocation,
    ClaimInfo,
    ClaimRequest,
    DeviceClassInfo,
    DeviceId,
    DeviceResult,
    DeviceSubRequest,
    DraDevice,
    ResourceSliceInfo,
    SemVer,
    device_numa,
)
from numasched.api.hint import TopologyHint
from numasched.api.numamask import NumaMask, iterate_masks
from numasched.api.topology import NumaTopology
from numasched.plugins.dra.cel import CelEvaluator
from numasched.plugins.predicates import term_matches

# CEL errors named per call (the rest are counted).
MAX_CEL_PROBLEMS = 8

# (driver, pool, counter set name): a shared counter set of one pool.
CounterSetId = tuple[str, str, str]


class Strategy(enum.Enum):
    SCORED = "scored"  # search the alternatives, keep the best by the order above
    FIRST_FIT = "first-fit"  # upstream's behaviour: the first set found in slice order


@attrs.frozen(slots=True)
class AllocatorOptions:
    """max_steps bounds the search (device sets tried per call, over all NUMA masks); when it is
    reached the best set found so far is kept, and with none the pod does not fit (the reason
    says the limit was reached). max_solutions bounds the sets scored per NUMA span."""

    max_steps: int = 20_000
    max_solutions: int = 64
    # Attributes whose equal values mean "one NVLink/NVSwitch partition" (fully qualified).
    partition_attributes: tuple[str, ...] = ()
    strategy: Strategy = Strategy.SCORED


@attrs.frozen(slots=True)
class NodeDevices:
    """The DRA devices one node can use and the shared counters of their pools."""

    node_name: str
    devices: tuple[DraDevice, ...] = ()
    shared_counters: Mapping[CounterSetId, Mapping[str, Fraction]] = attrs.field(factory=dict)
    # Devices from slices for all nodes or a node selector (not node-local): an allocation of only
    # such devices needs no node selector.
    network_devices: frozenset[DeviceId] = frozenset()
    # Pools or devices left out (incomplete pool, duplicate device), as messages.
    problems: tuple[str, ...] = ()

    @classmethod
    def from_slices(cls, node_name: str, slices: Iterable[ResourceSliceInfo]) -> NodeDevices:
        """The devices of the slices that apply to this node (the caller has matched nodeName,
        allNodes and nodeSelector), in slice order. Only each pool's newest generation counts, and
        a pool with fewer slices of that generation than its resourceSliceCount is incomplete: its
        devices are left out (as kube-scheduler does) and the problem noted."""
        pools: dict[tuple[str, str], list[ResourceSliceInfo]] = {}
        for info in slices:
            pools.setdefault((info.driver, info.pool), []).append(info)
        devices: list[DraDevice] = []
        counters: dict[CounterSetId, Mapping[str, Fraction]] = {}
        network: set[DeviceId] = set()
        problems: list[str] = []
        seen: set[DeviceId] = set()
        for (driver, pool), members in pools.items():
            newest = max(member.pool_generation for member in members)
            current = [member for member in members if member.pool_generation == newest]
            expected = max(member.pool_slice_count for member in current)
            if len(current) < expected:
                problems.append(
                    f"pool {driver}/{pool}: {len(current)} of {expected} slices of generation {newest} seen; "
                    "its devices are not used until the pool is complete"
                )
                continue
            for member in current:
                for set_name, values in member.shared_counters.items():
                    counters[(driver, pool, set_name)] = values
                for device in member.devices:
                    if device.id in seen:
                        problems.append(
                            f"pool {driver}/{pool}: device {device.name!r} is published twice; kept the first"
                        )
                        continue
                    seen.add(device.id)
                    devices.append(device)
                    if member.node_name is None:
                        network.add(device.id)
        return cls(node_name, tuple(devices), counters, frozenset(network), tuple(problems))

    @property
    def pcie_roots(self) -> frozenset[str]:
        return frozenset(
            root for device in self.devices if isinstance(root := device.attributes.get(PCIE_ROOT_ATTRIBUTE), str)
        )

    def device(self, device_id: DeviceId) -> DraDevice | None:
        for device in self.devices:
            if device.id == device_id:
                return device
        return None


def slice_applies_to(info: ResourceSliceInfo, node_name: str, labels: Mapping[str, str]) -> bool:
    """Whether a slice's devices are reachable from a node: its nodeName, allNodes, or a node
    selector whose terms (ORed, as in node affinity) match the node's labels and name."""
    if info.node_name is not None:
        return info.node_name == node_name
    if info.all_nodes:
        return True
    terms = info.node_selector or ()
    return any(term_matches(term, labels, node_name) for term in terms)


def _add_counters(
    total: dict[CounterSetId, dict[str, Fraction]], device: DraDevice, sign: int = 1
) -> dict[CounterSetId, dict[str, Fraction]]:
    for consumption in device.consumes_counters:
        key = (device.driver, device.pool, consumption.counter_set)
        per_set = total.setdefault(key, {})
        for name, value in consumption.counters.items():
            per_set[name] = per_set.get(name, Fraction(0)) + sign * value
    return total


@attrs.frozen(slots=True)
class DevicesInUse:
    """Devices allocated to claims (other than admin-access results) and counters they consume."""

    devices: frozenset[DeviceId] = frozenset()
    counters: Mapping[CounterSetId, Mapping[str, Fraction]] = attrs.field(factory=dict)

    @classmethod
    def from_allocations(cls, allocations: Iterable[ClaimAllocation], node: NodeDevices) -> DevicesInUse:
        """What the given claim allocations hold on this node (admin access holds nothing)."""
        result = cls()
        for allocation in allocations:
            result = result.plus(allocation, node)
        return result

    def plus(self, allocation: ClaimAllocation, node: NodeDevices) -> DevicesInUse:
        """This plus one more allocation (e.g. after the scheduler allocated a claim)."""
        devices = set(self.devices)
        counters = {key: dict(values) for key, values in self.counters.items()}
        by_id = {device.id: device for device in node.devices}
        for result in allocation.results:
            if result.admin_access:
                continue
            device = by_id.get(result.device_id)
            if device is not None and device.shared:
                continue
            devices.add(result.device_id)
            if device is not None:
                _add_counters(counters, device)
        return DevicesInUse(frozenset(devices), counters)


@attrs.frozen(slots=True, order=True)
class DeviceSetScore:
    """Lower is better, compared field by field (the order in the module docstring; a request's
    firstAvailable order comes first, as the API requires)."""

    alternatives: tuple[int, ...] = ()
    numa_span: int = 0
    # Sum of the SLIT distances between the NUMA nodes under the devices (0 for one node): of two
    # sets on two NUMA nodes, the one on one socket wins (the kubelet's prefer-closest idea).
    numa_distance: int = 0
    partitions: int = 0
    pcie_roots: int = 0
    broken_numa: int = 0
    broken_roots: int = 0
    first_fit_rank: tuple[int, ...] = ()

    def node_score(self, numa_nodes: int) -> int:
        """0-100 for node ordering: 100 when the devices sit on one NUMA node and one PCIe root
        and break no wholly free NUMA node; less for each extra NUMA node, root or broken node."""
        if numa_nodes <= 0:
            return 100
        spread = max(0, self.numa_span - 1) / max(1, numa_nodes - 1)
        penalty = 60 * spread + 10 * min(1, max(0, self.pcie_roots - 1)) + 10 * min(1, self.partitions // 2)
        penalty += 20 * min(1, self.broken_numa / max(1, numa_nodes))
        return max(0, min(100, round(100 - penalty)))


@attrs.frozen(slots=True)
class PodClaimsAllocation:
    """A pod's claims allocated on one node.

    allocations: (claim key "ns/name", allocation) for each claim this call allocated, in the
    order given; claims that already had an allocation are not repeated.
    numa: the NUMA nodes under all of the pod's claimed devices (also pre-allocated ones); empty
    when no device's NUMA node is known.
    """

    node_name: str
    allocations: tuple[tuple[str, ClaimAllocation], ...]
    numa: NumaMask
    score: DeviceSetScore
    problems: tuple[str, ...] = ()

    def devices(self) -> tuple[DeviceId, ...]:
        return tuple(result.device_id for _, allocation in self.allocations for result in allocation.results)


@attrs.frozen(slots=True)
class ClaimsDoNotFit:
    """No device set satisfies the claims; reason says which request failed and why."""

    reason: str
    problems: tuple[str, ...] = ()


# --- the search ---------------------------------------------------------------------------------


@attrs.frozen(slots=True)
class _Alternative:
    index: int
    request: DeviceSubRequest
    result_name: str
    candidates: tuple[DraDevice, ...]  # free, selected devices (node order)
    # For allocationMode All: every device the selectors match, in use or not.
    matching: tuple[DraDevice, ...] = ()


@attrs.frozen(slots=True)
class _Slot:
    claim: int  # index into the claims being allocated
    request: ClaimRequest
    alternatives: tuple[_Alternative, ...]


@attrs.frozen(slots=True)
class _Constraint:
    claim: int
    attribute: str
    distinct: bool
    requests: frozenset[str]  # empty: all requests of the claim

    def covers(self, slot: _Slot, alternative: _Alternative) -> bool:
        if slot.claim != self.claim:
            return False
        return not self.requests or slot.request.name in self.requests or alternative.result_name in self.requests


def _value_key(value: AttributeValue) -> object:
    """A hashable key under which equal attribute values (as Kubernetes compares them) meet."""
    if isinstance(value, SemVer):
        return ("version", value.sort_key())
    if isinstance(value, tuple):
        return ("list", tuple(_value_key(item) for item in value))
    return (type(value).__name__, value)


@attrs.frozen(slots=True)
class _Solution:
    choices: tuple[tuple[_Alternative, tuple[DraDevice, ...]], ...]  # per slot


class _SearchBudget:
    def __init__(self, steps: int) -> None:
        self.left = steps

    def take(self) -> bool:
        self.left -= 1
        return self.left >= 0


class _Search:
    """Depth-first search over the slots (one per request of each claim to allocate)."""

    def __init__(
        self,
        slots: Sequence[_Slot],
        constraints: Sequence[_Constraint],
        claim_sizes: Sequence[int],
        node: NodeDevices,
        in_use: DevicesInUse,
        numa_of: Mapping[DeviceId, int | None],
        budget: _SearchBudget,
    ) -> None:
        self.slots = slots
        self.constraints = constraints
        self.node = node
        self.in_use = in_use
        self.numa_of = numa_of
        self.budget = budget
        self.claim_sizes = list(claim_sizes)
        self.exhausted = False

    def run(self, mask: NumaMask | None, limit: int) -> list[_Solution]:
        """Up to `limit` solutions using only devices whose NUMA node is unknown or in `mask`."""
        found: list[_Solution] = []
        counters: dict[CounterSetId, dict[str, Fraction]] = {k: dict(v) for k, v in self.in_use.counters.items()}
        self._step(0, mask, [], set(), counters, {}, {}, list(self.claim_sizes), found, limit)
        return found

    def _allowed(self, device: DraDevice, mask: NumaMask | None) -> bool:
        if mask is None:
            return True
        numa = self.numa_of.get(device.id)
        return numa is None or mask.is_set(numa)

    def _counters_fit(self, counters: Mapping[CounterSetId, Mapping[str, Fraction]]) -> bool:
        for key, used in counters.items():
            limits = self.node.shared_counters.get(key)
            if limits is None:
                if any(value > 0 for value in used.values()):
                    return False
                continue
            for name, value in used.items():
                if value > limits.get(name, Fraction(0)):
                    return False
        return True

    def _step(
        self,
        index: int,
        mask: NumaMask | None,
        chosen: list[tuple[_Alternative, tuple[DraDevice, ...]]],
        used: set[DeviceId],
        counters: dict[CounterSetId, dict[str, Fraction]],
        matched: dict[int, object],
        distinct: dict[int, set[object]],
        claim_room: list[int],
        found: list[_Solution],
        limit: int,
    ) -> None:
        if len(found) >= limit or self.exhausted:
            return
        if index == len(self.slots):
            found.append(_Solution(tuple(chosen)))
            return
        slot = self.slots[index]
        for alternative in slot.alternatives:
            for devices in self._device_sets(slot, alternative, mask, used, matched, distinct):
                if len(devices) > claim_room[slot.claim]:
                    continue
                consuming = not alternative.request.admin_access
                new_counters = counters
                if consuming and any(device.consumes_counters for device in devices):
                    new_counters = {k: dict(v) for k, v in counters.items()}
                    for device in devices:
                        _add_counters(new_counters, device)
                    if not self._counters_fit(new_counters):
                        continue
                undo_matched: list[int] = []
                added_distinct: list[tuple[int, object]] = []
                for position, constraint in enumerate(self.constraints):
                    if not constraint.covers(slot, alternative):
                        continue
                    keys = [_value_key(device.attributes[constraint.attribute]) for device in devices]
                    if constraint.distinct:
                        for key in keys:
                            distinct.setdefault(position, set()).add(key)
                            added_distinct.append((position, key))
                    elif position not in matched and keys:
                        matched[position] = keys[0]
                        undo_matched.append(position)
                newly_used = {device.id for device in devices if consuming and not device.shared}
                used |= newly_used
                claim_room[slot.claim] -= len(devices)
                chosen.append((alternative, devices))
                self._step(index + 1, mask, chosen, used, new_counters, matched, distinct, claim_room, found, limit)
                chosen.pop()
                claim_room[slot.claim] += len(devices)
                used -= newly_used
                for position in undo_matched:
                    del matched[position]
                for position, key in added_distinct:
                    distinct[position].discard(key)
                if len(found) >= limit or self.exhausted:
                    return
            if self.exhausted:
                return

    def _device_sets(
        self,
        slot: _Slot,
        alternative: _Alternative,
        mask: NumaMask | None,
        used: set[DeviceId],
        matched: Mapping[int, object],
        distinct: Mapping[int, set[object]],
    ) -> Iterator[tuple[DraDevice, ...]]:
        """The device sets this alternative may take given what earlier slots chose."""
        request = alternative.request
        covering = [(position, c) for position, c in enumerate(self.constraints) if c.covers(slot, alternative)]

        def usable(device: DraDevice) -> bool:
            if device.id in used and not request.admin_access and not device.shared:
                return False
            for position, constraint in covering:
                value = device.attributes.get(constraint.attribute)
                if value is None:
                    return False
                key = _value_key(value)
                if constraint.distinct and key in distinct.get(position, ()):
                    return False
                if not constraint.distinct and position in matched and matched[position] != key:
                    return False
            return True

        if request.allocation_mode is AllocationMode.ALL:
            if not self.budget.take():
                self.exhausted = True
                return
            devices = alternative.matching
            if not devices or len(devices) != len(alternative.candidates):
                return  # some matching device is in use (or none matches): All cannot be met
            if all(usable(device) and self._allowed(device, mask) for device in devices) and self._distinct_within(
                devices, covering
            ):
                yield devices
            return
        pool = [device for device in alternative.candidates if self._allowed(device, mask) and usable(device)]
        open_matches = [
            (position, c)
            for position, c in covering
            if not c.distinct and position not in matched and request.count > 1
        ]
        groups: list[list[DraDevice]]
        if open_matches:
            # Devices of one request under a matchAttribute constraint share the value: enumerate
            # per value instead of over all combinations.
            by_value: dict[tuple[object, ...], list[DraDevice]] = {}
            for device in pool:
                key = tuple(_value_key(device.attributes[c.attribute]) for _, c in open_matches)
                by_value.setdefault(key, []).append(device)
            groups = list(by_value.values())
        else:
            groups = [pool]
        for group in groups:
            if len(group) < request.count:
                continue
            for combination in itertools.combinations(group, request.count):
                # Every set looked at costs a step, kept or not: the budget bounds the work.
                if not self.budget.take():
                    self.exhausted = True
                    return
                if self._distinct_within(combination, covering):
                    yield combination

    @staticmethod
    def _distinct_within(devices: Sequence[DraDevice], covering: Sequence[tuple[int, _Constraint]]) -> bool:
        for _, constraint in covering:
            if len(devices) < 2:
                continue
            keys = [_value_key(device.attributes[constraint.attribute]) for device in devices]
            if constraint.distinct and len(set(keys)) != len(keys):
                return False
            if not constraint.distinct and len(set(keys)) != 1:
                return False
        return True


# --- preparing the search -----------------------------------------------------------------------


def _tolerated(device: DraDevice, request: DeviceSubRequest) -> bool:
    return all(
        taint.effect not in ("NoSchedule", "NoExecute") or any(t.tolerates(taint) for t in request.tolerations)
        for taint in device.taints
    )


@attrs.frozen(slots=True)
class _Prepared:
    slots: tuple[_Slot, ...]
    constraints: tuple[_Constraint, ...]
    claim_sizes: tuple[int, ...]
    claim_keys: tuple[str, ...]
    fixed: tuple[DraDevice, ...]  # devices of the pod's already allocated claims on this node
    problems: tuple[str, ...]


def _prepare(
    claims: Sequence[ClaimInfo],
    node: NodeDevices,
    in_use: DevicesInUse,
    classes: Mapping[str, DeviceClassInfo],
    evaluator: CelEvaluator,
) -> _Prepared | ClaimsDoNotFit:
    problems: list[str] = list(node.problems)
    slots: list[_Slot] = []
    constraints: list[_Constraint] = []
    keys: list[str] = []
    fixed: list[DraDevice] = []
    by_id = {device.id: device for device in node.devices}

    cel_errors: list[str] = []

    def collected() -> tuple[str, ...]:
        # One broken selector errs on every device it meets: name a few, count the rest.
        extra = len(cel_errors) - MAX_CEL_PROBLEMS
        more = [f"... and {extra} more CEL errors"] if extra > 0 else []
        return (*problems, *cel_errors[:MAX_CEL_PROBLEMS], *more)

    def selected(device: DraDevice, expressions: Sequence[str]) -> bool:
        for expression in expressions:
            result = evaluator.selects(expression, device)
            if result.error is not None and result.error not in cel_errors:
                cel_errors.append(result.error)
            if not result.matched:
                return False
        return True

    for claim in claims:
        if claim.allocation is not None:
            where = claim.allocation.node_name
            if where is not None and where != node.node_name:
                return ClaimsDoNotFit(f"claim {claim.key} is allocated on node {where}", tuple(problems))
            fixed.extend(d for r in claim.allocation.results if (d := by_id.get(r.device_id)) is not None)
            continue
        position = len(keys)
        keys.append(claim.key)
        for request in claim.spec.requests:
            alternatives: list[_Alternative] = []
            reasons: list[str] = []
            for index, sub in enumerate(request.alternatives()):
                device_class = classes.get(sub.device_class_name)
                if device_class is None:
                    reasons.append(f"device class {sub.device_class_name!r} not found")
                    continue
                expressions = (*device_class.selectors, *sub.selectors)
                matching = tuple(d for d in node.devices if _tolerated(d, sub) and selected(d, expressions))
                free = tuple(d for d in matching if sub.admin_access or d.shared or d.id not in in_use.devices)
                if sub.allocation_mode is AllocationMode.ALL:
                    if not matching:
                        reasons.append(f"{request.result_name(sub)}: allocationMode All matches no device")
                        continue
                    if len(free) != len(matching):
                        reasons.append(
                            f"{request.result_name(sub)}: allocationMode All but some matching devices are in use"
                        )
                        continue
                elif len(free) < sub.count:
                    reasons.append(
                        f"{request.result_name(sub)}: {len(free)} free matching devices, {sub.count} requested"
                    )
                    continue
                alternatives.append(_Alternative(index, sub, request.result_name(sub), free, matching))
            if not alternatives:
                detail = "; ".join(reasons) or "no alternatives"
                return ClaimsDoNotFit(f"claim {claim.key} request {request.name}: {detail}", collected())
            slots.append(_Slot(position, request, tuple(alternatives)))
        for constraint in claim.spec.constraints:
            for attribute, distinct in ((constraint.match_attribute, False), (constraint.distinct_attribute, True)):
                if attribute is not None:
                    constraints.append(_Constraint(position, attribute, distinct, frozenset(constraint.requests)))
    sizes = tuple(ALLOCATION_RESULTS_MAX for _ in keys)
    return _Prepared(tuple(slots), tuple(constraints), sizes, tuple(keys), tuple(fixed), collected())


# --- scoring ------------------------------------------------------------------------------------


@attrs.frozen(slots=True)
class _Scorer:
    node: NodeDevices
    in_use: DevicesInUse
    numa_of: Mapping[DeviceId, int | None]
    root_of: Mapping[DeviceId, str | None]
    partition_of: Mapping[DeviceId, tuple[object, ...]]
    rank_of: Mapping[DeviceId, int]
    fixed: tuple[DraDevice, ...]
    topology: NumaTopology | None = None

    def distance(self, numa: NumaMask) -> int:
        if self.topology is None:
            return 0
        ids = numa.ids()
        return sum(self.topology.distance(a, b) for index, a in enumerate(ids) for b in ids[index + 1 :])

    def numa_mask(self, devices: Iterable[DraDevice]) -> NumaMask:
        ids = {numa for d in devices if (numa := self.numa_of.get(d.id)) is not None}
        return NumaMask.from_ids(ids)

    def score(self, solution: _Solution) -> DeviceSetScore:
        chosen = [device for _, devices in solution.choices for device in devices]
        everything = [*chosen, *self.fixed]
        numa = self.numa_mask(everything)
        roots = {root for d in everything if (root := self.root_of.get(d.id)) is not None}
        partitions = {label for d in everything for label in self.partition_of.get(d.id, ())}
        busy = self.in_use.devices
        # NUMA nodes / roots on which every device was free before this allocation.
        touched_numa = {n for d in chosen if (n := self.numa_of.get(d.id)) is not None}
        touched_roots = {r for d in chosen if (r := self.root_of.get(d.id)) is not None}
        busy_numa = {n for d in self.node.devices if d.id in busy and (n := self.numa_of.get(d.id)) is not None}
        busy_roots = {r for d in self.node.devices if d.id in busy and (r := self.root_of.get(d.id)) is not None}
        return DeviceSetScore(
            alternatives=tuple(alternative.index for alternative, _ in solution.choices),
            numa_span=numa.count(),
            numa_distance=self.distance(numa),
            partitions=len(partitions),
            pcie_roots=len(roots),
            broken_numa=len(touched_numa - busy_numa),
            broken_roots=len(touched_roots - busy_roots),
            first_fit_rank=tuple(sorted(self.rank_of[d.id] for d in chosen)),
        )


def _partition_labels(
    device: DraDevice, topology: NumaTopology | None, options: AllocatorOptions
) -> tuple[object, ...]:
    labels: list[object] = [
        (name, _value_key(value))
        for name in options.partition_attributes
        if (value := device.attributes.get(name)) is not None
    ]
    bus_id = device.attributes.get(PCI_BUS_ID_ATTRIBUTE)
    if topology is not None and isinstance(bus_id, str):
        for group in topology.devices.values():
            if not group.partitions:
                continue
            ids = [info.id for info in group.devices if info.pci_bus_id and info.pci_bus_id.lower() == bus_id.lower()]
            for device_id in ids:
                for number, partition in enumerate(group.partitions):
                    if device_id in partition:
                        labels.append((group.resource, number))
    return tuple(labels)


def _scorer(
    node: NodeDevices,
    in_use: DevicesInUse,
    topology: NumaTopology | None,
    fixed: tuple[DraDevice, ...],
    options: AllocatorOptions,
) -> _Scorer:
    roots = node.pcie_roots
    numa_of = {device.id: device_numa(device, topology, roots) for device in node.devices}
    root_of: dict[DeviceId, str | None] = {}
    for device in node.devices:
        root = device.attributes.get(PCIE_ROOT_ATTRIBUTE)
        root_of[device.id] = root if isinstance(root, str) else None
    partition_of = {device.id: _partition_labels(device, topology, options) for device in node.devices}
    rank_of = {device.id: rank for rank, device in enumerate(node.devices)}
    return _Scorer(node, in_use, numa_of, root_of, partition_of, rank_of, fixed, topology)


def _candidate_order(prepared: _Prepared, scorer: _Scorer) -> _Prepared:
    """Candidates grouped by NUMA node, then PCIe root, then slice order, so the first sets the
    search meets are the compact ones (the search keeps scoring beyond them)."""

    def key(device: DraDevice) -> tuple[int, str, int]:
        numa = scorer.numa_of.get(device.id)
        return (-1 if numa is None else numa, scorer.root_of.get(device.id) or "", scorer.rank_of[device.id])

    slots = tuple(
        attrs.evolve(
            slot,
            alternatives=tuple(
                attrs.evolve(alt, candidates=tuple(sorted(alt.candidates, key=key))) for alt in slot.alternatives
            ),
        )
        for slot in prepared.slots
    )
    return attrs.evolve(prepared, slots=slots)


def _search(
    prepared: _Prepared, node: NodeDevices, in_use: DevicesInUse, scorer: _Scorer, budget: _SearchBudget
) -> _Search:
    return _Search(prepared.slots, prepared.constraints, prepared.claim_sizes, node, in_use, scorer.numa_of, budget)


def _numa_ids(topology: NumaTopology | None, scorer: _Scorer) -> list[int]:
    if topology is not None:
        return sorted(topology.numa_ids)
    return sorted({numa for numa in scorer.numa_of.values() if numa is not None})


def _build(prepared: _Prepared, solution: _Solution, node: NodeDevices) -> tuple[tuple[str, ClaimAllocation], ...]:
    results: list[list[DeviceResult]] = [[] for _ in prepared.claim_keys]
    for slot, (alternative, devices) in zip(prepared.slots, solution.choices, strict=True):
        for device in devices:
            results[slot.claim].append(
                DeviceResult(
                    request=alternative.result_name,
                    driver=device.driver,
                    pool=device.pool,
                    device=device.name,
                    admin_access=alternative.request.admin_access,
                )
            )
    allocations: list[tuple[str, ClaimAllocation]] = []
    for key, claim_results in zip(prepared.claim_keys, results, strict=True):
        local = any(r.device_id not in node.network_devices for r in claim_results)
        allocations.append((key, ClaimAllocation(tuple(claim_results), node.node_name if local else None)))
    return tuple(allocations)


def allocate_claims(
    claims: Sequence[ClaimInfo],
    node: NodeDevices,
    in_use: DevicesInUse,
    classes: Mapping[str, DeviceClassInfo],
    evaluator: CelEvaluator,
    *,
    topology: NumaTopology | None = None,
    numa_restriction: NumaMask | None = None,
    options: AllocatorOptions = AllocatorOptions(),
) -> PodClaimsAllocation | ClaimsDoNotFit:
    """Allocate every claim of a pod that has no allocation yet on `node`.

    A claim already allocated must be on this node (or reachable from it) — else the pod does not
    fit — and its devices count for the NUMA span. With numa_restriction, every chosen device
    whose NUMA node is known lies inside it. problems carries CEL errors (a device an expression
    could not judge does not match) and pools left out.
    """
    prepared = _prepare(claims, node, in_use, classes, evaluator)
    if isinstance(prepared, ClaimsDoNotFit):
        return prepared
    scorer = _scorer(node, in_use, topology, prepared.fixed, options)
    fixed_numa = scorer.numa_mask(prepared.fixed)
    if numa_restriction is not None and not fixed_numa.is_subset_of(numa_restriction):
        return ClaimsDoNotFit(
            f"devices of the pod's allocated claims are on NUMA {fixed_numa.format()}, "
            f"outside {numa_restriction.format()}",
            prepared.problems,
        )
    budget = _SearchBudget(options.max_steps)
    if options.strategy is Strategy.FIRST_FIT:
        search = _search(prepared, node, in_use, scorer, budget)
        found = search.run(numa_restriction, 1)
        best = found[0] if found else None
    else:
        prepared = _candidate_order(prepared, scorer)
        search = _search(prepared, node, in_use, scorer, budget)
        best = _best_scored(search, scorer, _numa_ids(topology, scorer), numa_restriction, options)
    if best is None:
        why = "the search limit was reached before" if search.exhausted else "no"
        return ClaimsDoNotFit(
            f"{why} device set satisfies the claims' requests and constraints"
            + (f" within NUMA {numa_restriction.format()}" if numa_restriction is not None else ""),
            prepared.problems,
        )
    chosen = [device for _, devices in best.choices for device in devices]
    return PodClaimsAllocation(
        node_name=node.node_name,
        allocations=_build(prepared, best, node),
        numa=scorer.numa_mask([*chosen, *prepared.fixed]),
        score=scorer.score(best),
        problems=prepared.problems,
    )


def _best_scored(
    search: _Search,
    scorer: _Scorer,
    numa_ids: Sequence[int],
    restriction: NumaMask | None,
    options: AllocatorOptions,
) -> _Solution | None:
    """Masks narrowest first (kubelet order); a wider mask is searched only while it could still
    give a better score (an earlier firstAvailable alternative)."""
    allowed = [n for n in numa_ids if restriction is None or restriction.is_set(n)]
    masks: list[NumaMask | None] = list(iterate_masks(allowed)) if allowed else [restriction]
    best: tuple[DeviceSetScore, _Solution] | None = None
    size_done: int | None = None
    for mask in masks:
        size = 0 if mask is None else mask.count()
        if size_done is not None and size > size_done:
            if best is not None and not any(best[0].alternatives):
                break
            size_done = None
        for solution in search.run(mask, options.max_solutions):
            score = scorer.score(solution)
            if best is None or score < best[0]:
                best = (score, solution)
        if best is not None and size_done is None:
            size_done = size
        if search.exhausted:
            break
    return None if best is None else best[1]


def claim_hints(
    claims: Sequence[ClaimInfo],
    node: NodeDevices,
    in_use: DevicesInUse,
    classes: Mapping[str, DeviceClassInfo],
    evaluator: CelEvaluator,
    *,
    topology: NumaTopology | None = None,
    options: AllocatorOptions = AllocatorOptions(),
    preferred_from_all_devices: bool = True,
) -> list[TopologyHint] | None:
    """Topology hints for the pod's claims, in the kubelet's shape (device manager): one hint per
    NUMA mask (kubelet mask order) within which the claims can be satisfied now. None when no
    candidate device has a known NUMA node (no preference); [] when the claims cannot be
    satisfied on this node at all.

    A hint is preferred when its mask is as narrow as the narrowest that could hold the claims if
    no device were in use — the kubelet device manager's rule (and providers/device.py's), so a
    claim that only fits spread over NUMA nodes because of what others hold gets no preferred
    hint. With preferred_from_all_devices=False the narrowest mask that works now is preferred.
    """
    prepared = _prepare(claims, node, in_use, classes, evaluator)
    if isinstance(prepared, ClaimsDoNotFit):
        return []
    scorer = _scorer(node, in_use, topology, prepared.fixed, options)
    budget = _SearchBudget(options.max_steps)
    search = _search(prepared, node, in_use, scorer, budget)
    candidates = [d for slot in prepared.slots for alt in slot.alternatives for d in alt.matching]
    if all(scorer.numa_of.get(d.id) is None for d in [*candidates, *prepared.fixed]):
        return None if search.run(None, 1) else []
    fixed_numa = scorer.numa_mask(prepared.fixed)
    numa_ids = _numa_ids(topology, scorer)
    feasible = _feasible_masks(search, numa_ids, fixed_numa)
    if not feasible:
        return []
    narrowest = min(mask.count() for mask in feasible)
    if preferred_from_all_devices:
        unused = _prepare(claims, node, DevicesInUse(), classes, evaluator)
        if not isinstance(unused, ClaimsDoNotFit):
            ideal = _search(unused, node, DevicesInUse(), scorer, budget)
            for mask in iterate_masks(numa_ids):
                if mask.count() >= narrowest or ideal.exhausted:
                    break
                if fixed_numa.is_subset_of(mask) and ideal.run(mask, 1):
                    narrowest = mask.count()
                    break
    return [TopologyHint(mask, mask.count() == narrowest) for mask in feasible]


def _feasible_masks(search: _Search, numa_ids: Sequence[int], fixed_numa: NumaMask) -> list[NumaMask]:
    """The masks (kubelet order) within which the search finds a set; a superset of a feasible
    mask is feasible without searching."""
    feasible: list[NumaMask] = []
    for mask in iterate_masks(numa_ids):
        if not fixed_numa.is_subset_of(mask):
            continue
        if any(smaller.is_subset_of(mask) for smaller in feasible) or search.run(mask, 1):
            feasible.append(mask)
        if search.exhausted:
            break
    return feasible
