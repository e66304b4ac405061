"""Combine what the readers found into one NodeReport: the node's NumaTopology plus what is in use.

Pure: no I/O. The readers' results come in as a Discovery; device ids are chosen here to match
what each device plugin advertises (--device-id-format).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Any

import attrs
import structlog

from numasched.api.allocation import ContainerAllocation
from numasched.api.idset import IdSet
from numasched.api.numamask import NumaMask
from numasched.api.resource import GPU_RESOURCE
from numasched.api.topology import (
    DeviceGroup,
    DeviceInfo,
    DeviceKey,
    DeviceLink,
    NumaTopology,
    link_key,
)
from numasched.exporter.gpus import GpuInventory
from numasched.exporter.kubelet_config import KubeletConfig
from numasched.exporter.rdma import RdmaDevice
from numasched.exporter.sysfs import (
    HostTopology,
    PciDevice,
    memory_by_numa,
    merge_reserved,
    numa_distances,
    pcie_distance,
)
from numasched.exporter.usage import NodeUsage, PodUsage

log = structlog.get_logger("numasched.exporter.report")

RDMA_RESOURCE = "rdma/hca"


class DeviceIdFormat(enum.StrEnum):
    INDEX = "index"  # GPU index (nvidia device plugin deviceIDStrategy=index)
    UUID = "uuid"  # GPU UUID (the nvidia device plugin's default)
    PCI = "pci"  # PCI address (SR-IOV style plugins)
    NAME = "name"  # kernel device name, e.g. mlx5_0 (RDMA shared device plugins)


DEFAULT_ID_FORMATS = {GPU_RESOURCE: DeviceIdFormat.UUID, RDMA_RESOURCE: DeviceIdFormat.NAME}


def parse_device_id_formats(values: Iterable[str]) -> dict[str, DeviceIdFormat]:
    """--device-id-format resource=format flags over the defaults; raises ValueError when bad."""
    formats = dict(DEFAULT_ID_FORMATS)
    for value in values:
        resource, sep, name = value.partition("=")
        if not sep or not resource.strip():
            raise ValueError(f"--device-id-format {value!r}: expected RESOURCE=FORMAT")
        try:
            formats[resource.strip()] = DeviceIdFormat(name.strip())
        except ValueError:
            valid = ", ".join(item.value for item in DeviceIdFormat)
            raise ValueError(f"--device-id-format {value!r}: format must be one of {valid}") from None
    return formats


@attrs.frozen(slots=True)
class Discovery:
    host: HostTopology
    kubelet: KubeletConfig
    gpus: GpuInventory = attrs.field(factory=GpuInventory)
    # PCI location of each GPU by NVML index (None when sysfs does not have it).
    gpu_pci: dict[int, PciDevice | None] = attrs.field(factory=dict)
    rdma: tuple[RdmaDevice, ...] = ()
    usage: NodeUsage = attrs.field(factory=lambda: NodeUsage(source="none"))


@attrs.frozen(slots=True)
class NodeReport:
    topology: NumaTopology
    memory_total: dict[str, dict[int, int]]
    allocatable_devices: dict[str, tuple[str, ...]]
    reserved: dict[str, str]
    usage: NodeUsage
    problems: tuple[str, ...] = ()

    @property
    def allocatable_cpus(self) -> IdSet:
        return self.topology.allocatable_cpus


def _gpu_id(index: int, uuid: str | None, bus_id: str | None, id_format: DeviceIdFormat) -> str | None:
    if id_format == DeviceIdFormat.UUID:
        return uuid
    if id_format == DeviceIdFormat.PCI:
        return bus_id
    return str(index)


def _gpu_group(
    discovery: Discovery, resource: str, id_format: DeviceIdFormat, problems: list[str]
) -> tuple[DeviceGroup | None, dict[int, DeviceKey], dict[DeviceKey, PciDevice]]:
    devices: list[DeviceInfo] = []
    keys: dict[int, DeviceKey] = {}
    locations: dict[DeviceKey, PciDevice] = {}
    for gpu in discovery.gpus.gpus:
        device_id = _gpu_id(gpu.index, gpu.uuid, gpu.pci_bus_id, id_format)
        if device_id is None:
            problems.append(f"GPU {gpu.index}: unhealthy and its {id_format.value} is unknown; not published")
            continue
        if not gpu.healthy:
            problems.append(f"GPU {device_id}: unhealthy: {gpu.problem}")
        pci = discovery.gpu_pci.get(gpu.index)
        devices.append(
            DeviceInfo(
                id=device_id,
                numa=pci.numa if pci is not None else None,
                pci_bus_id=gpu.pci_bus_id,
                pci_switch=pci.pci_switch if pci is not None else None,
                model=gpu.model,
                healthy=gpu.healthy,
            )
        )
        keys[gpu.index] = (resource, device_id)
        if pci is not None:
            locations[(resource, device_id)] = pci
    return (DeviceGroup(resource, tuple(devices)) if devices else None), keys, locations


def _rdma_group(
    discovery: Discovery, resource: str, id_format: DeviceIdFormat
) -> tuple[DeviceGroup | None, dict[DeviceKey, PciDevice]]:
    devices: list[DeviceInfo] = []
    locations: dict[DeviceKey, PciDevice] = {}
    for nic in discovery.rdma:
        device_id = nic.pci.address if id_format == DeviceIdFormat.PCI else nic.name
        devices.append(
            DeviceInfo(
                id=device_id,
                numa=nic.pci.numa,
                pci_bus_id=nic.pci.address,
                pci_switch=nic.pci.pci_switch,
                model=nic.model,
            )
        )
        locations[(resource, device_id)] = nic.pci
    return (DeviceGroup(resource, tuple(devices)) if devices else None), locations


def _links(
    discovery: Discovery, gpu_keys: Mapping[int, DeviceKey], locations: Mapping[DeviceKey, PciDevice]
) -> dict[tuple[DeviceKey, DeviceKey], DeviceLink]:
    links: dict[tuple[DeviceKey, DeviceKey], DeviceLink] = {}
    for (first, second), link in discovery.gpus.links().items():
        if first in gpu_keys and second in gpu_keys:
            links[link_key(gpu_keys[first], gpu_keys[second])] = link
    ordered = sorted(locations)
    for position, first_key in enumerate(ordered):
        for second_key in ordered[position + 1 :]:
            key = link_key(first_key, second_key)
            existing = links.get(key)
            if existing is not None and existing.pcie is not None:
                continue
            pcie = pcie_distance(locations[first_key], locations[second_key])
            links[key] = attrs.evolve(existing, pcie=pcie) if existing is not None else DeviceLink(pcie=pcie)
    return dict(sorted(links.items()))


def _allocatable_devices(
    groups: Mapping[str, DeviceGroup], usage: NodeUsage, problems: list[str]
) -> dict[str, tuple[str, ...]]:
    """Healthy devices, narrowed to what the kubelet says is allocatable when it says so."""
    result: dict[str, tuple[str, ...]] = {}
    for resource, group in groups.items():
        healthy = [device.id for device in group.devices if device.healthy]
        if usage.allocatable_devices is not None and resource in usage.allocatable_devices:
            kubelet_ids = set(usage.allocatable_devices[resource])
            if not kubelet_ids & {device.id for device in group.devices}:
                problems.append(
                    f"{resource}: the kubelet's device ids ({', '.join(sorted(kubelet_ids)[:3])}...) match none "
                    "of the discovered ones; check --device-id-format"
                )
            else:
                healthy = [device_id for device_id in healthy if device_id in kubelet_ids]
        result[resource] = tuple(healthy)
    return result


def _with_numa(pod: PodUsage, topology: NumaTopology) -> PodUsage:
    """Fill each container's NUMA mask from its CPUs, devices and pinned memory."""
    device_numa = {
        (resource, device.id): device.numa for resource, group in topology.devices.items() for device in group.devices
    }
    containers: list[ContainerAllocation] = []
    for container in pod.containers:
        numa_ids = {topology.cpu_info[cpu].numa for cpu in container.cpuset if cpu in topology.cpu_info}
        for resource, ids in container.devices.items():
            numa_ids.update(numa for device_id in ids if (numa := device_numa.get((resource, device_id))) is not None)
        for per_numa in container.memory.values():
            numa_ids.update(numa for numa, size in per_numa.items() if size)
        containers.append(attrs.evolve(container, numa=NumaMask.from_ids(numa_ids) if numa_ids else None))
    return attrs.evolve(pod, containers=tuple(containers))


def build_report(
    node_name: str,
    discovery: Discovery,
    id_formats: Mapping[str, DeviceIdFormat] | None = None,
    *,
    gpu_resource: str = GPU_RESOURCE,
    rdma_resource: str = RDMA_RESOURCE,
) -> NodeReport:
    formats = dict(DEFAULT_ID_FORMATS)
    formats.update(id_formats or {})
    problems: list[str] = []
    host = discovery.host
    groups: dict[str, DeviceGroup] = {}
    gpu_group, gpu_keys, locations = _gpu_group(
        discovery, gpu_resource, formats.get(gpu_resource, DeviceIdFormat.UUID), problems
    )
    if gpu_group is not None:
        groups[gpu_resource] = gpu_group
    rdma_group, rdma_locations = _rdma_group(discovery, rdma_resource, formats.get(rdma_resource, DeviceIdFormat.NAME))
    if rdma_group is not None:
        groups[rdma_resource] = rdma_group
    locations = {**locations, **rdma_locations}
    all_cpus = IdSet(info.cpu for info in host.cpus)
    usage = discovery.usage
    if usage.allocatable_cpus is not None:
        reserved_cpus = all_cpus - usage.allocatable_cpus
    else:
        reserved_cpus = discovery.kubelet.reserved_cpus(host.cpus) & all_cpus
    memory_total = memory_by_numa(host.numa_nodes)
    if usage.allocatable_memory:
        memory = {name: dict(per_numa) for name, per_numa in usage.allocatable_memory.items()}
    else:
        memory = merge_reserved(memory_total, discovery.kubelet.reserved_memory_per_numa)
    topology = NumaTopology(
        node_name=node_name,
        numa_ids=host.numa_ids,
        cpus=host.cpus,
        distances=numa_distances(host.numa_nodes),
        memory=memory,
        devices=groups,
        links=_links(discovery, gpu_keys, locations),
        reserved_cpus=reserved_cpus,
        policies=discovery.kubelet.policies,
    )
    usage = attrs.evolve(usage, pods=tuple(_with_numa(pod, topology) for pod in usage.pods))
    for problem in problems:
        log.warning("exporter problem", node=node_name, problem=problem)
    return NodeReport(
        topology=topology,
        memory_total=memory_total,
        allocatable_devices=_allocatable_devices(groups, usage, problems),
        reserved=discovery.kubelet.reserved_resources(host.cpus),
        usage=usage,
        problems=tuple(problems),
    )


def report_summary(report: NodeReport) -> dict[str, Any]:
    """The discovered topology as plain data (golden files, --dry-run logs)."""
    topology = report.topology
    return {
        "node": topology.node_name,
        "numaNodes": {
            str(numa): {
                "cpus": topology.cpus_by_numa.get(numa, IdSet()).format(),
                "distances": [topology.distances.get(numa, {}).get(other) for other in topology.numa_ids],
                "memory": {name: per_numa.get(numa, 0) for name, per_numa in sorted(report.memory_total.items())},
            }
            for numa in topology.numa_ids
        },
        "cores": sorted(
            {
                f"socket {info.socket} core {info.core}: numa {info.numa} l3 {info.l3} cpus "
                + IdSet(
                    other.cpu for other in topology.cpus if (other.socket, other.core) == (info.socket, info.core)
                ).format()
                for info in topology.cpus
            },
            key=lambda line: [int(part) if part.isdigit() else part for part in line.replace(":", " ").split()],
        ),
        "reservedCpus": topology.reserved_cpus.format(),
        "devices": {
            resource: [
                {
                    key: value
                    for key, value in (
                        ("id", device.id),
                        ("numa", device.numa),
                        ("pciBusId", device.pci_bus_id),
                        ("pciSwitch", device.pci_switch),
                        ("model", device.model),
                        ("healthy", device.healthy),
                    )
                    if value is not None
                }
                for device in group.devices
            ]
            for resource, group in sorted(topology.devices.items())
        },
        "links": [
            f"{first[1]} {second[1]}: "
            + " ".join(
                part
                for part in (
                    f"NV{link.nvlinks}" if link.nvlinks else "",
                    "nvswitch" if link.nvswitch else "",
                    link.pcie.name if link.pcie is not None else "",
                )
                if part
            )
            for (first, second), link in sorted(topology.links.items())
        ],
        "problems": list(report.problems),
    }
