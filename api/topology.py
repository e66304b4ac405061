"""A node's NUMA, CPU and device topology and its kubelet policies, as the scheduler sees them.

Built by cache converters from a Numatopology or NodeResourceTopology object (plus the
numasched.io/device-topology annotation) and never mutated afterwards: sessions share it.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from functools import cached_property

import attrs

from numasched.api.idset import IdSet
from numasched.api.numamask import NumaMask


class TopologyPolicy(enum.StrEnum):
    NONE = "none"
    BEST_EFFORT = "best-effort"
    RESTRICTED = "restricted"
    SINGLE_NUMA_NODE = "single-numa-node"

    @property
    def strictness(self) -> int:
        """Order used when a pod asks for a policy stricter than its node's."""
        return _STRICTNESS[self]


_STRICTNESS = {
    TopologyPolicy.NONE: 0,
    TopologyPolicy.BEST_EFFORT: 1,
    TopologyPolicy.RESTRICTED: 2,
    TopologyPolicy.SINGLE_NUMA_NODE: 3,
}


class TopologyScope(enum.StrEnum):
    CONTAINER = "container"
    POD = "pod"


class CpuManagerPolicy(enum.StrEnum):
    NONE = "none"
    STATIC = "static"


# The kubelet refuses to start a topology manager on more NUMA nodes than this unless the
# max-allowable-numa-nodes policy option raises it.
DEFAULT_MAX_ALLOWABLE_NUMA_NODES = 8
# The kernel's largest NR_CPUS (CONFIG_NR_CPUS_RANGE_END): no machine has a CPU id at or above it.
MAX_CPU_ID = 8191
# The kernel's largest NUMA id (MAX_NUMNODES is at most 1024); the scheduler's masks hold fewer
# (numamask.MAX_NUMA_ID), and readers narrow ids to the node's own NUMA nodes.
MAX_KERNEL_NUMA_ID = 1023
# More devices of one resource than any node carries: an object saying so is wrong, not big.
MAX_DEVICES_PER_RESOURCE = 1024

PREFER_CLOSEST_NUMA_NODES = "prefer-closest-numa-nodes"
MAX_ALLOWABLE_NUMA_NODES = "max-allowable-numa-nodes"
# The topology manager policy options the kubelet knows (pkg/kubelet/cm/topologymanager/
# policy_options.go); it refuses to start on any other name, so a topology naming one does not
# describe a running kubelet.
KNOWN_TOPOLOGY_MANAGER_OPTIONS = (PREFER_CLOSEST_NUMA_NODES, MAX_ALLOWABLE_NUMA_NODES)

_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})
_GO_INT = re.compile(r"[+-]?[0-9]+")
_GO_INT_MAX = (1 << 63) - 1


class KubeletOptionError(ValueError):
    """A kubelet option value the kubelet itself would refuse."""


def parse_go_bool(text: str) -> bool:
    """Go's strconv.ParseBool: exactly these spellings, anything else (e.g. "yes") an error."""
    if text in _GO_TRUE:
        return True
    if text in _GO_FALSE:
        return False
    raise KubeletOptionError(f"invalid boolean {text[:40]!r} (Go's strconv.ParseBool: 1, t, true, 0, f, false, ...)")


def parse_go_int(text: str) -> int:
    """Go's strconv.Atoi on a 64-bit kubelet: optional sign, ASCII digits, int64 range."""
    if len(text) > 24 or not _GO_INT.fullmatch(text):
        raise KubeletOptionError(f"invalid integer {text[:40]!r}")
    value = int(text)
    if not -_GO_INT_MAX - 1 <= value <= _GO_INT_MAX:
        raise KubeletOptionError(f"integer {text!r} is out of range")
    return value


def check_topology_manager_options(options: Mapping[str, str]) -> None:
    """Refuse what the kubelet's NewPolicyOptions refuses, naming the option.

    prefer-closest-numa-nodes: strconv.ParseBool; max-allowable-numa-nodes: strconv.Atoi, at least
    8; any other name: "unknown Topology Manager Policy option" (the kubelet does not start).
    """
    for name, value in options.items():
        if name == PREFER_CLOSEST_NUMA_NODES:
            try:
                parse_go_bool(value)
            except KubeletOptionError as error:
                raise KubeletOptionError(f"bad value for option {name!r}: {error}") from None
        elif name == MAX_ALLOWABLE_NUMA_NODES:
            try:
                number = parse_go_int(value)
            except KubeletOptionError as error:
                raise KubeletOptionError(f"unable to convert policy option to integer {name!r}: {error}") from None
            if number < DEFAULT_MAX_ALLOWABLE_NUMA_NODES:
                raise KubeletOptionError(
                    f"the minimum value of {name!r} should not be less than {DEFAULT_MAX_ALLOWABLE_NUMA_NODES}"
                )
        else:
            known = ", ".join(KNOWN_TOPOLOGY_MANAGER_OPTIONS)
            raise KubeletOptionError(f"unknown Topology Manager Policy option {name[:60]!r} (known: {known})")


# The spec.policies key (ours, beside Volcano's CPUManagerPolicy and TopologyManagerPolicy) under
# which a Numatopology carries the kubelet's reservedSystemCPUs exactly, as a cpuset.
RESERVED_CPUS_POLICY = "ReservedSystemCPUs"


@attrs.frozen(slots=True)
class KubeletPolicies:
    cpu_manager_policy: CpuManagerPolicy = CpuManagerPolicy.NONE
    cpu_manager_options: dict[str, str] = attrs.field(factory=dict)
    topology_manager_policy: TopologyPolicy = TopologyPolicy.NONE
    topology_manager_scope: TopologyScope = TopologyScope.CONTAINER
    # Checked by the converters with check_topology_manager_options; the properties below read
    # them as the kubelet does and fall back to its defaults for values it would refuse.
    topology_manager_options: dict[str, str] = attrs.field(factory=dict)
    memory_manager_policy: str = "None"

    @property
    def max_allowable_numa_nodes(self) -> int:
        raw = self.topology_manager_options.get(MAX_ALLOWABLE_NUMA_NODES)
        if raw is None:
            return DEFAULT_MAX_ALLOWABLE_NUMA_NODES
        try:
            value = parse_go_int(raw)
        except KubeletOptionError:
            return DEFAULT_MAX_ALLOWABLE_NUMA_NODES
        return max(value, DEFAULT_MAX_ALLOWABLE_NUMA_NODES)

    @property
    def prefer_closest_numa_nodes(self) -> bool:
        raw = self.topology_manager_options.get(PREFER_CLOSEST_NUMA_NODES)
        if raw is None:
            return False
        try:
            return parse_go_bool(raw)
        except KubeletOptionError:
            return False


@attrs.frozen(slots=True)
class CpuInfo:
    cpu: int
    core: int
    socket: int
    numa: int
    # Last-level (uncore) cache group; defaults to the socket when the source does not say.
    l3: int


class PcieDistance(enum.IntEnum):
    """Path between two PCI devices, nearest first, as `nvidia-smi topo -m` names it."""

    PIX = 1  # at most one PCIe bridge
    PXB = 2  # several PCIe bridges, no host bridge
    PHB = 3  # through a PCIe host bridge (the CPU)
    NODE = 4  # between host bridges within one NUMA node
    SYS = 5  # across NUMA nodes (SMP interconnect)


@attrs.frozen(slots=True)
class DeviceLink:
    """How two devices talk: NVLink count, NVSwitch fabric, and the PCIe path."""

    nvlinks: int = 0
    nvswitch: bool = False
    pcie: PcieDistance | None = None


@attrs.frozen(slots=True)
class DeviceInfo:
    id: str
    numa: int | None
    pci_bus_id: str | None = None
    pci_switch: str | None = None
    model: str | None = None
    healthy: bool = True


DeviceKey = tuple[str, str]  # (resource name, device id)


def derived_pcie(first: DeviceInfo, second: DeviceInfo) -> PcieDistance | None:
    """The PCIe path of two devices known only from their switch and NUMA node: the same switch is
    PIX, the same NUMA node NODE, different NUMA nodes SYS; None when a NUMA node is unknown."""
    if first.pci_switch is not None and first.pci_switch == second.pci_switch:
        return PcieDistance.PIX
    if first.numa is None or second.numa is None:
        return None
    return PcieDistance.NODE if first.numa == second.numa else PcieDistance.SYS


@attrs.frozen(slots=True)
class DeviceGroup:
    """The devices of one resource name on a node, plus allowed partitions."""

    resource: str
    devices: tuple[DeviceInfo, ...]
    # Vendor-mandated sets (e.g. fabric-manager partitions); empty means any subset is allowed.
    partitions: tuple[frozenset[str], ...] = ()

    @cached_property
    def by_id(self) -> dict[str, DeviceInfo]:
        return {device.id: device for device in self.devices}


@attrs.frozen(slots=True)
class NumaTopology:
    node_name: str
    numa_ids: tuple[int, ...]
    cpus: tuple[CpuInfo, ...] = ()
    # distances[i][j] as the kernel's SLIT reports (10 = local); empty when unknown.
    distances: dict[int, dict[int, int]] = attrs.field(factory=dict)
    # Allocatable bytes per NUMA node, per resource ("memory", "hugepages-1Gi").
    memory: dict[str, dict[int, int]] = attrs.field(factory=dict)
    devices: dict[str, DeviceGroup] = attrs.field(factory=dict)
    # Links between any two devices (GPU-GPU, GPU-NIC), stored once per unordered pair.
    links: dict[tuple[DeviceKey, DeviceKey], DeviceLink] = attrs.field(factory=dict)
    reserved_cpus: IdSet = attrs.field(factory=IdSet)
    policies: KubeletPolicies = attrs.field(factory=KubeletPolicies)
    # False when the source gives counts per NUMA node but not ids (NodeResourceTopology): CPU and
    # device ids are then placeholders, good for admission and scoring but not for the binding.
    cpu_ids_known: bool = True
    # What the source says is free right now: Volcano's numares.<r>.allocatable (free ids, as
    # Volcano's resource-exporter writes it) or a NodeResourceTopology zone's `available`. None /
    # a resource absent from the dict: the source makes no such statement. An id outside a stated
    # set is held by someone, perhaps a pod we do not know (docs/topology.md, the reading rule).
    available_cpus: IdSet | None = None
    available_devices: dict[str, frozenset[str]] = attrs.field(factory=dict)
    # NodeResourceTopology's nodeTopologyPodsFingerprint attribute: the set of pods the published
    # availability already reflects (k8stopologyawareschedwg/podfingerprint); None when absent.
    pods_fingerprint: str | None = None

    @cached_property
    def cpu_info(self) -> dict[int, CpuInfo]:
        return {info.cpu: info for info in self.cpus}

    @cached_property
    def all_cpus(self) -> IdSet:
        return IdSet([info.cpu for info in self.cpus])

    @cached_property
    def cpu_rows(self) -> tuple[tuple[int, int, int, int, int], ...]:
        """The CPU rows as plain (cpu, core, socket, numa, l3) tuples, built once per topology: equal
        exactly when the rows are, and hashed and compared without a Python call per row, so keys
        holding them (topology_shape_key, the CPU provider's tables) are cheap on large machines."""
        return tuple((info.cpu, info.core, info.socket, info.numa, info.l3) for info in self.cpus)

    @cached_property
    def allocatable_cpus(self) -> IdSet:
        """CPUs the static CPU manager may hand out exclusively."""
        return self.all_cpus - self.reserved_cpus

    @cached_property
    def cpus_by_numa(self) -> dict[int, IdSet]:
        grouped: dict[int, list[int]] = {numa: [] for numa in self.numa_ids}
        for info in self.cpus:
            grouped.setdefault(info.numa, []).append(info.cpu)
        return {numa: IdSet(cpus) for numa, cpus in grouped.items()}

    @cached_property
    def all_numa(self) -> NumaMask:
        return NumaMask.from_ids(self.numa_ids)

    def cpus_in(self, mask: NumaMask) -> IdSet:
        result = IdSet()
        for numa in mask.ids():
            result = result | self.cpus_by_numa.get(numa, IdSet())
        return result

    def link(self, first: DeviceKey, second: DeviceKey) -> DeviceLink | None:
        key = (first, second) if first <= second else (second, first)
        return self.links.get(key)

    def distance(self, first: int, second: int) -> int:
        row = self.distances.get(first)
        if row is None or second not in row:
            return 10 if first == second else 20
        return row[second]


def link_key(first: DeviceKey, second: DeviceKey) -> tuple[DeviceKey, DeviceKey]:
    """The key under which NumaTopology.links stores an unordered pair."""
    return (first, second) if first <= second else (second, first)


def policies_content_key(policies: KubeletPolicies) -> tuple[object, ...]:
    """KubeletPolicies as a hashable value (its option dicts as items in their order)."""
    return (
        policies.cpu_manager_policy,
        tuple(policies.cpu_manager_options.items()),
        policies.topology_manager_policy,
        policies.topology_manager_scope,
        tuple(policies.topology_manager_options.items()),
        policies.memory_manager_policy,
    )


def topology_content_key(topology: NumaTopology) -> tuple[tuple[object, ...], tuple[object, ...]]:
    """Every field of the topology but the node's name, as a hashable value: two topologies with
    equal keys are read alike by everything that does not print the node's name.

    Mappings become tuples of their items in their order, since readers iterate them and an order
    that differs may change what comes first (two topologies equal as dicts but in another order
    get different keys, which only keeps them from sharing). Sets stay sets: they are only asked
    for membership. The parts are the topology's own immutable objects (the CPU rows, device
    groups, id sets), so the key is built without copying them; hash it once and keep the hash
    (TopologyFingerprint does). A field added to NumaTopology must be added to one of the two
    parts: the machine and its kubelet (topology_shape_key), which nodes of one shape share and
    which rarely changes, and what the source says is free (topology_availability_key), which
    changes with every update of the object.
    """
    return (topology_shape_key(topology), topology_availability_key(topology))


def topology_shape_key(topology: NumaTopology) -> tuple[object, ...]:
    """The machine and its kubelet: every field but the node's name and the availability."""
    return (
        topology.numa_ids,
        topology.cpu_rows,
        tuple((numa, tuple(row.items())) for numa, row in topology.distances.items()),
        tuple((resource, tuple(per_numa.items())) for resource, per_numa in topology.memory.items()),
        tuple(topology.devices.items()),
        tuple(topology.links.items()),
        topology.reserved_cpus,
        policies_content_key(topology.policies),
        topology.cpu_ids_known,
    )


def topology_availability_key(topology: NumaTopology) -> tuple[object, ...]:
    """What the source says is free and which pods that reflects."""
    return (topology.available_cpus, tuple(topology.available_devices.items()), topology.pods_fingerprint)


# The views NumaTopology computes from its machine parts alone (its CPU rows, NUMA ids and reserved
# CPUs): equal parts give equal views, so a topology sharing another's parts shares these too.
_MACHINE_VIEWS = ("cpu_info", "all_cpus", "cpu_rows", "allocatable_cpus", "cpus_by_numa", "all_numa")


def with_machine_of(topology: NumaTopology, like: NumaTopology) -> NumaTopology:
    """topology with the machine parts of `like`, a topology of equal topology_shape_key: the same
    objects instead of equal copies, and like's views of them (cpu_rows, cpus_by_numa, ...)
    instead of computing them again. Its own name, policies and availability are kept.

    Nodes of one machine shape, and each new topology object of one node, then hold one copy of
    the machine: everything keyed or compared by those parts finds them identical, and nothing
    derived from them is computed per node."""
    shared = attrs.evolve(
        topology,
        numa_ids=like.numa_ids,
        cpus=like.cpus,
        distances=like.distances,
        memory=like.memory,
        devices=like.devices,
        links=like.links,
        reserved_cpus=like.reserved_cpus,
    )
    for view in _MACHINE_VIEWS:
        # A frozen class: the cached views are set as the class's own cached_property would.
        object.__setattr__(shared, view, getattr(like, view))
    return shared
