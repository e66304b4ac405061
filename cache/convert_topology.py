"""Topology objects to NumaTopology: Volcano's Numatopology (nodeinfo.volcano.sh/v1alpha1) and
NodeResourceTopology (topology.node.k8s.io/v1alpha1 and v1alpha2).

Every function here returns a value or raises ConversionError naming the object and the field;
nothing else escapes, whatever JSON the object holds (docs/topology.md has the full table).

Numatopology, as Volcano's API declares it (volcano.sh/apis pkg/apis/nodeinfo/v1alpha1):
  spec.policies        map[string]string: CPUManagerPolicy, TopologyManagerPolicy (Volcano's keys);
                       TopologyManagerScope, TopologyManagerPolicyOptions "k=v,k=v",
                       CPUManagerPolicyOptions, MemoryManagerPolicy, ReservedSystemCPUs (ours)
  spec.resReserved     map[string]string of quantities; "cpu" gives the reserved CPU count
  spec.numares         {"<resource>": {"allocatable": "<free ids>", "capacity": n}}: the FREE ids,
                       as Volcano's resource-exporter writes them (cpuset for cpu, ids for devices)
  spec.cpuDetail       {"<cpu>": {"numa", "socket", "core"}} (omitempty: 0 is left out), "l3" ours
  spec.podAllocations  [{uid, name, namespace, containerAllocations: [{name, allocations:
                       {"cpu": "<cpuset>", "<resource>": "<quantity>"}}]}]
Not in Volcano's schema (pruned where Volcano's CRD is installed), still read when present:
  spec.gpuDetail, spec.MemoryDetail, spec.numaDistances, and the legacy map form of podAllocations.
Annotations (survive pruning): numasched.io/device-topology (devices, links, partitions),
numasched.io/pod-allocations (device ids per pod and container) and numasched.io/numa-detail.

NodeResourceTopology: topologyPolicies, the v1alpha2 attributes (policy, scope, options, pods
fingerprint), zones of type Node with per-zone capacity/allocatable/available and costs; on
koordlet's objects, koordinator's CPU annotations (cache/convert_topology_koordlet.py).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import Any, TypeVar

import attrs

# The two annotation names are imported from here by tests/test_topo_read_fuzz.py and
# tests/test_topo_read_numatopology.py; their home is numasched.api.
from numasched.api.allocation import (
    POD_ALLOCATIONS_ANNOTATION as POD_ALLOCATIONS_ANNOTATION,
)
from numasched.api.allocation import (
    ContainerAllocation,
    PodAllocation,
    PodAllocationsError,
    ReportedAllocations,
    merge_pod_allocations,
    pod_allocations_from_mapping,
)
from numasched.api.device_topology import (
    DEVICE_TOPOLOGY_ANNOTATION as DEVICE_TOPOLOGY_ANNOTATION,
)
from numasched.api.device_topology import DeviceTopologyError, device_topology_from_document, parse_device_topology
from numasched.api.idset import IdSet, IdSetError
from numasched.api.numa_detail import NUMA_DETAIL_ANNOTATION, apply_numa_detail, parse_numa_detail
from numasched.api.numamask import MAX_NUMA_ID
from numasched.api.pod_fingerprint import ATTRIBUTE as NRT_PODS_FINGERPRINT
from numasched.api.quantity import QuantityError, parse_quantity, quoted
from numasched.api.resource import GPU_RESOURCE, is_memory_resource
from numasched.api.topology import (
    MAX_ALLOWABLE_NUMA_NODES,
    MAX_CPU_ID,
    MAX_DEVICES_PER_RESOURCE,
    RESERVED_CPUS_POLICY,
    CpuInfo,
    CpuManagerPolicy,
    DeviceGroup,
    DeviceInfo,
    DeviceKey,
    DeviceLink,
    KubeletOptionError,
    KubeletPolicies,
    NumaTopology,
    TopologyPolicy,
    TopologyScope,
    check_topology_manager_options,
)
from numasched.cache.convert_pod import ConversionError, metadata_of
from numasched.cache.convert_topology_koordlet import (
    KoordletAnnotationError,
    KoordletCpuState,
    parse_koordlet_cpu_state,
)
from numasched.plugins.numaaware.providers.cpu_assignment import CpuAssignmentError, take_packed
from numasched.plugins.numaaware.providers.cpu_layout import CpuLayout, CpuTopologyError

MAX_NUMA_NODES = MAX_NUMA_ID + 1
# Socket, core and cache ids are labels, not sizes; bounded only to keep them machine integers.
MAX_LABEL_ID = (1 << 32) - 1
# Largest SLIT distance the kernel reports is 255; NRT costs are int64 but mean the same.
MAX_DISTANCE = 1 << 16

NUMATOPOLOGY = "Numatopology"
NODE_RESOURCE_TOPOLOGY = "NodeResourceTopology"
NRT_API_VERSIONS = ("topology.node.k8s.io/v1alpha1", "topology.node.k8s.io/v1alpha2")

# NodeResourceTopology topologyPolicies values (v1alpha1 and v1alpha2 declare the same constants);
# the plain forms carry no scope and mean the kubelet's default scope, container.
NRT_POLICIES: Mapping[str, tuple[TopologyPolicy, TopologyScope]] = {
    "None": (TopologyPolicy.NONE, TopologyScope.CONTAINER),
    "BestEffort": (TopologyPolicy.BEST_EFFORT, TopologyScope.CONTAINER),
    "BestEffortContainerLevel": (TopologyPolicy.BEST_EFFORT, TopologyScope.CONTAINER),
    "BestEffortPodLevel": (TopologyPolicy.BEST_EFFORT, TopologyScope.POD),
    "Restricted": (TopologyPolicy.RESTRICTED, TopologyScope.CONTAINER),
    "RestrictedContainerLevel": (TopologyPolicy.RESTRICTED, TopologyScope.CONTAINER),
    "RestrictedPodLevel": (TopologyPolicy.RESTRICTED, TopologyScope.POD),
    "SingleNUMANode": (TopologyPolicy.SINGLE_NUMA_NODE, TopologyScope.CONTAINER),
    "SingleNUMANodeContainerLevel": (TopologyPolicy.SINGLE_NUMA_NODE, TopologyScope.CONTAINER),
    "SingleNUMANodePodLevel": (TopologyPolicy.SINGLE_NUMA_NODE, TopologyScope.POD),
}
# v1alpha2 top-level attributes (names as scheduler-plugins' nodeconfig and NFD write them).
NRT_POLICY_ATTRIBUTE = "topologyManagerPolicy"
NRT_SCOPE_ATTRIBUTE = "topologyManagerScope"
NRT_MAX_NUMA_NODES_ATTRIBUTE = "topologyManagerMaxNUMANodes"
NRT_OPTIONS_ATTRIBUTE = "topologyManagerPolicyOptions"
NRT_OPTION_PREFIX = "topologyManagerOption"
NRT_CPU_MANAGER_ATTRIBUTE = "cpuManagerPolicy"

# Resource names in numares / NRT zones that are not devices.
_NOT_DEVICES = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})
_DIGITS = re.compile(r"[0-9]{1,20}")
_DEVICE_RANGE = re.compile(r"([0-9]{1,20})-([0-9]{1,20})")
_QUANTITY_EXPONENT = re.compile(r"[eE]([+-]?[0-9]+)$")
_MAX_QUANTITY_TEXT = 64


def _fail(name: str, message: str) -> ConversionError:
    return ConversionError(NUMATOPOLOGY, name, message)


def _nrt_fail(name: str, message: str) -> ConversionError:
    return ConversionError(NODE_RESOURCE_TOPOLOGY, name, message)


def _is_device(resource: str) -> bool:
    return resource not in _NOT_DEVICES and not is_memory_resource(resource)


# -- small typed readers ----------------------------------------------------------------------------


def _object(value: Any, fail: Callable[[str], ConversionError], field: str) -> Mapping[str, Any]:
    """An optional object: None is empty, anything but a JSON object is an error."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise fail(f"{field}: expected an object, got {type(value).__name__}")
    return value


def _string(value: Any, fail: Callable[[str], ConversionError], field: str) -> str:
    if not isinstance(value, str):
        raise fail(f"{field}: expected a string, got {type(value).__name__}")
    return value


def _integer(value: Any, fail: Callable[[str], ConversionError], field: str, limit: int) -> int:
    """A JSON integer in 0..limit (booleans and floats are not integers)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise fail(f"{field}: expected an integer, got {quoted(value)}")
    if value < 0:
        raise fail(f"{field}: negative value {value}")
    if value > limit:
        raise fail(f"{field}: {value} is too large (at most {limit})")
    return value


def _id_key(key: Any, fail: Callable[[str], ConversionError], field: str, limit: int) -> int:
    """A map key that is a decimal id ("12"): ASCII digits only, at most limit."""
    if not isinstance(key, str) or not _DIGITS.fullmatch(key):
        raise fail(f"{field}: key {quoted(key)} is not a decimal id")
    value = int(key)
    if value > limit:
        raise fail(f"{field}: id {value} is too large (at most {limit})")
    return value


def _quantity(value: Any, fail: Callable[[str], ConversionError], field: str) -> Fraction:
    """A Kubernetes quantity, refused before parsing when too long or of absurd magnitude."""
    if isinstance(value, str):
        exponent = _QUANTITY_EXPONENT.search(value.strip())
        if len(value) > _MAX_QUANTITY_TEXT or (exponent and abs(int(exponent.group(1))) > 30):
            raise fail(f"{field}: quantity {quoted(value)} is out of range")
    elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > 1 << 63:
        raise fail(f"{field}: quantity {quoted(value)} is out of range")
    try:
        return parse_quantity(value)
    except QuantityError as error:
        raise fail(f"{field}: {error}") from None
    except (ValueError, OverflowError):
        raise fail(f"{field}: quantity {quoted(value)} is out of range") from None


def _count(value: Any, fail: Callable[[str], ConversionError], field: str, limit: int) -> int:
    """A quantity that counts whole things (CPUs, devices): non-negative, at most limit, rounded down
    (a fraction of a CPU cannot be held exclusively)."""
    quantity = _quantity(value, fail, field)
    if quantity < 0:
        raise fail(f"{field}: negative quantity {quoted(value)}")
    whole = math.floor(quantity)
    if whole > limit:
        raise fail(f"{field}: {whole} is too many (at most {limit})")
    return whole


def _bytes(value: Any, fail: Callable[[str], ConversionError], field: str) -> int:
    quantity = _quantity(value, fail, field)
    if quantity < 0:
        raise fail(f"{field}: negative quantity {quoted(value)}")
    return math.ceil(quantity)


def _cpuset(text: Any, fail: Callable[[str], ConversionError], field: str, known: IdSet) -> IdSet:
    """A cpuset string whose CPUs all exist in the topology."""
    if not isinstance(text, str):
        raise fail(f"{field}: expected a cpuset string, got {quoted(text)}")
    try:
        cpus = IdSet.parse(text, max_id=MAX_CPU_ID)
    except IdSetError as error:
        raise fail(f"{field}: {error}") from None
    unknown = cpus - known
    if unknown:
        raise fail(f"{field}: CPUs {unknown.format()} are not in the node's topology")
    return cpus


# -- kubelet policies -------------------------------------------------------------------------------


def _options(text: Any, fail: Callable[[str], ConversionError], field: str) -> dict[str, str]:
    """ "k=v,k2=v2" (the kubelet's flag form) or a string map into a dict; a bare key has value ""."""
    if isinstance(text, Mapping):
        options = {}
        for key, value in text.items():
            options[_string(key, fail, f"{field} key")] = _string(value, fail, f"{field}[{quoted(key)}]")
        return options
    result: dict[str, str] = {}
    for item in _string(text if text is not None else "", fail, field).split(","):
        key, _, value = item.partition("=")
        if key.strip():
            result[key.strip()] = value.strip()
    return result


def _topology_options(text: Any, fail: Callable[[str], ConversionError], field: str) -> dict[str, str]:
    options = _options(text, fail, field)
    try:
        check_topology_manager_options(options)
    except KubeletOptionError as error:
        raise fail(f"{field}: {error}") from None
    return options


_PolicyEnum = TypeVar("_PolicyEnum", TopologyPolicy, TopologyScope, CpuManagerPolicy)


def _enum_value(
    enum_type: type[_PolicyEnum], raw: Any, default: _PolicyEnum, fail: Callable[[str], ConversionError], field: str
) -> _PolicyEnum:
    """The kubelet's value for a policy (exact spelling; "" is the kubelet's default)."""
    if raw is None or raw == "":
        return default
    if isinstance(raw, str):
        for member in enum_type:
            if raw == member.value:
                return member
    valid = ", ".join(member.value for member in enum_type)
    raise fail(f"{field}: unknown value {quoted(raw)} (valid: {valid})")


def policies_from_map(raw: Mapping[str, Any], name: str) -> KubeletPolicies:
    """spec.policies of a Numatopology into KubeletPolicies; ConversionError names a bad key."""

    def fail(message: str) -> ConversionError:
        return _fail(name, message)

    def field(key: str) -> str:
        return f"spec.policies.{key}"

    # Volcano's resource-exporter copies the kubelet's config verbatim; CPUManagerPolicy is
    # "static"/"none" there, though a hand-written object may capitalise it: accept any case for
    # these two names only (no other spelling can mean anything else).
    cpu_raw = raw.get("CPUManagerPolicy")
    memory_policy = raw.get("MemoryManagerPolicy")
    return KubeletPolicies(
        cpu_manager_policy=_enum_value(
            CpuManagerPolicy,
            cpu_raw.lower() if isinstance(cpu_raw, str) else cpu_raw,
            CpuManagerPolicy.NONE,
            fail,
            field("CPUManagerPolicy"),
        ),
        cpu_manager_options=_options(raw.get("CPUManagerPolicyOptions"), fail, field("CPUManagerPolicyOptions")),
        topology_manager_policy=_enum_value(
            TopologyPolicy, raw.get("TopologyManagerPolicy"), TopologyPolicy.NONE, fail, field("TopologyManagerPolicy")
        ),
        topology_manager_scope=_enum_value(
            TopologyScope, raw.get("TopologyManagerScope"), TopologyScope.CONTAINER, fail, field("TopologyManagerScope")
        ),
        topology_manager_options=_topology_options(
            raw.get("TopologyManagerPolicyOptions"), fail, field("TopologyManagerPolicyOptions")
        ),
        memory_manager_policy=_string(memory_policy, fail, field("MemoryManagerPolicy")) or "None"
        if memory_policy is not None
        else "None",
    )


# -- Numatopology -----------------------------------------------------------------------------------


def _cpus(spec: Mapping[str, Any], name: str) -> tuple[CpuInfo, ...]:
    def fail(message: str) -> ConversionError:
        return _fail(name, message)

    detail = _object(spec.get("cpuDetail"), fail, "spec.cpuDetail")
    if not detail:
        raise fail("spec.cpuDetail is missing or empty")
    # Volcano's exporter does not report the L3 group; without it, the socket stands in.
    has_l3 = any(isinstance(entry, Mapping) and "l3" in entry for entry in detail.values())
    cpus: dict[int, CpuInfo] = {}
    for cpu_text, entry in detail.items():
        cpu = _id_key(cpu_text, fail, "spec.cpuDetail", MAX_CPU_ID)
        field = f"spec.cpuDetail[{cpu_text}]"
        if cpu in cpus:
            raise fail(f"{field}: CPU {cpu} is listed twice")
        if not isinstance(entry, Mapping):
            raise fail(f"{field}: expected an object")
        socket = _integer(entry.get("socket", 0), fail, f"{field}.socket", MAX_LABEL_ID)
        cpus[cpu] = CpuInfo(
            cpu=cpu,
            core=_integer(entry.get("core", 0), fail, f"{field}.core", MAX_LABEL_ID),
            socket=socket,
            numa=_integer(entry.get("numa", 0), fail, f"{field}.numa", MAX_NUMA_ID),
            l3=_integer(entry.get("l3", 0), fail, f"{field}.l3", MAX_LABEL_ID) if has_l3 else socket,
        )
    return tuple(cpus[cpu] for cpu in sorted(cpus))


def _numa_keyed(raw: Mapping[str, Any], fail: Callable[[str], ConversionError], field: str) -> dict[int, Any]:
    return {_id_key(key, fail, field, MAX_NUMA_ID): value for key, value in raw.items()}


def _distances(spec: Mapping[str, Any], name: str, numa_ids: set[int]) -> dict[int, dict[int, int]]:
    def fail(message: str) -> ConversionError:
        return _fail(name, message)

    raw = _object(spec.get("numaDistances"), fail, "spec.numaDistances")
    result: dict[int, dict[int, int]] = {}
    for row_id, row in _numa_keyed(raw, fail, "spec.numaDistances").items():
        field = f"spec.numaDistances[{row_id}]"
        if row_id not in numa_ids:
            raise fail(f"{field}: unknown NUMA node {row_id}")
        columns = _numa_keyed(_object(row, fail, field), fail, field)
        for column_id, value in columns.items():
            if column_id not in numa_ids:
                raise fail(f"{field}[{column_id}]: unknown NUMA node {column_id}")
            result.setdefault(row_id, {})[column_id] = _integer(value, fail, f"{field}[{column_id}]", MAX_DISTANCE)
    return result


def _memory_detail(spec: Mapping[str, Any], name: str) -> dict[str, dict[int, int]]:
    def fail(message: str) -> ConversionError:
        return _fail(name, message)

    raw_value = spec.get("MemoryDetail")
    if raw_value is None:
        raw_value = spec.get("memoryDetail")
    raw = _object(raw_value, fail, "spec.MemoryDetail")
    result: dict[str, dict[int, int]] = {}
    for numa, entry in _numa_keyed(raw, fail, "spec.MemoryDetail").items():
        field = f"spec.MemoryDetail[{numa}]"
        memory_map = _object(_object(entry, fail, field).get("memoryMap"), fail, f"{field}.memoryMap")
        for resource, table in memory_map.items():
            here = f"{field}.memoryMap[{quoted(resource)}]"
            values = _object(table, fail, here)
            value = values.get("allocatable", values.get("total", 0))
            result.setdefault(str(resource), {})[numa] = _integer(value, fail, f"{here}.allocatable", 1 << 62)
    return result


def _gpu_detail(spec: Mapping[str, Any], name: str) -> tuple[DeviceInfo, ...] | None:
    def fail(message: str) -> ConversionError:
        return _fail(name, message)

    if spec.get("gpuDetail") is None:
        return None
    raw = _object(spec.get("gpuDetail"), fail, "spec.gpuDetail")
    if len(raw) > MAX_DEVICES_PER_RESOURCE:
        raise fail(f"spec.gpuDetail: {len(raw)} GPUs (at most {MAX_DEVICES_PER_RESOURCE})")
    gpus = []
    for gpu_id, entry in raw.items():
        field = f"spec.gpuDetail[{quoted(gpu_id)}]"
        if not isinstance(gpu_id, str) or not gpu_id:
            raise fail(f"{field}: GPU ids must be non-empty strings")
        numa = _integer(_object(entry, fail, field).get("numa", 0), fail, f"{field}.numa", MAX_NUMA_ID)
        gpus.append(DeviceInfo(id=gpu_id, numa=numa))
    gpus.sort(key=lambda device: (len(device.id), device.id))
    return tuple(gpus)


def _numares(spec: Mapping[str, Any], name: str) -> dict[str, tuple[str, int | None]]:
    """numares as resource -> (allocatable text, capacity or None when absent).

    A listed resource without allocatable has no free ids: Volcano's Go type drops an empty
    string (omitempty), so "allocatable" is absent exactly when nothing is free.
    """

    def fail(message: str) -> ConversionError:
        return _fail(name, message)

    raw = _object(spec.get("numares"), fail, "spec.numares")
    result: dict[str, tuple[str, int | None]] = {}
    for resource, entry in raw.items():
        field = f"spec.numares[{quoted(resource)}]"
        if not isinstance(resource, str) or not resource:
            raise fail(f"{field}: resource names must be non-empty strings")
        info = _object(entry, fail, field)
        allocatable = info.get("allocatable", "")
        if isinstance(allocatable, int) and not isinstance(allocatable, bool):
            allocatable = str(allocatable)  # YAML reads `allocatable: 3` as a number
        text = _string(allocatable if allocatable is not None else "", fail, f"{field}.allocatable")
        capacity = info.get("capacity")
        limit = MAX_CPU_ID + 1 if resource == "cpu" else MAX_DEVICES_PER_RESOURCE
        result[resource] = (text, None if capacity is None else _integer(capacity, fail, f"{field}.capacity", limit))
    return result


def _device_list(
    text: str, fail: Callable[[str], ConversionError], field: str, known: Mapping[str, DeviceInfo] | None = None
) -> list[str]:
    """A comma list of device ids, numeric ranges ("0-2,7", as Volcano's cpuset-style lists write
    GPU indices) expanded; an item that is itself a known id (a UUID has dashes) stays whole."""
    if not text.strip():
        return []
    items = text.split(",")
    if len(items) > MAX_DEVICES_PER_RESOURCE:
        raise fail(f"{field}: {len(items)} ids (at most {MAX_DEVICES_PER_RESOURCE})")
    ids: list[str] = []
    for raw_item in items:
        item = raw_item.strip()
        if not item:
            raise fail(f"{field}: {quoted(text)} has an empty element")
        span = _DEVICE_RANGE.fullmatch(item)
        if span is None or (known is not None and item in known):
            ids.append(item)
            continue
        low, high = int(span.group(1)), int(span.group(2))
        if high < low or high - low >= MAX_DEVICES_PER_RESOURCE:
            raise fail(f"{field}: bad range {quoted(item)}")
        ids.extend(str(number) for number in range(low, high + 1))
        if len(ids) > MAX_DEVICES_PER_RESOURCE:
            raise fail(f"{field}: more than {MAX_DEVICES_PER_RESOURCE} ids")
    return list(dict.fromkeys(ids))


def _device_ids(text: str, group: DeviceGroup, fail: Callable[[str], ConversionError], field: str) -> frozenset[str]:
    """Free device ids, each one a device of the group."""
    ids = _device_list(text, fail, field, group.by_id)
    missing = [device_id for device_id in ids if device_id not in group.by_id]
    if missing:
        shown = ", ".join(quoted(device_id) for device_id in missing[:8])
        raise fail(f"{field}: {shown} {'is not a device' if len(missing) == 1 else 'are not devices'} of this node")
    return frozenset(ids)


def _unreported_devices(
    resource: str, text: str, capacity: int | None, fail: Callable[[str], ConversionError], field: str
) -> DeviceGroup:
    """A device group for a numares entry no detail describes: its free ids (NUMA unknown) plus
    one placeholder per device the capacity counts beyond them (taken, ids unknown)."""
    free = _device_list(text, fail, field)
    devices = [DeviceInfo(id=device_id, numa=None) for device_id in free]
    taken = max(0, (capacity or 0) - len(free))
    devices.extend(DeviceInfo(id=f"unreported-{index}", numa=None) for index in range(taken))
    return DeviceGroup(resource, tuple(devices))


def _reserved_cpus(
    spec: Mapping[str, Any], name: str, policies_raw: Mapping[str, Any], cpus: tuple[CpuInfo, ...], all_cpus: IdSet
) -> IdSet:
    """The CPUs the static CPU manager keeps for the system.

    Exact when spec.policies.ReservedSystemCPUs (ours) names them; else spec.resReserved.cpu, a
    quantity, rounded up and chosen as the kubelet chooses them (takeByTopology over all CPUs, as
    Volcano's scheduler also does); else none.
    """

    def fail(message: str) -> ConversionError:
        return _fail(name, message)

    exact = policies_raw.get(RESERVED_CPUS_POLICY)
    if exact is not None:
        return _cpuset(exact, fail, f"spec.policies.{RESERVED_CPUS_POLICY}", all_cpus)
    reserved_raw = _object(spec.get("resReserved"), fail, "spec.resReserved")
    for key, value in reserved_raw.items():
        _string(value, fail, f"spec.resReserved[{quoted(key)}]")
    if "cpu" not in reserved_raw:
        return IdSet()
    quantity = _quantity(reserved_raw["cpu"], fail, "spec.resReserved.cpu")
    if quantity < 0:
        raise fail(f"spec.resReserved.cpu: negative quantity {quoted(reserved_raw['cpu'])}")
    count = math.ceil(quantity)
    if count == 0:
        return IdSet()
    if count > len(cpus):
        raise fail(f"spec.resReserved.cpu: {count} CPUs reserved but the node has {len(cpus)}")
    try:
        layout = CpuLayout.from_topology(NumaTopology(node_name=name, numa_ids=(), cpus=cpus))
        return IdSet(take_packed(layout, all_cpus, count, False))
    except (CpuTopologyError, CpuAssignmentError) as error:
        raise fail(f"spec.resReserved.cpu: cannot choose {count} reserved CPUs: {error}") from None


def _annotations(metadata: Mapping[str, Any], fail: Callable[[str], ConversionError]) -> Mapping[str, Any]:
    return _object(metadata.get("annotations"), fail, "metadata.annotations")


def _check_annotated_devices(devices: Mapping[str, DeviceGroup], numa_ids: set[int]) -> None:
    for group in devices.values():
        if len(group.devices) > MAX_DEVICES_PER_RESOURCE:
            raise DeviceTopologyError(
                f"devices[{group.resource}]: {len(group.devices)} devices (at most {MAX_DEVICES_PER_RESOURCE})"
            )
        for device in group.devices:
            if device.numa is not None and device.numa not in numa_ids:
                raise DeviceTopologyError(f"device {group.resource} {device.id}: unknown NUMA node {device.numa}")


def _annotated_devices(
    text: str, name: str, numa_ids: set[int]
) -> tuple[dict[str, DeviceGroup], dict[tuple[DeviceKey, DeviceKey], DeviceLink]]:
    devices, links = parse_device_topology(text, name)
    _check_annotated_devices(devices, numa_ids)
    return devices, links


def _annotated_devices_without_links(text: str, name: str, numa_ids: set[int]) -> dict[str, DeviceGroup] | None:
    """The annotation's devices (and partitions) with its links left out; None when even those
    do not read."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(document, Mapping):
        return None
    try:
        devices, _ = device_topology_from_document({k: v for k, v in document.items() if k != "links"}, name)
        _check_annotated_devices(devices, numa_ids)
    except DeviceTopologyError:
        return None
    return devices


def numatopology_to_topology(obj: Mapping[str, Any], on_warning: Callable[[str], None] | None = None) -> NumaTopology:
    """A Numatopology object to NumaTopology; ConversionError names the field that is wrong.

    A device-topology annotation that does not parse is not fatal: on_warning hears why, and the
    devices come from gpuDetail / numares with their NUMA nodes but no links.
    """
    _, name, metadata = metadata_of(obj, NUMATOPOLOGY)

    def fail(message: str) -> ConversionError:
        return _fail(name, message)

    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise fail("spec is missing")
    cpus = _cpus(spec, name)
    all_cpus = IdSet(info.cpu for info in cpus)
    gpus = _gpu_detail(spec, name)
    memory = _memory_detail(spec, name)
    numa_ids = {info.numa for info in cpus}
    numa_ids.update(gpu.numa for gpu in gpus or () if gpu.numa is not None)
    numa_ids.update(numa for per_numa in memory.values() for numa in per_numa)
    if len(numa_ids) > MAX_NUMA_NODES:
        raise fail(f"{len(numa_ids)} NUMA nodes; at most {MAX_NUMA_NODES} are supported")
    policies_raw = _object(spec.get("policies"), fail, "spec.policies")
    policies = policies_from_map(policies_raw, name)
    numares = _numares(spec, name)

    links: dict[tuple[DeviceKey, DeviceKey], DeviceLink] = {}
    devices: dict[str, DeviceGroup] | None = None
    device_text = _annotations(metadata, fail).get(DEVICE_TOPOLOGY_ANNOTATION)
    if device_text:
        text = _string(device_text, fail, DEVICE_TOPOLOGY_ANNOTATION)
        try:
            devices, links = _annotated_devices(text, name, numa_ids)
        except DeviceTopologyError as error:
            # Links are an optimisation: with the devices alone the node still gets NUMA-exact
            # device choice, so a bad link costs only the link-aware ranking.
            devices = _annotated_devices_without_links(text, name, numa_ids)
            if devices is not None:
                fallback = "its links are ignored and device choice on this node uses NUMA nodes only"
            elif gpus is not None:
                fallback = "devices come from spec.gpuDetail: NUMA nodes only, no links"
            else:
                fallback = "devices come from spec.numares without NUMA nodes: device choice is not NUMA-aware"
            if on_warning is not None:
                on_warning(f"annotation {DEVICE_TOPOLOGY_ANNOTATION}: {error}; {fallback}")
    if devices is None:
        devices = {GPU_RESOURCE: DeviceGroup(GPU_RESOURCE, gpus)} if gpus is not None else {}
    for resource, (text, capacity) in numares.items():
        if _is_device(resource) and resource not in devices:
            field = f"spec.numares[{quoted(resource)}].allocatable"
            devices[resource] = _unreported_devices(resource, text, capacity, fail, field)

    available_cpus: IdSet | None = None
    available_devices: dict[str, frozenset[str]] = {}
    for resource, (text, capacity) in numares.items():
        field = f"spec.numares[{quoted(resource)}]"
        if resource == "cpu":
            if capacity and capacity != len(cpus):
                raise fail(f"{field}.capacity: {capacity} CPUs but cpuDetail lists {len(cpus)}")
            free_cpus = _cpuset(text, fail, f"{field}.allocatable", all_cpus)
            # Without the static CPU manager no CPU is held exclusively, and Volcano's exporter then
            # copies an empty default cpuset from the checkpoint: the field says nothing.
            if policies.cpu_manager_policy is CpuManagerPolicy.STATIC:
                available_cpus = free_cpus
        elif _is_device(resource):
            group = devices[resource]
            if capacity and capacity != len(group.devices):
                raise fail(f"{field}.capacity: {capacity} devices but the node's topology lists {len(group.devices)}")
            available_devices[resource] = _device_ids(text, group, fail, f"{field}.allocatable")

    topology = NumaTopology(
        node_name=name,
        numa_ids=tuple(sorted(numa_ids)),
        cpus=cpus,
        distances=_distances(spec, name, numa_ids),
        memory=memory,
        devices=devices,
        links=links,
        reserved_cpus=_reserved_cpus(spec, name, policies_raw, cpus, all_cpus),
        policies=policies,
        available_cpus=available_cpus,
        available_devices=available_devices,
    )
    detail_text = _annotations(metadata, fail).get(NUMA_DETAIL_ANNOTATION)
    if detail_text:
        try:
            topology = apply_numa_detail(
                topology, parse_numa_detail(_string(detail_text, fail, NUMA_DETAIL_ANNOTATION))
            )
        except (ValueError, RecursionError) as error:
            # Distances, L3 groups and memory per NUMA node refine choices; without them the node
            # keeps what spec says (Volcano's schema has none of them).
            if on_warning is not None:
                on_warning(f"annotation {NUMA_DETAIL_ANNOTATION}: {str(error)[:200]}; its NUMA detail is ignored")
    return topology


# -- what a Numatopology says its pods hold -----------------------------------------------------------


class _ReportBuilder:
    """Collects pods from every part of a Numatopology, keyed by uid and by namespace/name."""

    def __init__(self) -> None:
        self.pods: list[tuple[tuple[str, ...], PodAllocation]] = []
        self.accounted: set[str] = set()

    def add(self, keys: Iterable[str], allocation: PodAllocation) -> None:
        named = tuple(key for key in keys if key)
        self.accounted.update(named)
        self.pods.append((named, allocation))

    def build(self) -> ReportedAllocations:
        """Entries sharing a uid or a namespace/name are one pod (transitively): every key of it
        gets the union of what they all say."""
        parent: dict[str, str] = {}

        def root(key: str) -> str:
            while parent[key] != key:
                parent[key] = parent[parent[key]]
                key = parent[key]
            return key

        for keys, _ in self.pods:
            for key in keys:
                parent.setdefault(key, key)
            for key in keys[1:]:
                parent[root(key)] = root(keys[0])
        combined: dict[str, PodAllocation] = {}
        for keys, allocation in self.pods:
            if keys:
                group = root(keys[0])
                known = combined.get(group)
                combined[group] = allocation if known is None else merge_pod_allocations(known, allocation)
        allocations = {key: combined[root(key)] for key in parent}
        return ReportedAllocations(allocations=allocations, accounted=frozenset(self.accounted))


def _check_known_ids(
    allocation: PodAllocation, topology: NumaTopology | None, fail: Callable[[str], ConversionError], field: str
) -> None:
    if topology is None:
        return
    for container in allocation.containers:
        unknown = container.cpuset - topology.all_cpus
        if unknown:
            raise fail(f"{field}: container {quoted(container.name)}: CPUs {unknown.format()} are not on this node")
        for resource, ids in container.devices.items():
            group = topology.devices.get(resource)
            missing = [device for device in ids if group is not None and device not in group.by_id]
            if missing:
                raise fail(
                    f"{field}: container {quoted(container.name)}: {resource} {', '.join(missing[:8])} "
                    "are not devices of this node"
                )


def _volcano_pod_allocations(
    raw: list[Any], builder: _ReportBuilder, topology: NumaTopology | None, fail: Callable[[str], ConversionError]
) -> None:
    """Volcano's list: cpuset values become container cpusets; other values are quantities (no ids)."""
    known_cpus = topology.all_cpus if topology is not None else None
    for index, entry in enumerate(raw):
        field = f"spec.podAllocations[{index}]"
        pod = _object(entry, fail, field)
        uid = _string(pod.get("uid", ""), fail, f"{field}.uid")
        pod_name = _string(pod.get("name", ""), fail, f"{field}.name")
        namespace = _string(pod.get("namespace", ""), fail, f"{field}.namespace")
        containers_raw = pod.get("containerAllocations")
        if containers_raw is None:
            containers_raw = []
        if not isinstance(containers_raw, list):
            raise fail(f"{field}.containerAllocations: expected a list")
        containers: dict[str, ContainerAllocation] = {}
        for position, container_raw in enumerate(containers_raw):
            here = f"{field}.containerAllocations[{position}]"
            container = _object(container_raw, fail, here)
            container_name = _string(container.get("name", ""), fail, f"{here}.name")
            cpuset = IdSet()
            for resource, value in _object(container.get("allocations"), fail, f"{here}.allocations").items():
                where = f"{here}.allocations[{quoted(resource)}]"
                if resource == "cpu":
                    cpuset = cpuset | _cpuset(value, fail, where, known_cpus if known_cpus is not None else _ANY_CPU)
                else:
                    _quantity(_string(value, fail, where), fail, where)
            previous = containers.get(container_name)
            if previous is not None:
                cpuset = cpuset | previous.cpuset
            containers[container_name] = ContainerAllocation(name=container_name, cpuset=cpuset)
        keys = (uid, f"{namespace}/{pod_name}" if namespace and pod_name else "")
        builder.add(keys, PodAllocation(tuple(containers.values())))


_ANY_CPU = IdSet(range(MAX_CPU_ID + 1))


def _keyed_pod_allocations(
    raw: Mapping[str, Any],
    builder: _ReportBuilder,
    topology: NumaTopology | None,
    fail: Callable[[str], ConversionError],
    field: str,
) -> None:
    """{"<ns>/<name>": {"uid": ..., "containers": {...}}}: our annotation, and the legacy map form."""
    try:
        for pod in pod_allocations_from_mapping(raw):
            _check_known_ids(pod.allocation, topology, fail, f"{field}[{quoted(pod.key)}]")
            builder.add((pod.uid, pod.key), pod.allocation)
    except PodAllocationsError as error:
        raise fail(f"{field}[{quoted(error.key)}]{error.field}: {error.message}") from None


def pod_allocation_report(
    obj: Mapping[str, Any],
    topology: NumaTopology | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> ReportedAllocations:
    """What a Numatopology says its pods hold: Volcano's spec.podAllocations list (cpusets; other
    resources as quantities without ids) and our numasched.io/pod-allocations annotation (device
    ids). Every pod either lists is accounted for: the object's numares already excludes what it
    holds. With the node's topology, ids it does not have are an error naming the field.
    """
    _, name, metadata = metadata_of(obj, NUMATOPOLOGY)

    def fail(message: str) -> ConversionError:
        return _fail(name, message)

    builder = _ReportBuilder()
    spec = _object(obj.get("spec"), fail, "spec")
    raw = spec.get("podAllocations")
    if isinstance(raw, list):
        _volcano_pod_allocations(raw, builder, topology, fail)
    elif isinstance(raw, Mapping):
        if on_warning is not None:
            on_warning(
                "spec.podAllocations is the old map form (namespace/name -> containers); Volcano's API "
                "declares a list, and an API server with Volcano's CRD drops this: update the exporter"
            )
        _keyed_pod_allocations(raw, builder, topology, fail, "spec.podAllocations")
    elif raw is not None:
        raise fail(f"spec.podAllocations: expected a list, got {type(raw).__name__}")

    text = _annotations(metadata, fail).get(POD_ALLOCATIONS_ANNOTATION)
    if text is not None:
        field = f"metadata.annotations[{POD_ALLOCATIONS_ANNOTATION}]"
        try:
            document = json.loads(_string(text, fail, field))
        except (ValueError, RecursionError) as error:
            raise fail(f"{field}: not JSON: {quoted(str(error), 120)}") from None
        if not isinstance(document, Mapping):
            raise fail(f"{field}: expected a JSON object of namespace/name -> allocation")
        _keyed_pod_allocations(document, builder, topology, fail, field)
    return builder.build()


# -- NodeResourceTopology -----------------------------------------------------------------------------


def _kebab(camel: str) -> str:
    """PreferClosestNumaNodes -> prefer-closest-numa-nodes (scheduler-plugins' attribute naming)."""
    return re.sub(r"(?<!^)(?=[A-Z])", "-", camel).lower()


def _nrt_attributes(value: Any, fail: Callable[[str], ConversionError]) -> dict[str, str]:
    """Top-level attributes; the first of a repeated name wins, as the API's attribute.Get reads."""
    if value is None:
        return {}
    if not isinstance(value, list):
        raise fail(f"attributes: expected a list, got {type(value).__name__}")
    attributes: dict[str, str] = {}
    for index, item in enumerate(value):
        entry = _object(item, fail, f"attributes[{index}]")
        attribute = _string(entry.get("name"), fail, f"attributes[{index}].name")
        text = _string(entry.get("value", ""), fail, f"attributes[{index}].value")
        attributes.setdefault(attribute, text)
    return attributes


def _nrt_policies(
    obj: Mapping[str, Any],
    attributes: Mapping[str, str],
    fail: Callable[[str], ConversionError],
    cpu_default: CpuManagerPolicy,
) -> KubeletPolicies:
    policy, scope = TopologyPolicy.NONE, TopologyScope.CONTAINER
    legacy = obj.get("topologyPolicies")
    if legacy is not None:
        if not isinstance(legacy, list):
            raise fail("topologyPolicies: expected a list of strings")
        for index, value in enumerate(legacy):
            if not isinstance(value, str) or value not in NRT_POLICIES:
                valid = ", ".join(NRT_POLICIES)
                raise fail(f"topologyPolicies[{index}]: unknown policy {quoted(value)} (valid: {valid})")
        if legacy:
            # Publishers write one value; scheduler-plugins reads the first and ignores the rest.
            policy, scope = NRT_POLICIES[legacy[0]]
    # Attributes are the kubelet's own values, verbatim, and win over the deprecated list.
    policy = _enum_value(
        TopologyPolicy, attributes.get(NRT_POLICY_ATTRIBUTE), policy, fail, f"attributes[{NRT_POLICY_ATTRIBUTE}]"
    )
    scope = _enum_value(
        TopologyScope, attributes.get(NRT_SCOPE_ATTRIBUTE), scope, fail, f"attributes[{NRT_SCOPE_ATTRIBUTE}]"
    )
    options: dict[str, str] = {}
    if NRT_OPTIONS_ATTRIBUTE in attributes:
        options.update(_options(attributes[NRT_OPTIONS_ATTRIBUTE], fail, f"attributes[{NRT_OPTIONS_ATTRIBUTE}]"))
    for attribute, text in attributes.items():
        if attribute.startswith(NRT_OPTION_PREFIX) and attribute != NRT_OPTIONS_ATTRIBUTE:
            options[_kebab(attribute[len(NRT_OPTION_PREFIX) :])] = text
    if NRT_MAX_NUMA_NODES_ATTRIBUTE in attributes:
        options.setdefault(MAX_ALLOWABLE_NUMA_NODES, attributes[NRT_MAX_NUMA_NODES_ATTRIBUTE])
    try:
        check_topology_manager_options(options)
    except KubeletOptionError as error:
        raise fail(f"attributes (topology manager options {', '.join(sorted(options))}): {error}") from None
    cpu_policy = _enum_value(
        CpuManagerPolicy,
        attributes.get(NRT_CPU_MANAGER_ATTRIBUTE),
        cpu_default,
        fail,
        f"attributes[{NRT_CPU_MANAGER_ATTRIBUTE}]",
    )
    return KubeletPolicies(
        cpu_manager_policy=cpu_policy,
        topology_manager_policy=policy,
        topology_manager_scope=scope,
        topology_manager_options=options,
    )


def _zone_numa_id(zone_name: str, fail: Callable[[str], ConversionError], field: str) -> int:
    """node-<id> (the API's numanode.NameToID); "numa-node-<id>" as scheduler-plugins' examples name it."""
    digits = zone_name.rsplit("-", 1)[-1] if "-" in zone_name else ""
    if not _DIGITS.fullmatch(digits) or int(digits) > MAX_NUMA_ID:
        raise fail(f"{field}: zone {quoted(zone_name)}: expected a name like node-0 (NUMA ids 0-{MAX_NUMA_ID})")
    return int(digits)


def _koordlet_state(
    metadata: Mapping[str, Any],
    numa_ids: set[int],
    fail: Callable[[str], ConversionError],
    on_warning: Callable[[str], None] | None,
) -> KoordletCpuState | None:
    """koordlet's CPU annotations, read as one unit; one that does not parse is reported and all of
    them are ignored (the zones' counts remain, and pods holding CPUs count as unknown holders)."""
    try:
        return parse_koordlet_cpu_state(_annotations(metadata, fail), numa_ids)
    except KoordletAnnotationError as error:
        if on_warning is not None:
            on_warning(f"annotation {error}; koordlet's CPU state is ignored, the zones' counts are used")
        return None


def nrt_to_topology(obj: Mapping[str, Any], on_warning: Callable[[str], None] | None = None) -> NumaTopology:
    """A NodeResourceTopology (v1alpha1 or v1alpha2) to NumaTopology.

    NRT carries counts per NUMA zone, not CPU or device ids, so the topology gets consecutive
    CPU ids per zone (one thread per core) and device ids "<zone>-<n>" for each zone's
    allocatable; available_cpus / available_devices are the first `available` of them per zone,
    so what is free per NUMA node is what the zone says. The binding leaves cpusets to the kubelet
    (cpu_ids_known False).
    """
    _, name, metadata = metadata_of(obj, NODE_RESOURCE_TOPOLOGY)

    def fail(message: str) -> ConversionError:
        return _nrt_fail(name, message)

    api_version = obj.get("apiVersion")
    if api_version is not None and api_version not in NRT_API_VERSIONS:
        raise fail(f"apiVersion: {quoted(api_version)} is not one of {', '.join(NRT_API_VERSIONS)}")
    attributes = _nrt_attributes(obj.get("attributes"), fail)
    fingerprint = attributes.get(NRT_PODS_FINGERPRINT) or None
    zones = obj.get("zones")
    if not isinstance(zones, list) or not zones:
        raise fail("zones is missing or empty")
    numa_zones: list[tuple[int, str, Mapping[str, Any]]] = []
    zone_ids: dict[str, int] = {}
    for index, zone_raw in enumerate(zones):
        field = f"zones[{index}]"
        zone = _object(zone_raw, fail, field)
        if zone.get("type") != "Node":
            continue  # sockets, cores, caches: not NUMA nodes
        zone_name = _string(zone.get("name"), fail, f"{field}.name")
        numa = _zone_numa_id(zone_name, fail, f"{field}.name")
        if numa in zone_ids.values():
            raise fail(f"{field}.name: NUMA node {numa} appears twice")
        zone_ids[zone_name] = numa
        numa_zones.append((numa, zone_name, zone))
    if not numa_zones:
        raise fail("zones: no zone of type Node (NUMA node)")

    cpus: list[CpuInfo] = []
    available_cpu_ids: list[int] = []
    cpu_stated = False
    memory: dict[str, dict[int, int]] = {}
    device_lists: dict[str, list[DeviceInfo]] = {}
    available_device_ids: dict[str, list[str]] = {}
    devices_stated: set[str] = set()
    distances: dict[int, dict[int, int]] = {}
    for numa, zone_name, zone in numa_zones:
        zone_field = f"zones[{zone_name}]"
        resources = zone.get("resources")
        if resources is None:
            resources = []
        if not isinstance(resources, list):
            raise fail(f"{zone_field}.resources: expected a list")
        seen_resources: set[str] = set()
        for position, resource_raw in enumerate(resources):
            resource = _object(resource_raw, fail, f"{zone_field}.resources[{position}]")
            resource_name = _string(resource.get("name"), fail, f"{zone_field}.resources[{position}].name")
            field = f"{zone_field}.resources[{resource_name}]"
            if resource_name in seen_resources:
                raise fail(f"{field}: listed twice in one zone")
            seen_resources.add(resource_name)
            raw_allocatable = resource.get("allocatable", resource.get("capacity"))
            if is_memory_resource(resource_name):
                memory.setdefault(resource_name, {})[numa] = _bytes(raw_allocatable, fail, f"{field}.allocatable")
                continue
            if resource_name == "cpu":
                allocatable = _count(raw_allocatable, fail, f"{field}.allocatable", MAX_CPU_ID + 1 - len(cpus))
            elif _is_device(resource_name):
                held = len(device_lists.get(resource_name, ()))
                allocatable = _count(raw_allocatable, fail, f"{field}.allocatable", MAX_DEVICES_PER_RESOURCE - held)
            else:
                continue
            # A zone without `available` (older publishers) states nothing: all its ids count.
            stated = "available" in resource
            limit = MAX_CPU_ID + 1 if resource_name == "cpu" else MAX_DEVICES_PER_RESOURCE
            free = (
                min(_count(resource["available"], fail, f"{field}.available", limit), allocatable)
                if stated
                else allocatable
            )
            if resource_name == "cpu":
                first = len(cpus)
                cpus.extend(
                    CpuInfo(cpu=cpu, core=cpu, socket=0, numa=numa, l3=numa)
                    for cpu in range(first, first + allocatable)
                )
                available_cpu_ids.extend(range(first, first + free))
                cpu_stated = cpu_stated or stated
            else:
                zone_devices = [DeviceInfo(id=f"{zone_name}-{index}", numa=numa) for index in range(allocatable)]
                device_lists.setdefault(resource_name, []).extend(zone_devices)
                available_device_ids.setdefault(resource_name, []).extend(device.id for device in zone_devices[:free])
                if stated:
                    devices_stated.add(resource_name)
        costs = zone.get("costs")
        if costs is None:
            costs = []
        if not isinstance(costs, list):
            raise fail(f"{zone_field}.costs: expected a list")
        for position, cost_raw in enumerate(costs):
            cost = _object(cost_raw, fail, f"{zone_field}.costs[{position}]")
            other = _string(cost.get("name"), fail, f"{zone_field}.costs[{position}].name")
            value = _integer(cost.get("value", 0), fail, f"{zone_field}.costs[{position}].value", MAX_DISTANCE)
            if other in zone_ids:
                distances.setdefault(numa, {})[zone_ids[other]] = value
    # NRT publishers report exclusive-capable CPUs per zone only under the static CPU manager.
    policies = _nrt_policies(obj, attributes, fail, CpuManagerPolicy.STATIC if cpus else CpuManagerPolicy.NONE)
    available_cpus = IdSet(available_cpu_ids) if cpu_stated else None
    reserved_cpus = IdSet()
    koordlet = _koordlet_state(metadata, set(zone_ids.values()), fail, on_warning)
    if koordlet is not None:
        # Real CPU ids: they replace the placeholders, and only koordlet's shared pools say which
        # are free (its zones' `available` is every CPU, whatever pods hold).
        cpus = list(koordlet.cpus)
        if koordlet.cpu_manager_policy:
            policies = attrs.evolve(
                policies,
                cpu_manager_policy=CpuManagerPolicy(koordlet.cpu_manager_policy),
                cpu_manager_options=koordlet.cpu_manager_options,
            )
        reserved_cpus = koordlet.reserved_cpus
        available_cpus = koordlet.shared_cpus if policies.cpu_manager_policy is CpuManagerPolicy.STATIC else None
    return NumaTopology(
        node_name=name,
        numa_ids=tuple(sorted(zone_ids.values())),
        cpus=tuple(cpus),
        distances=distances,
        memory=memory,
        devices={resource: DeviceGroup(resource, tuple(devices)) for resource, devices in device_lists.items()},
        policies=policies,
        reserved_cpus=reserved_cpus,
        cpu_ids_known=koordlet is not None,
        available_cpus=available_cpus,
        available_devices={
            resource: frozenset(ids) for resource, ids in available_device_ids.items() if resource in devices_stated
        },
        pods_fingerprint=fingerprint,
    )


def nrt_pod_allocation_report(
    obj: Mapping[str, Any],
    topology: NumaTopology | None = None,
    on_warning: Callable[[str], None] | None = None,
) -> ReportedAllocations:
    """What a NodeResourceTopology says its pods hold: koordlet's node.koordinator.sh/pod-cpu-allocs
    (the kubelet's and Koordinator's exclusive cpusets per pod).

    Its pods are accounted for only where the topology (converted from this object) took koordlet's
    real CPU ids and shared pools, which already leave those cpusets out; otherwise the report is
    empty and pods holding CPUs there count as unknown holders. Other publishers give no per-pod
    report (their pods fingerprint says which pods `available` reflects).
    """
    _, name, metadata = metadata_of(obj, NODE_RESOURCE_TOPOLOGY)

    def fail(message: str) -> ConversionError:
        return _nrt_fail(name, message)

    if topology is None or not topology.cpu_ids_known or topology.available_cpus is None:
        return ReportedAllocations()
    koordlet = _koordlet_state(metadata, set(topology.numa_ids), fail, on_warning)
    if koordlet is None:
        return ReportedAllocations()
    builder = _ReportBuilder()
    for pod in koordlet.pods:
        key = f"{pod.namespace}/{pod.name}" if pod.namespace and pod.name else ""
        builder.add((pod.uid, key), PodAllocation((ContainerAllocation(name="", cpuset=pod.cpus),)))
    return builder.build()
