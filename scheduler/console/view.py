"""What the console shows, computed from a cache snapshot: pure functions, no I/O.

A snapshot is the session's own copy of the cache; reading it never changes what the scheduler
decides. The pieces here are plain frozen records so the HTML pages, the JSON answer and the NUMA
gauges all read the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import attrs

from numasched.api.allocation import ALLOCATION_ANNOTATION
from numasched.api.idset import IdSet
from numasched.api.node import NodeInfo, exclusive_cpus
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo, TaskStatus
from numasched.api.topology import NumaTopology

MEMORY = "memory"
# How many nodes a pending pod's per-NUMA comparison lists (the best first): a thousand-node
# cluster would otherwise draw a thousand tables per pod.
FIT_NODES_SHOWN = 12

# A pod's object as the informer holds it (for its PodScheduled condition), by task uid.
PodObjects = Callable[[str], Mapping[str, Any] | None]


@attrs.frozen(slots=True)
class CpuCell:
    cpu: int
    core: int
    socket: int
    # free | reserved (kubelet reservedSystemCPUs) | pinned (by a pod we know) |
    # held (the node's source says it is taken, by a pod we do not know)
    state: str
    pod: str = ""


@attrs.frozen(slots=True)
class DeviceCell:
    resource: str
    id: str
    numa: int | None
    model: str = ""
    pci_switch: str = ""
    pci_bus_id: str = ""
    # free | allocated (to pod) | held (the source says taken) | unhealthy
    state: str = "free"
    pod: str = ""


@attrs.frozen(slots=True)
class MemoryCell:
    resource: str  # memory, hugepages-1Gi, ...
    total: int
    used: int

    @property
    def free(self) -> int:
        return max(0, self.total - self.used)


@attrs.frozen(slots=True)
class CpuCounts:
    free: int = 0
    pinned: int = 0
    reserved: int = 0
    held: int = 0

    @property
    def total(self) -> int:
        return self.free + self.pinned + self.reserved + self.held


@attrs.frozen(slots=True)
class NumaNodeView:
    id: int
    counts: CpuCounts
    memory: tuple[MemoryCell, ...]
    devices: tuple[DeviceCell, ...]
    # Every CPU with its state: drawn for a node's own page only (a thousand-node overview needs
    # the counts alone).
    cpus: tuple[CpuCell, ...] = ()

    def cpu_count(self, state: str) -> int:
        return int(getattr(self.counts, state))

    @property
    def cpu_total(self) -> int:
        return self.counts.total

    @property
    def cpu_allocatable(self) -> int:
        return self.counts.total - self.counts.reserved

    def devices_of(self, resource: str) -> tuple[DeviceCell, ...]:
        return tuple(cell for cell in self.devices if cell.resource == resource)

    def free_devices(self, resource: str) -> int:
        return sum(1 for cell in self.devices if cell.resource == resource and cell.state == "free")

    def free_memory(self, resource: str = MEMORY) -> int | None:
        cell = next((cell for cell in self.memory if cell.resource == resource), None)
        return None if cell is None else cell.free

    @property
    def fill(self) -> float:
        """How full the NUMA node is: the largest of its pinned CPU, memory and device shares."""
        shares = [0.0]
        if self.cpu_allocatable:
            shares.append((self.cpu_allocatable - self.counts.free) / self.cpu_allocatable)
        shares.extend(cell.used / cell.total for cell in self.memory if cell.total > 0)
        if self.devices:
            shares.append(sum(1 for cell in self.devices if cell.state != "free") / len(self.devices))
        return min(1.0, max(shares))


@attrs.frozen(slots=True)
class LinkView:
    first: str  # "resource/id"
    second: str
    nvlinks: int
    nvswitch: bool
    pcie: str  # PIX, PXB, PHB, NODE, SYS or ""

    @property
    def label(self) -> str:
        """As `nvidia-smi topo -m` prints it: NV<n>, NVS (NVSwitch fabric) or the PCIe path."""
        if self.nvlinks:
            return f"NV{self.nvlinks}"
        if self.nvswitch:
            return "NVS"
        return self.pcie or "-"


@attrs.frozen(slots=True)
class PlacedPod:
    key: str  # namespace/name
    numa: tuple[int, ...]
    cpuset: str
    devices: tuple[tuple[str, tuple[str, ...]], ...]
    # The numasched.io/allocation annotation as written (the decision), "" when the pod has none.
    decision: str
    status: str


@attrs.frozen(slots=True)
class NodeView:
    name: str
    labels: tuple[tuple[str, str], ...] = ()
    ready: bool = True
    unschedulable: bool = False
    pods: tuple[PlacedPod, ...] = ()  # on the node's own view only (detail)
    problems: tuple[str, ...] = ()
    # "ids" (CPU and device ids known), "counts" (NodeResourceTopology: per-NUMA counts only),
    # "missing" or "rejected"
    topology: str = "missing"
    # The kind of object the topology is read from (Numatopology, NodeResourceTopology); the
    # node's own page only.
    topology_source: str = ""
    topology_problem: str = ""
    topology_policy: str = ""
    cpu_manager_policy: str = ""
    scope: str = ""
    numa: tuple[NumaNodeView, ...] = ()
    # Devices whose NUMA node the source does not give.
    unplaced_devices: tuple[DeviceCell, ...] = ()
    links: tuple[LinkView, ...] = ()  # on the node's own view only (detail)
    distances: tuple[tuple[int, tuple[int, ...]], ...] = ()
    stranded: tuple[tuple[str, int], ...] = ()
    # The kubelet's memory manager holds memory per NUMA node (policy Static).
    memory_pinned: bool = False

    @property
    def device_models(self) -> tuple[str, ...]:
        models = {cell.model for numa in self.numa for cell in numa.devices if cell.model}
        models.update(cell.model for cell in self.unplaced_devices if cell.model)
        return tuple(sorted(models))

    @property
    def stranded_total(self) -> int:
        return sum(count for _, count in self.stranded)

    def device_resources(self) -> tuple[str, ...]:
        names = {cell.resource for numa in self.numa for cell in numa.devices}
        names.update(cell.resource for cell in self.unplaced_devices)
        return tuple(sorted(names))


@attrs.frozen(slots=True)
class NumaFit:
    numa: int
    free_cpus: int
    free_devices: tuple[tuple[str, int], ...]
    free_memory: int | None  # None: the source gives no per-NUMA memory
    fits: bool


@attrs.frozen(slots=True)
class NodeFit:
    node: str
    numa: tuple[NumaFit, ...]

    @property
    def fitting(self) -> int:
        return sum(1 for item in self.numa if item.fits)


@attrs.frozen(slots=True)
class PendingPod:
    key: str
    job: str
    reason: str
    asked_cpus: int  # exclusive CPUs a static CPU manager would pin
    asked_devices: tuple[tuple[str, int], ...]
    asked_memory: int
    fits: tuple[NodeFit, ...]
    nodes_compared: int


@attrs.frozen(slots=True)
class ClusterView:
    nodes: tuple[NodeView, ...]
    pending: tuple[PendingPod, ...]
    problems: tuple[tuple[str, str], ...]  # (object, message)

    def node(self, name: str) -> NodeView | None:
        return next((node for node in self.nodes if node.name == name), None)


# ---- building ------------------------------------------------------------------------------------


def build_view(
    snapshot: ClusterSnapshot,
    *,
    pod_objects: PodObjects,
    problems: Mapping[tuple[str, str], str],
    nodes_without_topology: Mapping[str, str],
    waiting_for_group: Iterable[TaskInfo] = (),
) -> ClusterView:
    """The whole console view of one snapshot (per-NUMA CPU counts; no per-CPU cells)."""
    pending = pending_tasks(snapshot, waiting_for_group)
    shapes = pending_device_shapes(pending)
    by_node = problems_by_node(problems)
    nodes = tuple(
        node_view(snapshot.nodes[name], shapes, by_node.get(name, ()), nodes_without_topology.get(name, ""))
        for name in sorted(snapshot.nodes)
    )
    fits = FitTable(nodes)
    pending_views = tuple(pending_view(task, pod_objects, fits) for task in pending)
    return ClusterView(
        nodes=nodes,
        pending=pending_views,
        problems=tuple(sorted((f"{kind} {name}", message) for (kind, name), message in problems.items())),
    )


def problems_by_node(problems: Mapping[tuple[str, str], str]) -> dict[str, tuple[str, ...]]:
    """The problems of the objects named like a node (its Node and topology objects)."""
    grouped: dict[str, list[str]] = {}
    for (kind, name), message in sorted(problems.items()):
        grouped.setdefault(name, []).append(f"{kind}: {message}")
    return {name: tuple(messages) for name, messages in grouped.items()}


def pending_tasks(snapshot: ClusterSnapshot, waiting_for_group: Iterable[TaskInfo]) -> list[TaskInfo]:
    tasks = {
        task.uid: task
        for job in snapshot.jobs.values()
        for task in job.tasks.values()
        if not task.node_name and task.status is TaskStatus.PENDING
    }
    for task in waiting_for_group:
        tasks.setdefault(task.uid, task)
    return sorted(tasks.values(), key=lambda task: task.key)


def asked_devices(task: TaskInfo) -> dict[str, int]:
    """Whole devices of each extended resource the pod asks for (its init-phase maximum)."""
    return {
        resource: math.ceil(amount / 1000 - 1e-9)
        for resource, amount in sorted(task.init_resreq.scalars.items())
        if amount > 0 and "/" in resource and not resource.startswith("hugepages-")
    }


def pending_device_shapes(pending: Iterable[TaskInfo]) -> dict[str, frozenset[int]]:
    shapes: dict[str, set[int]] = {}
    for task in pending:
        for resource, count in asked_devices(task).items():
            shapes.setdefault(resource, set()).add(count)
    return {resource: frozenset(counts) for resource, counts in shapes.items()}


def node_view(
    node: NodeInfo,
    pending_shapes: Mapping[str, frozenset[int]],
    problems: tuple[str, ...],
    without_topology: str,
    *,
    detail: bool = False,
    source: str = "",
) -> NodeView:
    """A node's view; detail adds the pods placed there with their decisions, every CPU with its
    state and holder, the holder of each device and the device links (the node's own page)."""
    topology = node.topology
    pods = tuple(_placed(task) for task in sorted(node.tasks.values(), key=lambda task: task.key)) if detail else ()
    base = NodeView(
        name=node.name,
        labels=tuple(sorted(node.labels.items())),
        ready=node.ready,
        unschedulable=node.unschedulable,
        pods=pods,
        problems=problems,
        topology_source=source,
    )
    if topology is None:
        state = "rejected" if without_topology.startswith("rejected") else "missing"
        return attrs.evolve(base, topology=state, topology_problem=node.topology_error or without_topology)
    cpu_holder, device_holder = _holders(node) if detail else ({}, {})
    devices_by_numa: dict[int | None, list[DeviceCell]] = {}
    for resource in sorted(topology.devices):
        for cell in _device_cells(node, topology, resource, device_holder):
            numa_id = cell.numa if cell.numa in topology.numa_ids else None
            devices_by_numa.setdefault(numa_id, []).append(cell)
    cells_by_numa = _cpu_cells(node, topology, cpu_holder) if detail else {}
    numa = tuple(
        NumaNodeView(
            numa_id,
            _cpu_counts(node, topology, numa_id),
            _memory_cells(node, topology, numa_id),
            tuple(devices_by_numa.get(numa_id, ())),
            tuple(cells_by_numa.get(numa_id, ())),
        )
        for numa_id in topology.numa_ids
    )
    return attrs.evolve(
        base,
        topology="ids" if topology.cpu_ids_known else "counts",
        topology_policy=str(topology.policies.topology_manager_policy),
        cpu_manager_policy=str(topology.policies.cpu_manager_policy),
        scope=str(topology.policies.topology_manager_scope),
        numa=numa,
        unplaced_devices=tuple(devices_by_numa.get(None, ())),
        links=_links(topology) if detail else (),
        distances=tuple(
            (first, tuple(topology.distance(first, second) for second in topology.numa_ids))
            for first in topology.numa_ids
        )
        if topology.distances
        else (),
        stranded=stranded_devices(numa, pending_shapes),
        memory_pinned=topology.policies.memory_manager_policy == "Static",
    )


def _cpu_counts(node: NodeInfo, topology: NumaTopology, numa_id: int) -> CpuCounts:
    """The states of _cpu_state, counted with set operations (no loop over CPUs)."""
    cpus = topology.cpus_by_numa.get(numa_id, IdSet())
    reserved = cpus & topology.reserved_cpus
    pinned = (cpus & node.numa_usage.cpus) - reserved
    held = IdSet()
    if topology.available_cpus is not None:
        held = cpus - topology.available_cpus - reserved - pinned
    return CpuCounts(
        free=len(cpus) - len(reserved) - len(pinned) - len(held),
        pinned=len(pinned),
        reserved=len(reserved),
        held=len(held),
    )


def _memory_cells(node: NodeInfo, topology: NumaTopology, numa_id: int) -> tuple[MemoryCell, ...]:
    return tuple(
        MemoryCell(resource, per_numa[numa_id], node.numa_usage.memory.get(resource, {}).get(numa_id, 0))
        for resource, per_numa in sorted(topology.memory.items())
        if numa_id in per_numa
    )


def _cpu_cells(node: NodeInfo, topology: NumaTopology, holder: Mapping[int, str]) -> dict[int, list[CpuCell]]:
    cells: dict[int, list[CpuCell]] = {}
    for info in sorted(topology.cpus, key=lambda info: (info.core, info.cpu)):
        state, pod = _cpu_state(node, topology, info.cpu, holder)
        cells.setdefault(info.numa, []).append(CpuCell(info.cpu, info.core, info.socket, state, pod))
    return cells


def _placed(task: TaskInfo) -> PlacedPod:
    allocation = task.allocation
    if allocation is None:
        numa: tuple[int, ...] = ()
        cpuset = ""
        devices: tuple[tuple[str, tuple[str, ...]], ...] = ()
    else:
        numa = tuple(allocation.numa().ids())
        cpuset = allocation.cpus().format()
        devices = tuple(
            (resource, tuple(sorted(allocation.devices(resource)))) for resource in sorted(allocation.resources())
        )
    return PlacedPod(
        key=task.key,
        numa=numa,
        cpuset=cpuset,
        devices=devices,
        decision=task.annotations.get(ALLOCATION_ANNOTATION, ""),
        status=task.status.value,
    )


def _holders(node: NodeInfo) -> tuple[dict[int, str], dict[tuple[str, str], str]]:
    """Which known pod holds each pinned CPU and each allocated device."""
    cpus: dict[int, str] = {}
    devices: dict[tuple[str, str], str] = {}
    for task in node.tasks.values():
        allocation = task.allocation
        if allocation is None:
            continue
        for cpu in allocation.cpus():
            cpus[cpu] = task.key
        for resource in allocation.resources():
            for device in allocation.devices(resource):
                devices[(resource, device)] = task.key
    return cpus, devices


def _cpu_state(node: NodeInfo, topology: NumaTopology, cpu: int, holder: Mapping[int, str]) -> tuple[str, str]:
    if cpu in topology.reserved_cpus:
        return "reserved", ""
    if cpu in node.numa_usage.cpus:
        return "pinned", holder.get(cpu, "")
    if topology.available_cpus is not None and cpu not in topology.available_cpus:
        return "held", ""
    return "free", ""


def _device_cells(
    node: NodeInfo, topology: NumaTopology, resource: str, holder: Mapping[tuple[str, str], str]
) -> list[DeviceCell]:
    group = topology.devices[resource]
    used = node.numa_usage.devices.get(resource, frozenset())
    available = topology.available_devices.get(resource)
    cells = []
    for device in group.devices:
        if not device.healthy:
            state, pod = "unhealthy", ""
        elif device.id in used:
            state, pod = "allocated", holder.get((resource, device.id), "")
        elif available is not None and device.id not in available:
            state, pod = "held", ""
        else:
            state, pod = "free", ""
        cells.append(
            DeviceCell(
                resource=resource,
                id=device.id,
                numa=device.numa,
                model=device.model or "",
                pci_switch=device.pci_switch or "",
                pci_bus_id=device.pci_bus_id or "",
                state=state,
                pod=pod,
            )
        )
    return cells


def _links(topology: NumaTopology) -> tuple[LinkView, ...]:
    links = []
    for (first, second), link in sorted(topology.links.items()):
        links.append(
            LinkView(
                first=f"{first[0]}/{first[1]}",
                second=f"{second[0]}/{second[1]}",
                nvlinks=link.nvlinks,
                nvswitch=link.nvswitch,
                pcie=link.pcie.name if link.pcie is not None else "",
            )
        )
    return tuple(links)


def stranded_devices(
    numa: Iterable[NumaNodeView], pending_shapes: Mapping[str, frozenset[int]]
) -> tuple[tuple[str, int], ...]:
    """Free devices that no pending request could use aligned: per resource, the free devices of
    every NUMA node whose free count is below the smallest count any pending pod asks for.

    Only resources some pending pod asks for count: with nothing waiting, free is just free.
    """
    stranded: dict[str, int] = {}
    numa_nodes = list(numa)
    for resource, counts in sorted(pending_shapes.items()):
        if not counts:
            continue
        smallest = min(counts)
        for view in numa_nodes:
            free = sum(1 for cell in view.devices_of(resource) if cell.state == "free")
            if 0 < free < smallest:
                stranded[resource] = stranded.get(resource, 0) + free
    return tuple(sorted(stranded.items()))


# ---- pending pods --------------------------------------------------------------------------------


def scheduled_condition_message(pod: Mapping[str, Any] | None) -> str:
    """The PodScheduled=False condition's message (the FailedScheduling summary), if any."""
    status = pod.get("status") if isinstance(pod, Mapping) else None
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for condition in conditions if isinstance(conditions, list) else []:
        if not isinstance(condition, Mapping):
            continue
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message") or condition.get("reason") or "")
    return ""


class FitTable:
    """Per node and NUMA node, what is free against what a pending pod asks; pods asking the
    same are compared once (a gang's members, replicas of one workload)."""

    def __init__(self, nodes: Iterable[NodeView]) -> None:
        self._nodes = [node for node in nodes if node.numa]
        self._by_shape: dict[tuple[int, tuple[tuple[str, int], ...], int], tuple[list[NodeFit], int]] = {}

    def fits(self, cpus: int, devices: Mapping[str, int], memory: int) -> tuple[tuple[NodeFit, ...], int]:
        """The FIT_NODES_SHOWN nodes with the most NUMA nodes that fit, and how many were compared."""
        shape = (cpus, tuple(sorted(devices.items())), memory)
        kept = self._by_shape.get(shape)
        if kept is None:
            fits = [node_fit(node, cpus, devices, memory) for node in self._nodes]
            fits.sort(key=lambda fit: (-fit.fitting, fit.node))
            kept = (fits[:FIT_NODES_SHOWN], len(fits))
            self._by_shape[shape] = kept
        return tuple(kept[0]), kept[1]


def pending_view(task: TaskInfo, pod_objects: PodObjects, table: FitTable) -> PendingPod:
    reason = scheduled_condition_message(pod_objects(task.uid)) or task.fit_error or "not tried yet"
    cpus = exclusive_cpus(task)
    devices = asked_devices(task)
    memory = int(task.init_resreq.memory)
    fits, compared = table.fits(cpus, devices, memory)
    return PendingPod(
        key=task.key,
        job=task.job_id,
        reason=reason,
        asked_cpus=cpus,
        asked_devices=tuple(devices.items()),
        asked_memory=memory,
        fits=fits,
        nodes_compared=compared,
    )


def node_fit(node: NodeView, cpus: int, devices: Mapping[str, int], memory: int) -> NodeFit:
    """Per NUMA node of a node: what is free against what the pod asks, and whether it all fits
    there. Memory counts only where the memory manager holds it per NUMA node."""
    numa = []
    for view in node.numa:
        free_cpus = view.counts.free
        free_devices = tuple((resource, view.free_devices(resource)) for resource in devices)
        free_memory = view.free_memory()
        fits = (
            cpus <= free_cpus
            and all(devices[resource] <= count for resource, count in free_devices)
            and (free_memory is None or not node.memory_pinned or memory <= free_memory)
        )
        numa.append(NumaFit(view.id, free_cpus, free_devices, free_memory, fits))
    return NodeFit(node.name, tuple(numa))
