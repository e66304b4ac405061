"""Topology objects to NumaTopology: Volcano's Numatopology (nodeinfo.volcano.sh/v1alpha1) and
NodeResourceTopology (topology.node.k8s.io/v1alpha2).

Numatopology fields read (Volcano's schema plus additive fields of ours, all optional except
cpuDetail):
  spec.policies        {CPUManagerPolicy, TopologyManagerPolicy, TopologyManagerScope,
                        TopologyManagerPolicyOptions "k=v,k=v", CPUManagerPolicyOptions,
                        MemoryManagerPolicy}
  spec.numares         {"cpu": {"allocatable": "<cpuset>", "capacity": n}, "<device>": {...}}
  spec.cpuDetail       {"<cpu>": {"numa": n, "socket": s, "core": c, "l3": l}}, zero fields omitted
  spec.gpuDetail       {"<gpu id>": {"numa": n}} (nvidia.com/gpu, Volcano PR #5095)
  spec.numaDistances   {"<numa>": {"<numa>": distance}} (ours)
  spec.MemoryDetail    {"<numa>": {"memoryMap": {"memory": {"allocatable": bytes, ...}}}}
  spec.podAllocations  {"<ns>/<pod>": {"uid": "...", "containers": {...}}} (ours)
  metadata.annotations["numasched.io/device-topology"]: devices, links, partitions (docs/topology.md)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from numasched.api.allocation import AllocationError, PodAllocation, allocation_from_mapping
from numasched.api.idset import IdSet, IdSetError
from numasched.api.numamask import MAX_NUMA_ID
from numasched.api.quantity import QuantityError, parse_integer
from numasched.api.topology import (
    CpuInfo,
    CpuManagerPolicy,
    DeviceGroup,
    DeviceInfo,
    DeviceKey,
    DeviceLink,
    KubeletPolicies,
    NumaTopology,
    TopologyPolicy,
    TopologyScope,
)
from numasched.cache.convert_pod import ConversionError, metadata_of
from numasched.cache.device_topology import DeviceTopologyError, parse_device_topology

DEVICE_TOPOLOGY_ANNOTATION = "numasched.io/device-topology"
GPU_RESOURCE = "nvidia.com/gpu"
MAX_NUMA_NODES = MAX_NUMA_ID + 1

# NodeResourceTopology's legacy topologyPolicies values.
_NRT_LEGACY_POLICIES = {
    "SingleNUMANodeContainerLevel": (TopologyPolicy.SINGLE_NUMA_NODE, TopologyScope.CONTAINER),
    "SingleNUMANodePodLevel": (TopologyPolicy.SINGLE_NUMA_NODE, TopologyScope.POD),
    "RestrictedContainerLevel": (TopologyPolicy.RESTRICTED, TopologyScope.CONTAINER),
    "RestrictedPodLevel": (TopologyPolicy.RESTRICTED, TopologyScope.POD),
    "BestEffortContainerLevel": (TopologyPolicy.BEST_EFFORT, TopologyScope.CONTAINER),
    "BestEffortPodLevel": (TopologyPolicy.BEST_EFFORT, TopologyScope.POD),
    "None": (TopologyPolicy.NONE, TopologyScope.CONTAINER),
}


def _fail(name: str, message: str) -> ConversionError:
    return ConversionError("Numatopology", name, message)


def _options(text: Any) -> dict[str, str]:
    """ "k=v,k2=v2" (or a mapping) into a dict."""
    if isinstance(text, Mapping):
        return {str(k): str(v) for k, v in text.items()}
    result: dict[str, str] = {}
    for item in str(text or "").split(","):
        key, _, value = item.partition("=")
        if key.strip():
            result[key.strip()] = value.strip() or "true"
    return result


_PolicyEnum = TypeVar("_PolicyEnum", TopologyPolicy, TopologyScope, CpuManagerPolicy)


def _enum_value(enum_type: type[_PolicyEnum], raw: Any, default: _PolicyEnum, name: str, field: str) -> _PolicyEnum:
    if raw in (None, ""):
        return default
    text = str(raw).strip()
    for member in enum_type:
        if text.lower() == member.value:
            return member
    valid = ", ".join(member.value for member in enum_type)
    raise _fail(name, f"{field}: unknown value {text!r} (valid: {valid})")


def policies_from_map(raw: Mapping[str, Any], name: str) -> KubeletPolicies:
    return KubeletPolicies(
        cpu_manager_policy=_enum_value(
            CpuManagerPolicy, raw.get("CPUManagerPolicy"), CpuManagerPolicy.NONE, name, "spec.policies.CPUManagerPolicy"
        ),
        cpu_manager_options=_options(raw.get("CPUManagerPolicyOptions")),
        topology_manager_policy=_enum_value(
            TopologyPolicy,
            raw.get("TopologyManagerPolicy"),
            TopologyPolicy.NONE,
            name,
            "spec.policies.TopologyManagerPolicy",
        ),
        topology_manager_scope=_enum_value(
            TopologyScope,
            raw.get("TopologyManagerScope"),
            TopologyScope.CONTAINER,
            name,
            "spec.policies.TopologyManagerScope",
        ),
        topology_manager_options=_options(raw.get("TopologyManagerPolicyOptions")),
        memory_manager_policy=str(raw.get("MemoryManagerPolicy") or "None"),
    )


def _int_field(entry: Mapping[str, Any], key: str, name: str, field: str) -> int:
    value = entry.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(name, f"{field}.{key}: expected an integer, got {value!r}")
    if value < 0:
        raise _fail(name, f"{field}.{key}: negative value {value}")
    return value


def _cpus(spec: Mapping[str, Any], name: str) -> tuple[CpuInfo, ...]:
    detail = spec.get("cpuDetail")
    if not isinstance(detail, Mapping) or not detail:
        raise _fail(name, "spec.cpuDetail is missing or empty")
    # Volcano's exporter does not report the L3 group; without it, the socket stands in.
    has_l3 = any(isinstance(entry, Mapping) and "l3" in entry for entry in detail.values())
    cpus = []
    for cpu_text, entry in detail.items():
        field = f"spec.cpuDetail[{cpu_text}]"
        if not str(cpu_text).isdigit():
            raise _fail(name, f"{field}: CPU id is not a number")
        if not isinstance(entry, Mapping):
            raise _fail(name, f"{field}: expected an object")
        socket = _int_field(entry, "socket", name, field)
        numa = _int_field(entry, "numa", name, field)
        if numa > MAX_NUMA_ID:
            raise _fail(name, f"{field}.numa: NUMA id {numa} is outside 0-{MAX_NUMA_ID}")
        cpus.append(
            CpuInfo(
                cpu=int(cpu_text),
                core=_int_field(entry, "core", name, field),
                socket=socket,
                numa=numa,
                l3=_int_field(entry, "l3", name, field) if has_l3 else socket,
            )
        )
    return tuple(sorted(cpus, key=lambda info: info.cpu))


def _distances(spec: Mapping[str, Any], name: str, numa_ids: set[int]) -> dict[int, dict[int, int]]:
    raw = spec.get("numaDistances")
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise _fail(name, "spec.numaDistances: expected an object")
    result: dict[int, dict[int, int]] = {}
    for row_key, row in raw.items():
        if not str(row_key).isdigit() or int(row_key) not in numa_ids or not isinstance(row, Mapping):
            raise _fail(name, f"spec.numaDistances[{row_key}]: unknown NUMA node or not an object")
        result[int(row_key)] = {}
        for column_key, value in row.items():
            if not str(column_key).isdigit() or int(column_key) not in numa_ids:
                raise _fail(name, f"spec.numaDistances[{row_key}][{column_key}]: unknown NUMA node")
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _fail(name, f"spec.numaDistances[{row_key}][{column_key}]: expected a non-negative integer")
            result[int(row_key)][int(column_key)] = value
    return result


def _memory(spec: Mapping[str, Any], name: str, numa_ids: set[int]) -> dict[str, dict[int, int]]:
    raw = spec.get("MemoryDetail") or spec.get("memoryDetail")
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise _fail(name, "spec.MemoryDetail: expected an object")
    result: dict[str, dict[int, int]] = {}
    for numa_key, entry in raw.items():
        field = f"spec.MemoryDetail[{numa_key}]"
        if not str(numa_key).isdigit() or int(numa_key) not in numa_ids:
            raise _fail(name, f"{field}: unknown NUMA node {numa_key}")
        memory_map = entry.get("memoryMap") if isinstance(entry, Mapping) else None
        if not isinstance(memory_map, Mapping):
            raise _fail(name, f"{field}.memoryMap: expected an object")
        for resource, table in memory_map.items():
            if not isinstance(table, Mapping):
                raise _fail(name, f"{field}.memoryMap[{resource}]: expected an object")
            value = table.get("allocatable", table.get("total", 0))
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _fail(name, f"{field}.memoryMap[{resource}].allocatable: expected a non-negative integer")
            result.setdefault(str(resource), {})[int(numa_key)] = value
    return result


def _devices_without_annotation(spec: Mapping[str, Any], name: str, numa_ids: set[int]) -> dict[str, DeviceGroup]:
    """Devices from gpuDetail (NUMA known) and numares (ids only) when no annotation describes them."""
    groups: dict[str, DeviceGroup] = {}
    gpu_detail = spec.get("gpuDetail")
    if gpu_detail is not None:
        if not isinstance(gpu_detail, Mapping):
            raise _fail(name, "spec.gpuDetail: expected an object")
        gpus = []
        for gpu_id, entry in gpu_detail.items():
            if not isinstance(entry, Mapping):
                raise _fail(name, f"spec.gpuDetail[{gpu_id}]: expected an object")
            numa = _int_field(entry, "numa", name, f"spec.gpuDetail[{gpu_id}]")
            if numa not in numa_ids:
                raise _fail(name, f"spec.gpuDetail[{gpu_id}].numa: unknown NUMA node {numa}")
            gpus.append(DeviceInfo(id=str(gpu_id), numa=numa))
        gpus.sort(key=lambda device: (len(device.id), device.id))
        groups[GPU_RESOURCE] = DeviceGroup(GPU_RESOURCE, tuple(gpus))
    numares = spec.get("numares")
    if isinstance(numares, Mapping):
        for resource, info in numares.items():
            if resource in ("cpu", "memory") or resource in groups or not isinstance(info, Mapping):
                continue
            ids = [item.strip() for item in str(info.get("allocatable") or "").split(",") if item.strip()]
            groups[str(resource)] = DeviceGroup(str(resource), tuple(DeviceInfo(id=i, numa=None) for i in ids))
    return groups


def _reserved_cpus(spec: Mapping[str, Any], name: str, all_cpus: IdSet) -> IdSet:
    numares = spec.get("numares")
    cpu_info = numares.get("cpu") if isinstance(numares, Mapping) else None
    if not isinstance(cpu_info, Mapping) or "allocatable" not in cpu_info:
        return IdSet()
    try:
        allocatable = IdSet.parse(str(cpu_info.get("allocatable") or ""))
    except IdSetError as error:
        raise _fail(name, f"spec.numares.cpu.allocatable: {error}") from None
    unknown = allocatable - all_cpus
    if unknown:
        raise _fail(name, f"spec.numares.cpu.allocatable: CPUs {unknown.format()} are not in cpuDetail")
    return all_cpus - allocatable


def _annotated_devices(
    text: str, name: str, numa_ids: set[int]
) -> tuple[dict[str, DeviceGroup], dict[tuple[DeviceKey, DeviceKey], DeviceLink]]:
    devices, links = parse_device_topology(text, name)
    for group in devices.values():
        for device in group.devices:
            if device.numa is not None and device.numa not in numa_ids:
                raise DeviceTopologyError(f"device {group.resource} {device.id}: unknown NUMA node {device.numa}")
    return devices, links


def numatopology_to_topology(obj: Mapping[str, Any], on_warning: Callable[[str], None] | None = None) -> NumaTopology:
    """A Numatopology object to NumaTopology; ConversionError names the field that is wrong.

    A device-topology annotation that does not parse is not fatal: on_warning hears why, and the
    devices come from gpuDetail / numares with their NUMA nodes but no links.
    """
    _, name, metadata = metadata_of(obj, "Numatopology")
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise _fail(name, "spec is missing")
    cpus = _cpus(spec, name)
    numa_ids = {info.numa for info in cpus}
    gpu_detail = spec.get("gpuDetail")
    if isinstance(gpu_detail, Mapping):
        for entry in gpu_detail.values():
            if isinstance(entry, Mapping) and isinstance(entry.get("numa"), int) and 0 <= entry["numa"] <= MAX_NUMA_ID:
                numa_ids.add(entry["numa"])
    memory_detail = spec.get("MemoryDetail") or spec.get("memoryDetail")
    if isinstance(memory_detail, Mapping):
        numa_ids.update(int(key) for key in memory_detail if str(key).isdigit() and int(key) <= MAX_NUMA_ID)
    if len(numa_ids) > MAX_NUMA_NODES:
        raise _fail(name, f"{len(numa_ids)} NUMA nodes; at most {MAX_NUMA_NODES} are supported")
    policies_raw = spec.get("policies") or {}
    if not isinstance(policies_raw, Mapping):
        raise _fail(name, "spec.policies: expected an object")
    annotations = metadata.get("annotations") or {}
    links: dict[tuple[DeviceKey, DeviceKey], DeviceLink] = {}
    device_text = annotations.get(DEVICE_TOPOLOGY_ANNOTATION) if isinstance(annotations, Mapping) else None
    devices: dict[str, DeviceGroup] | None = None
    if device_text:
        try:
            devices, links = _annotated_devices(str(device_text), name, numa_ids)
        except DeviceTopologyError as error:
            # Links are an optimisation: without them the node still gets NUMA-exact device choice.
            if on_warning is not None:
                on_warning(
                    f"annotation {DEVICE_TOPOLOGY_ANNOTATION}: {error}; "
                    "device choice on this node falls back to NUMA only"
                )
    if devices is None:
        devices = _devices_without_annotation(spec, name, numa_ids)
    all_cpus = IdSet(info.cpu for info in cpus)
    return NumaTopology(
        node_name=name,
        numa_ids=tuple(sorted(numa_ids)),
        cpus=cpus,
        distances=_distances(spec, name, numa_ids),
        memory=_memory(spec, name, numa_ids),
        devices=devices,
        links=links,
        reserved_cpus=_reserved_cpus(spec, name, all_cpus),
        policies=policies_from_map(policies_raw, name),
    )


def reported_pod_allocations(obj: Mapping[str, Any]) -> dict[str, PodAllocation]:
    """What the node says each pod holds, keyed by pod uid and by namespace/name."""
    _, name, _ = metadata_of(obj, "Numatopology")
    spec = obj.get("spec")
    raw = spec.get("podAllocations") if isinstance(spec, Mapping) else None
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise _fail(name, "spec.podAllocations: expected an object")
    result: dict[str, PodAllocation] = {}
    for pod_key, entry in raw.items():
        if not isinstance(entry, Mapping):
            raise _fail(name, f"spec.podAllocations[{pod_key}]: expected an object")
        try:
            allocation = allocation_from_mapping(entry)
        except AllocationError as error:
            raise _fail(name, f"spec.podAllocations[{pod_key}]: {error}") from None
        result[str(pod_key)] = allocation
        if entry.get("uid"):
            result[str(entry["uid"])] = allocation
    return result


def _nrt_quantity(value: Any, name: str, field: str) -> int:
    try:
        return parse_integer(value if value is not None else 0)
    except QuantityError as error:
        raise ConversionError("NodeResourceTopology", name, f"{field}: {error}") from None


def nrt_to_topology(obj: Mapping[str, Any]) -> NumaTopology:
    """A NodeResourceTopology (v1alpha2) to NumaTopology.

    NRT carries counts per NUMA zone, not CPU or device ids, so the topology gets consecutive
    CPU ids per zone (one thread per core) and device ids "<zone>-<n>"; the plugin uses them for
    admission and scoring, and the binding leaves cpusets to the kubelet (cpu_ids_known False).
    """
    _, name, _ = metadata_of(obj, "NodeResourceTopology")
    attributes = {
        str(item.get("name")): str(item.get("value"))
        for item in obj.get("attributes") or []
        if isinstance(item, Mapping)
    }
    policy = TopologyPolicy.NONE
    scope = TopologyScope.CONTAINER
    for legacy in obj.get("topologyPolicies") or []:
        if legacy in _NRT_LEGACY_POLICIES:
            policy, scope = _NRT_LEGACY_POLICIES[legacy]
    policy = _enum_value(TopologyPolicy, attributes.get("topologyManagerPolicy"), policy, name, "topologyManagerPolicy")
    scope = _enum_value(TopologyScope, attributes.get("topologyManagerScope"), scope, name, "topologyManagerScope")
    zones = obj.get("zones")
    if not isinstance(zones, list) or not zones:
        raise ConversionError("NodeResourceTopology", name, "zones is missing or empty")
    cpus: list[CpuInfo] = []
    memory: dict[str, dict[int, int]] = {}
    device_lists: dict[str, list[DeviceInfo]] = {}
    distances: dict[int, dict[int, int]] = {}
    zone_ids: dict[str, int] = {}
    numa_zones = [z for z in zones if isinstance(z, Mapping) and z.get("type", "Node") == "Node"]
    for zone in numa_zones:
        zone_name = str(zone.get("name") or "")
        digits = zone_name.rsplit("-", 1)[-1]
        if not digits.isdigit() or int(digits) > MAX_NUMA_ID:
            raise ConversionError("NodeResourceTopology", name, f"zone {zone_name!r}: expected a name like node-0")
        zone_ids[zone_name] = int(digits)
    next_cpu = 0
    for zone in numa_zones:
        zone_name = str(zone["name"])
        numa = zone_ids[zone_name]
        for resource in zone.get("resources") or []:
            if not isinstance(resource, Mapping):
                continue
            resource_name = str(resource.get("name"))
            field = f"zones[{zone_name}].resources[{resource_name}]"
            allocatable = _nrt_quantity(resource.get("allocatable", resource.get("capacity")), name, field)
            if resource_name == "cpu":
                for _ in range(allocatable):
                    cpus.append(CpuInfo(cpu=next_cpu, core=next_cpu, socket=0, numa=numa, l3=numa))
                    next_cpu += 1
            elif resource_name == "memory" or resource_name.startswith("hugepages-"):
                memory.setdefault(resource_name, {})[numa] = allocatable
            else:
                devices = device_lists.setdefault(resource_name, [])
                devices.extend(DeviceInfo(id=f"{zone_name}-{index}", numa=numa) for index in range(allocatable))
        for cost in zone.get("costs") or []:
            if isinstance(cost, Mapping) and str(cost.get("name")) in zone_ids:
                distances.setdefault(numa, {})[zone_ids[str(cost["name"])]] = int(cost.get("value", 0))
    return NumaTopology(
        node_name=name,
        numa_ids=tuple(sorted(zone_ids.values())),
        cpus=tuple(cpus),
        distances=distances,
        memory=memory,
        devices={res: DeviceGroup(res, tuple(devs)) for res, devs in device_lists.items()},
        policies=KubeletPolicies(
            cpu_manager_policy=CpuManagerPolicy.STATIC if cpus else CpuManagerPolicy.NONE,
            topology_manager_policy=policy,
            topology_manager_scope=scope,
        ),
        cpu_ids_known=False,
    )
