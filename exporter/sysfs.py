"""Read a node's NUMA, CPU, memory and PCI layout from sysfs.

Every reader takes the sysfs root as a Path so tests point it at a generated tree. A file that is
missing or malformed degrades only the fact it carries, with a structlog line saying which file
and why; the rest of the topology is still returned.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

import attrs
import structlog

from numasched.api.idset import IdSet, IdSetError
from numasched.api.topology import CpuInfo, PcieDistance

log = structlog.get_logger("numasched.exporter.sysfs")

_NODE_DIR = re.compile(r"^node(\d+)$")
_HUGEPAGES_DIR = re.compile(r"^hugepages-(\d+)kB$")
_MEMINFO_LINE = re.compile(r"^Node\s+\d+\s+(\w+):\s+(\d+)(?:\s+kB)?$")
_PCI_ADDRESS = re.compile(r"^[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")


@attrs.frozen(slots=True)
class NumaNode:
    id: int
    cpus: IdSet
    # SLIT row: distance from this node to every node id.
    distances: dict[int, int]
    memory_total: int
    # Bytes reserved as huge pages, by Kubernetes resource name ("hugepages-1Gi").
    hugepages: dict[str, int]


@attrs.frozen(slots=True)
class HostTopology:
    numa_nodes: tuple[NumaNode, ...]
    cpus: tuple[CpuInfo, ...]

    @property
    def numa_ids(self) -> tuple[int, ...]:
        return tuple(node.id for node in self.numa_nodes)


@attrs.frozen(slots=True)
class PciDevice:
    """A PCI function and where it sits: its NUMA node and the bridges above it."""

    address: str
    numa: int | None
    # Path from the host bridge down: ("pci0000:15", "0000:15:01.0", ..., address).
    path: tuple[str, ...]

    @property
    def bridges(self) -> tuple[str, ...]:
        """The PCI bridges between the host bridge and this device."""
        return self.path[1:-1]

    @property
    def host_bridge(self) -> str:
        return self.path[0] if self.path else ""

    @property
    def pci_switch(self) -> str | None:
        """Upstream port of the topmost PCIe switch above the device, if it sits behind one."""
        return self.bridges[1] if len(self.bridges) >= 2 else None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError) as error:
        log.warning("sysfs file unreadable", path=str(path), error=getattr(error, "strerror", None) or str(error))
        return None


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        log.warning("sysfs file is not an integer", path=str(path), content=text[:80])
        return None


def _read_list(path: Path) -> IdSet | None:
    text = _read_text(path)
    if text is None:
        return None
    try:
        return IdSet.parse(text)
    except IdSetError as error:
        log.warning("sysfs file is not a Linux list", path=str(path), error=str(error))
        return None


def hugepage_resource_name(size_kb: int) -> str:
    """Kubernetes resource name for a huge page size: 2048 kB -> hugepages-2Mi."""
    for unit, factor in (("Gi", 1 << 20), ("Mi", 1 << 10)):
        if size_kb % factor == 0:
            return f"hugepages-{size_kb // factor}{unit}"
    return f"hugepages-{size_kb}Ki"


def parse_meminfo(text: str) -> dict[str, int]:
    """Per-node meminfo ("Node 0 MemTotal:  263842012 kB") as field -> bytes or count."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        match = _MEMINFO_LINE.match(line.strip())
        if match is None:
            continue
        value = int(match[2])
        fields[match[1]] = value * 1024 if line.rstrip().endswith("kB") else value
    return fields


def online_numa_nodes(sysfs: Path) -> list[int]:
    node_root = sysfs / "devices/system/node"
    online = _read_list(node_root / "online")
    if online is not None:
        return online.sorted()
    # Kernels without NUMA support have no node/online: each nodeN directory is a node.
    try:
        found = sorted(int(m[1]) for entry in node_root.iterdir() if (m := _NODE_DIR.match(entry.name)))
    except OSError:
        found = []
    if not found:
        log.warning("no NUMA nodes in sysfs; assuming a single node 0", path=str(node_root))
        return [0]
    return found


def _read_numa_node(sysfs: Path, node_id: int, node_ids: list[int]) -> NumaNode:
    node_dir = sysfs / f"devices/system/node/node{node_id}"
    cpus = _read_list(node_dir / "cpulist") or IdSet()
    distances: dict[int, int] = {}
    distance_text = _read_text(node_dir / "distance")
    if distance_text is not None:
        values = distance_text.split()
        if len(values) == len(node_ids) and all(value.isdigit() for value in values):
            distances = {other: int(value) for other, value in zip(node_ids, values, strict=True)}
        else:
            log.warning(
                "NUMA distance row does not match the online nodes; distances dropped",
                path=str(node_dir / "distance"),
                row=distance_text,
                online=node_ids,
            )
    memory_total = 0
    meminfo_text = _read_text(node_dir / "meminfo")
    if meminfo_text is not None:
        meminfo = parse_meminfo(meminfo_text)
        if "MemTotal" in meminfo:
            memory_total = meminfo["MemTotal"]
        else:
            log.warning("node meminfo has no MemTotal", path=str(node_dir / "meminfo"))
    hugepages: dict[str, int] = {}
    try:
        hugepage_dirs = sorted((node_dir / "hugepages").iterdir())
    except OSError:
        hugepage_dirs = []
    for entry in hugepage_dirs:
        match = _HUGEPAGES_DIR.match(entry.name)
        if match is None:
            continue
        count = _read_int(entry / "nr_hugepages")
        if count:
            size_kb = int(match[1])
            hugepages[hugepage_resource_name(size_kb)] = count * size_kb * 1024
    return NumaNode(node_id, cpus, distances, memory_total, hugepages)


def _l3_groups(sysfs: Path, cpu_ids: list[int]) -> dict[int, int]:
    """L3 cache group per CPU: cache/index3/id, or groups numbered by shared_cpu_list."""
    by_id: dict[int, int] = {}
    shared: dict[int, IdSet] = {}
    for cpu in cpu_ids:
        cache_dir = sysfs / f"devices/system/cpu/cpu{cpu}/cache/index3"
        if not cache_dir.is_dir():
            continue
        cache_id_path = cache_dir / "id"
        if cache_id_path.exists():
            cache_id = _read_int(cache_id_path)
            if cache_id is not None:
                by_id[cpu] = cache_id
                continue
        cpus = _read_list(cache_dir / "shared_cpu_list")
        if cpus is not None:
            shared[cpu] = cpus
    if shared:
        # Older kernels have no cache id: number the distinct sharing sets by their lowest CPU.
        distinct = sorted({cpus for cpus in shared.values()}, key=lambda cpus: cpus.sorted()[0])
        numbering = {cpus: index for index, cpus in enumerate(distinct)}
        for cpu, cpus in shared.items():
            by_id[cpu] = numbering[cpus]
    return by_id


def read_host_topology(sysfs: Path) -> HostTopology:
    node_ids = online_numa_nodes(sysfs)
    numa_nodes = tuple(_read_numa_node(sysfs, node_id, node_ids) for node_id in node_ids)
    numa_of_cpu = {cpu: node.id for node in numa_nodes for cpu in node.cpus}
    online = _read_list(sysfs / "devices/system/cpu/online")
    cpu_ids = online.sorted() if online is not None else sorted(numa_of_cpu)
    l3_of_cpu = _l3_groups(sysfs, cpu_ids)
    cpus: list[CpuInfo] = []
    for cpu in cpu_ids:
        topology_dir = sysfs / f"devices/system/cpu/cpu{cpu}/topology"
        core = _read_int(topology_dir / "core_id")
        socket = _read_int(topology_dir / "physical_package_id")
        if core is None or socket is None:
            log.warning("CPU topology unreadable; CPU left out", cpu=cpu, path=str(topology_dir))
            continue
        numa = numa_of_cpu.get(cpu)
        if numa is None:
            log.warning("CPU belongs to no online NUMA node; assuming node 0", cpu=cpu)
            numa = node_ids[0]
        cpus.append(CpuInfo(cpu=cpu, core=core, socket=socket, numa=numa, l3=l3_of_cpu.get(cpu, socket)))
    return HostTopology(numa_nodes, tuple(cpus))


def normalize_pci_address(address: str) -> str:
    """NVML's "00000000:18:00.0" and sysfs's "0000:18:00.0" name the same function."""
    domain, _, rest = address.strip().lower().partition(":")
    return f"{int(domain, 16):04x}:{rest}" if rest and domain else address.strip().lower()


def numa_of_cpulist(cpus: IdSet, numa_nodes: tuple[NumaNode, ...]) -> int | None:
    """The NUMA node holding most of the given CPUs (ties to the lowest id)."""
    best: tuple[int, int] | None = None
    for node in numa_nodes:
        overlap = len(node.cpus & cpus)
        if overlap and (best is None or overlap > best[0]):
            best = (overlap, node.id)
    return best[1] if best else None


def read_pci_device(sysfs: Path, address: str, numa_nodes: tuple[NumaNode, ...]) -> PciDevice | None:
    """A PCI function by address; a numa_node of -1 falls back to its local_cpulist."""
    normalized = normalize_pci_address(address)
    if not _PCI_ADDRESS.match(normalized):
        log.warning("not a PCI address", address=address)
        return None
    link = sysfs / "bus/pci/devices" / normalized
    try:
        real = Path(os.path.realpath(link))
    except OSError:
        real = link
    if not real.is_dir():
        log.warning("PCI device not in sysfs", address=normalized, path=str(link))
        return None
    return pci_device_at(sysfs, real, numa_nodes)


def pci_device_at(sysfs: Path, device_dir: Path, numa_nodes: tuple[NumaNode, ...]) -> PciDevice:
    """Describe the PCI function whose (resolved) sysfs directory is device_dir."""
    parts = device_dir.parts
    devices_root = (sysfs / "devices").resolve().parts
    below = parts[len(devices_root) :] if parts[: len(devices_root)] == devices_root else parts[-1:]
    path = tuple(below)
    address = path[-1]
    numa = _read_int(device_dir / "numa_node")
    if numa is not None and numa < 0:
        local = _read_list(device_dir / "local_cpulist")
        fallback = numa_of_cpulist(local, numa_nodes) if local is not None else None
        log.info(
            "PCI device reports numa_node -1; using the NUMA node of its local CPUs",
            address=address,
            local_cpulist=local.format() if local is not None else None,
            numa=fallback,
        )
        numa = fallback
    return PciDevice(address=address, numa=numa, path=path)


def pcie_distance(first: PciDevice, second: PciDevice) -> PcieDistance:
    """The PCIe path between two functions, named as `nvidia-smi topo -m` names it."""
    if first.host_bridge and first.host_bridge == second.host_bridge:
        common = 0
        for mine, theirs in zip(first.bridges, second.bridges, strict=False):
            if mine != theirs:
                break
            common += 1
        if common >= 2:
            # Both under one switch's upstream port: PIX when each hangs off its downstream ports.
            below = max(len(first.bridges), len(second.bridges)) - common
            return PcieDistance.PIX if below <= 1 else PcieDistance.PXB
        return PcieDistance.PXB if common == 1 else PcieDistance.PHB
    if first.numa is not None and first.numa == second.numa:
        return PcieDistance.NODE
    return PcieDistance.SYS


def numa_distances(numa_nodes: tuple[NumaNode, ...]) -> dict[int, dict[int, int]]:
    return {node.id: dict(node.distances) for node in numa_nodes if node.distances}


def memory_by_numa(numa_nodes: tuple[NumaNode, ...]) -> dict[str, dict[int, int]]:
    """Total bytes per resource per NUMA node; huge pages are not counted as ordinary memory."""
    totals: dict[str, dict[int, int]] = {}
    for node in numa_nodes:
        huge = sum(node.hugepages.values())
        totals.setdefault("memory", {})[node.id] = max(node.memory_total - huge, 0)
        for name, size in node.hugepages.items():
            totals.setdefault(name, {})[node.id] = size
    return totals


def merge_reserved(
    totals: Mapping[str, Mapping[int, int]], reserved: Mapping[str, Mapping[int, int]]
) -> dict[str, dict[int, int]]:
    """Allocatable bytes: totals less what the kubelet reserves per NUMA node."""
    return {
        name: {numa: max(size - reserved.get(name, {}).get(numa, 0), 0) for numa, size in per_numa.items()}
        for name, per_numa in totals.items()
    }
