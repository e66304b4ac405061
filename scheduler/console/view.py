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
class NumaNodeView:
    id: int
    cpus: tuple[CpuCell, ...]
    memory: tuple[MemoryCell, ...]
    devices: tuple[DeviceCell, ...]

    def cpu_count(self, state: str) -> int:
        return sum(1 for cell in self.cpus if cell.state == state)

    @property
    def cpu_total(self) -> int:
        return len(self.cpus)

    @property
    def cpu_allocatable(self) -> int:
        return len(self.cpus) - self.cpu_count("reserved")

    def devices_of(self, resource: str) -> tuple[DeviceCell, ...]:
        return tuple(cell for cell in self.devices if cell.resource == resource)

    @property
    def fill(self) -> float:
        """How full the NUMA node is: the largest of its pinned CPU, memory and device shares."""
        shares = [0.0]
        if self.cpu_allocatable:
            shares.append((self.cpu_allocatable - self.cpu_count("free")) / self.cpu_allocatable)
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
    pods: tuple[PlacedPod, ...] = ()
    problems: tuple[str, ...] = ()
    # "ids" (CPU and device ids known), "counts" (NodeResourceTopology: per-NUMA counts only),
    # "missing" or "rejected"
    topology: str = "missing"
    topology_problem: str = ""
    topology_policy: str = ""
    cpu_manager_policy: str = ""
    scope: str = ""
    numa: tuple[NumaNodeView, ...] = ()
    # Devices whose NUMA node the source does not give.
    unplaced_devices: tuple[DeviceCell, ...] = ()
    links: tuple[LinkView, ...] = ()
    distances: tuple[tuple[int, tuple[int, ...]], ...] = ()
    stranded: tuple[tuple[str, int], ...] = ()

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
    """The whole console view of one snapshot."""
    pending = _pending_tasks(snapshot, waiting_for_group)
    shapes = _pending_device_shapes(pending)
    nodes = tuple(
        node_view(snapshot.nodes[name], shapes, problems, nodes_without_topology.get(name, ""))
        for name in sorted(snapshot.nodes)
    )
    pending_views = tuple(pending_view(task, snapshot, pod_objects) for task in pending)
    return ClusterView(
        nodes=nodes,
        pending=pending_views,
        problems=tuple(sorted((f"{kind} {name}", message) for (kind, name), message in problems.items())),
    )


def _pending_tasks(snapshot: ClusterSnapshot, waiting_for_group: Iterable[TaskInfo]) -> list[TaskInfo]:
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


def _pending_device_shapes(pending: Iterable[TaskInfo]) -> dict[str, frozenset[int]]:
    shapes: dict[str, set[int]] = {}
    for task in pending:
        for resource, count in asked_devices(task).items():
            shapes.setdefault(resource, set()).add(count)
    return {resource: frozenset(counts) for resource, counts in shapes.items()}


def node_view(
    node: NodeInfo,
    pending_shapes: Mapping[str, frozenset[int]],
    problems: Mapping[tuple[str, str], str],
    without_topology: str,
) -> NodeView:
    topology = node.topology
    own_problems = tuple(
        f"{kind}: {message}" for (kind, name), message in sorted(problems.items()) if name == node.name
    )
    pods = tuple(_placed(task) for task in sorted(node.tasks.values(), key=lambda task: task.key))
    base = NodeView(
        name=node.name,
        labels=tuple(sorted(node.labels.items())),
        ready=node.ready,
        unschedulable=node.unschedulable,
        pods=pods,
        problems=own_problems,
    )
    if topology is None:
        state = "rejected" if without_topology.startswith("rejected") else "missing"
        return attrs.evolve(base, topology=state, topology_problem=node.topology_error or without_topology)
    cpu_holder, device_holder = _holders(node)
    numa = tuple(_numa_view(node, topology, numa_id, cpu_holder, device_holder) for numa_id in topology.numa_ids)
    unplaced = tuple(
        cell
        for group in topology.devices.values()
        for cell in _device_cells(node, topology, group.resource, device_holder)
        if cell.numa is None or cell.numa not in topology.numa_ids
    )
    return attrs.evolve(
        base,
        topology="ids" if topology.cpu_ids_known else "counts",
        topology_policy=str(topology.policies.topology_manager_policy),
        cpu_manager_policy=str(topology.policies.cpu_manager_policy),
        scope=str(topology.policies.topology_manager_scope),
        numa=numa,
        unplaced_devices=unplaced,
        links=_links(topology),
        distances=tuple(
            (first, tuple(topology.distance(first, second) for second in topology.numa_ids))
            for first in topology.numa_ids
        )
        if topology.distances
        else (),
        stranded=stranded_devices(numa, pending_shapes),
    )


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


def _numa_view(
    node: NodeInfo,
    topology: NumaTopology,
    numa_id: int,
    cpu_holder: Mapping[int, str],
    device_holder: Mapping[tuple[str, str], str],
) -> NumaNodeView:
    cpus = []
    for info in sorted(topology.cpus, key=lambda info: (info.core, info.cpu)):
        if info.numa != numa_id:
            continue
        state, pod = _cpu_state(node, topology, info.cpu, cpu_holder)
        cpus.append(CpuCell(info.cpu, info.core, info.socket, state, pod))
    memory = tuple(
        MemoryCell(resource, per_numa[numa_id], node.numa_usage.memory.get(resource, {}).get(numa_id, 0))
        for resource, per_numa in sorted(topology.memory.items())
        if numa_id in per_numa
    )
    devices = tuple(
        cell
        for resource in sorted(topology.devices)
        for cell in _device_cells(node, topology, resource, device_holder)
        if cell.numa == numa_id
    )
    return NumaNodeView(numa_id, tuple(cpus), memory, devices)


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


def pending_view(task: TaskInfo, snapshot: ClusterSnapshot, pod_objects: PodObjects) -> PendingPod:
    reason = scheduled_condition_message(pod_objects(task.uid)) or task.fit_error or "not tried yet"
    cpus = exclusive_cpus(task)
    devices = asked_devices(task)
    memory = int(task.init_resreq.memory)
    fits = [node_fit(node, cpus, devices, memory) for node in snapshot.nodes.values() if node.topology is not None]
    fits.sort(key=lambda fit: (-fit.fitting, fit.node))
    return PendingPod(
        key=task.key,
        job=task.job_id,
        reason=reason,
        asked_cpus=cpus,
        asked_devices=tuple(devices.items()),
        asked_memory=memory,
        fits=tuple(fits[:FIT_NODES_SHOWN]),
        nodes_compared=len(fits),
    )


def node_fit(node: NodeInfo, cpus: int, devices: Mapping[str, int], memory: int) -> NodeFit:
    """Per NUMA node of a node: what is free against what the pod asks, and whether it all fits there."""
    topology = node.topology
    assert topology is not None
    free_cpus = node.free_cpus()
    by_numa = topology.cpus_by_numa
    free_devices = {resource: node.free_devices(resource) for resource in devices}
    # Memory is held per NUMA node only by the kubelet's Static memory manager.
    memory_pinned = topology.policies.memory_manager_policy == "Static"
    numa = []
    for numa_id in topology.numa_ids:
        cpu_count = len(free_cpus & by_numa.get(numa_id, IdSet()))
        device_counts = []
        for resource in devices:
            group = topology.devices.get(resource)
            local = group.by_id if group is not None else {}
            count = sum(1 for device in free_devices[resource] if local[device].numa == numa_id)
            device_counts.append((resource, count))
        total = topology.memory.get(MEMORY, {}).get(numa_id)
        free_memory = None if total is None else max(0, total - node.numa_usage.memory.get(MEMORY, {}).get(numa_id, 0))
        fits = (
            cpus <= cpu_count
            and all(devices[resource] <= count for resource, count in device_counts)
            and (free_memory is None or not memory_pinned or memory <= free_memory)
        )
        numa.append(NumaFit(numa_id, cpu_count, tuple(device_counts), free_memory, fits))
    return NodeFit(node.name, tuple(numa))
