"""Dynamic Resource Allocation (resource.k8s.io/v1) objects as the scheduler sees them.

The cache converters (cache/convert_dra.py) build these from ResourceSlices, DeviceClasses and
ResourceClaims (or the claim templates pods reference); the allocator (plugins/dra/allocator.py)
reads them. All are frozen: sessions share them.

Attribute and capacity names are stored fully qualified (`domain/id`): a short name in a slice
belongs to the slice's driver domain (Kubernetes' parseQualifiedName), so `index` published by
gpu.nvidia.com is stored as `gpu.nvidia.com/index`. Quantities are exact Fractions of base units.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping
from fractions import Fraction

import attrs

from numasched.api.task import NodeSelectorTerm
from numasched.api.topology import NumaTopology

API_GROUP = "resource.k8s.io"
API_VERSION = "resource.k8s.io/v1"

# Standard attributes (k8s.io/dynamic-resource-allocation/deviceattribute; KEP-6072 for numaNode).
STANDARD_PREFIX = "resource.kubernetes.io/"
NUMA_NODE_ATTRIBUTE = STANDARD_PREFIX + "numaNode"
PCIE_ROOT_ATTRIBUTE = STANDARD_PREFIX + "pcieRoot"
PCI_BUS_ID_ATTRIBUTE = STANDARD_PREFIX + "pciBusID"

# Per-driver attributes that carry a NUMA node where the driver publishes one under its own
# name (NVIDIA's vfio devices publish `numa`, cmd/gpu-kubelet-plugin/deviceinfo.go); checked
# after the standard attribute.
DRIVER_NUMA_ATTRIBUTES: Mapping[str, tuple[str, ...]] = {
    "gpu.nvidia.com": ("gpu.nvidia.com/numa",),
}

# API limits the allocator relies on (resource/v1 types.go).
ALLOCATION_RESULTS_MAX = 32  # AllocationResultsMaxSize: devices per claim
DEVICE_REQUESTS_MAX = 32


class AllocationMode(enum.StrEnum):
    EXACT_COUNT = "ExactCount"
    ALL = "All"


@attrs.frozen(slots=True)
class SemVer:
    """A `version` attribute value: semantic version 2.0.0 (major, minor, patch, pre-release)."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()
    text: str = ""

    def sort_key(self) -> tuple[int, int, int, int, tuple[tuple[int, int | str], ...]]:
        """SemVer precedence: a release sorts after its pre-releases; numeric identifiers before
        alphanumeric ones, numerically."""
        pre = tuple((0, int(part)) if part.isdigit() else (1, part) for part in self.prerelease)
        return (self.major, self.minor, self.patch, 0 if self.prerelease else 1, pre)


# One attribute value: exactly one of int, bool, string, version, or a list of one of them.
ScalarAttribute = int | bool | str | SemVer
AttributeValue = ScalarAttribute | tuple[ScalarAttribute, ...]

# (driver, pool, device name): unique in a cluster, the identity allocation results name.
DeviceId = tuple[str, str, str]


@attrs.frozen(slots=True)
class CounterConsumption:
    """What a partitionable device takes from one of its slice's shared counter sets."""

    counter_set: str
    counters: Mapping[str, Fraction] = attrs.field(factory=dict)


@attrs.frozen(slots=True)
class DeviceTaint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | NoExecute | None


@attrs.frozen(slots=True)
class DeviceToleration:
    key: str = ""
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty: every effect

    def tolerates(self, taint: DeviceTaint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == taint.key
        return self.key == taint.key and self.value == taint.value


@attrs.frozen(slots=True)
class DraDevice:
    driver: str
    pool: str
    name: str
    # Fully qualified names (domain/id).
    attributes: Mapping[str, AttributeValue] = attrs.field(factory=dict)
    capacity: Mapping[str, Fraction] = attrs.field(factory=dict)
    consumes_counters: tuple[CounterConsumption, ...] = ()
    taints: tuple[DeviceTaint, ...] = ()
    # allowMultipleAllocations: the device may be in several claims at once.
    shared: bool = False

    @property
    def id(self) -> DeviceId:
        return (self.driver, self.pool, self.name)

    def describe(self) -> str:
        return f"{self.driver}/{self.pool}/{self.name}"

    def attribute(self, name: str) -> AttributeValue | None:
        """An attribute by fully qualified name, or by a short name in the device's driver domain."""
        return self.attributes.get(qualify(name, self.driver))


@attrs.frozen(slots=True)
class ResourceSliceInfo:
    name: str
    driver: str
    pool: str
    pool_generation: int = 0
    pool_slice_count: int = 1
    # Exactly one of node_name / all_nodes / node_selector in the API (the selector's terms are
    # ORed, as in node affinity); plugins/dra/allocator.py:slice_applies_to matches them.
    node_name: str | None = None
    all_nodes: bool = False
    node_selector: tuple[NodeSelectorTerm, ...] | None = None
    devices: tuple[DraDevice, ...] = ()
    # counter set name -> counter name -> value (sharedCounters).
    shared_counters: Mapping[str, Mapping[str, Fraction]] = attrs.field(factory=dict)


@attrs.frozen(slots=True)
class DeviceClassInfo:
    name: str
    selectors: tuple[str, ...] = ()  # CEL expressions, all must match
    extended_resource_name: str | None = None
    has_config: bool = False


@attrs.frozen(slots=True)
class DeviceSubRequest:
    """One alternative of a request (or the whole `exactly` request)."""

    name: str  # the request's own name for `exactly`; the subrequest's name otherwise
    device_class_name: str
    selectors: tuple[str, ...] = ()
    allocation_mode: AllocationMode = AllocationMode.EXACT_COUNT
    count: int = 1
    admin_access: bool = False
    tolerations: tuple[DeviceToleration, ...] = ()


@attrs.frozen(slots=True)
class ClaimRequest:
    """A device request: `exactly` one kind, or `firstAvailable` alternatives tried in order."""

    name: str
    exactly: DeviceSubRequest | None = None
    first_available: tuple[DeviceSubRequest, ...] = ()

    def alternatives(self) -> tuple[DeviceSubRequest, ...]:
        return (self.exactly,) if self.exactly is not None else self.first_available

    def result_name(self, alternative: DeviceSubRequest) -> str:
        """The name an allocation result carries: `request` or `request/subrequest`."""
        return self.name if self.exactly is not None else f"{self.name}/{alternative.name}"


@attrs.frozen(slots=True)
class ClaimConstraint:
    requests: tuple[str, ...] = ()  # empty: every request of the claim
    match_attribute: str | None = None  # fully qualified
    distinct_attribute: str | None = None  # fully qualified


@attrs.frozen(slots=True)
class ClaimSpec:
    requests: tuple[ClaimRequest, ...] = ()
    constraints: tuple[ClaimConstraint, ...] = ()
    # Opaque config is for the driver on the node; the scheduler copies nothing of it but notes it.
    has_config: bool = False


@attrs.frozen(slots=True)
class DeviceResult:
    request: str  # "request" or "request/subrequest"
    driver: str
    pool: str
    device: str
    admin_access: bool = False

    @property
    def device_id(self) -> DeviceId:
        return (self.driver, self.pool, self.device)


@attrs.frozen(slots=True)
class ClaimAllocation:
    results: tuple[DeviceResult, ...] = ()
    # The node the devices are on; written as a nodeSelector on metadata.name (what kube-scheduler
    # writes for node-local devices). None: devices reachable from all nodes.
    node_name: str | None = None


@attrs.frozen(slots=True)
class ConsumerRef:
    resource: str  # "pods"
    name: str
    uid: str
    api_group: str = ""


@attrs.frozen(slots=True)
class ClaimInfo:
    namespace: str
    name: str
    uid: str = ""
    spec: ClaimSpec = attrs.field(factory=ClaimSpec)
    allocation: ClaimAllocation | None = None
    reserved_for: tuple[ConsumerRef, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@attrs.frozen(slots=True)
class DraProblem:
    """Something in a DRA object the scheduler cannot use: the object, the field path, why."""

    kind: str
    namespace: str
    name: str
    field: str
    message: str

    def describe(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}: {self.field}: {self.message}"


def qualify(name: str, driver: str) -> str:
    """A QualifiedName made fully qualified: short names belong to the driver's domain."""
    return name if "/" in name else f"{driver}/{name}"


def split_qualified(name: str) -> tuple[str, str]:
    """(domain, id) of a fully qualified name."""
    domain, _, ident = name.partition("/")
    return domain, ident


def device_numa(device: DraDevice, topology: NumaTopology | None, roots: Collection[str] = ()) -> int | None:
    """The NUMA node of a device, or None when nothing says.

    In order: the standard `resource.kubernetes.io/numaNode` attribute (KEP-6072); the driver's
    own NUMA attribute where it publishes one; else the node's topology: the topology device with
    the same `resource.kubernetes.io/pciBusID`, or the topology devices behind the device's
    `resource.kubernetes.io/pcieRoot` (see pcie_root_numa; `roots` are all PCIe roots the node's
    slices name, which bound each root's bus range). A NUMA id the topology lacks is unknown.
    """
    known = None if topology is None else set(topology.numa_ids)
    for name in (NUMA_NODE_ATTRIBUTE, *DRIVER_NUMA_ATTRIBUTES.get(device.driver, ())):
        value = device.attributes.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value if known is None or value in known else None
    if topology is None:
        return None
    bus_id = device.attributes.get(PCI_BUS_ID_ATTRIBUTE)
    if isinstance(bus_id, str):
        for group in topology.devices.values():
            for info in group.devices:
                if info.numa is not None and info.pci_bus_id is not None and info.pci_bus_id.lower() == bus_id.lower():
                    return info.numa
    root = device.attributes.get(PCIE_ROOT_ATTRIBUTE)
    if isinstance(root, str):
        return pcie_root_numa(root, topology, roots)
    return None


def _root_key(root: str) -> tuple[str, int] | None:
    """`pci0000:3a` -> ("0000", 0x3a); None when not that shape."""
    domain, _, bus = root.removeprefix("pci").partition(":")
    try:
        return (domain.lower(), int(bus, 16)) if domain and bus else None
    except ValueError:
        return None


def _bus_key(bus_id: str) -> tuple[str, int] | None:
    """`0000:3b:00.0` -> ("0000", 0x3b); None when not a PCI address."""
    parts = bus_id.split(":")
    if len(parts) != 3:
        return None
    try:
        return (parts[0].lower(), int(parts[1], 16))
    except ValueError:
        return None


def pcie_root_numa(root: str, topology: NumaTopology, roots: Collection[str] = ()) -> int | None:
    """The NUMA node behind a PCIe root, from the topology's devices on that root.

    Linux names a root complex `pciDDDD:BB` after its first bus; the buses behind it run up to the
    next root's first bus in the same domain. A topology device (PCI bus id `DDDD:bb:dd.f`) is on
    `root` when bb lies in that range, with the range ending at the next of `roots`. When no
    topology device is on the root, or they disagree on their NUMA node, the answer is None.
    """
    start = _root_key(root)
    if start is None:
        return None
    later = [key[1] for key in map(_root_key, roots) if key is not None and key[0] == start[0] and key[1] > start[1]]
    end = min(later, default=256)
    found: set[int] = set()
    for group in topology.devices.values():
        for info in group.devices:
            if info.numa is None or info.pci_bus_id is None:
                continue
            bus = _bus_key(info.pci_bus_id)
            if bus is not None and bus[0] == start[0] and start[1] <= bus[1] < end:
                found.add(info.numa)
    return found.pop() if len(found) == 1 else None
