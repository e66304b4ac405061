"""Allocate a pod's ResourceClaims on one node, scoring the device sets that satisfy them.

Pure: the node's devices (from its ResourceSlices), what is in use, the DeviceClasses, the node's
topology and an optional NUMA restriction go in; an allocation per claim (or the reason there is
none) comes out. Nothing is mutated; the caller (numa-aware provider, cache, binder) records the
result.

Upstream's allocator (k8s.io/dynamic-resource-allocation/structured) takes the first device set
that satisfies the claims, in slice order. This one searches (bounded) for the sets that satisfy
every request and constraint, and keeps the best by, in order:

1. NUMA span: fewest NUMA nodes under the chosen devices (inside the NUMA restriction, if any);
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
    device_numa,
)
from numasched.api.hint import TopologyHint
from numasched.api.numamask import NumaMask, iterate_masks
from numasched.api.topology import NumaTopology
from numasched.plugins.dra.cel import CelEvaluator, device_activation

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
    # Pools left out (incomplete or outdated slices), as messages.
    problems: tuple[str, ...] = ()

    @classmethod
    def from_slices(cls, node_name: str, slices: Iterable[ResourceSliceInfo]) -> NodeDevices:
        """The devices of the slices that apply to this node (the caller has matched nodeName,
        allNodes and nodeSelector). Only each pool's newest generation counts, and a pool with
        fewer slices of that generation than its resourceSliceCount is incomplete: its devices are
        left out (as kube-scheduler does) and the problem noted."""
        raise NotImplementedError  # interface first; implemented below in the next commit

    @property
    def pcie_roots(self) -> frozenset[str]:
        return frozenset(
            root for device in self.devices if isinstance(root := device.attributes.get(PCIE_ROOT_ATTRIBUTE), str)
        )


@attrs.frozen(slots=True)
class DevicesInUse:
    """Devices allocated to claims (other than admin-access results) and counters they consume."""

    devices: frozenset[DeviceId] = frozenset()
    counters: Mapping[CounterSetId, Mapping[str, Fraction]] = attrs.field(factory=dict)

    @classmethod
    def from_allocations(cls, allocations: Iterable[ClaimAllocation], node: NodeDevices) -> DevicesInUse:
        """What the given claim allocations hold on this node (admin access holds nothing)."""
        raise NotImplementedError

    def plus(self, allocation: ClaimAllocation, node: NodeDevices) -> DevicesInUse:
        """This plus one more allocation (e.g. after the scheduler allocated a claim)."""
        raise NotImplementedError


@attrs.frozen(slots=True, order=True)
class DeviceSetScore:
    """Lower is better, compared field by field (the order in the module docstring)."""

    numa_span: int = 0
    partitions: int = 0
    pcie_roots: int = 0
    broken_numa: int = 0
    broken_roots: int = 0
    first_fit_rank: tuple[int, ...] = ()

    def node_score(self, numa_nodes: int) -> int:
        """0-100 for node ordering: 100 when all devices sit on one NUMA node and one root."""
        raise NotImplementedError


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


@attrs.frozen(slots=True)
class ClaimsDoNotFit:
    """No device set satisfies the claims; reason says which request failed and why."""

    reason: str
    problems: tuple[str, ...] = ()


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
    raise NotImplementedError


def claim_hints(
    claims: Sequence[ClaimInfo],
    node: NodeDevices,
    in_use: DevicesInUse,
    classes: Mapping[str, DeviceClassInfo],
    evaluator: CelEvaluator,
    *,
    topology: NumaTopology | None = None,
    options: AllocatorOptions = AllocatorOptions(),
) -> list[TopologyHint] | None:
    """Topology hints for the pod's claims, in the kubelet's shape (device manager): one hint per
    NUMA mask (kubelet mask order) within which the claims can be satisfied, preferred when the
    mask is as narrow as the narrowest that works. None when no candidate device has a known NUMA
    node (no preference); [] when the claims cannot be satisfied on this node at all."""
    raise NotImplementedError
