"""Placement quality of a finished benchmark run, judged the way the nodes would judge it.

For every node the pods bound to it are replayed in bind order through hack/kubelet_model.py, an
independent model of the kubelet written from the kubelet's sources (Topology Manager merge and
policies, static CPU manager and device manager hints, QoS); it shares no code with numasched's
numa-aware providers or policy, so it can contradict them. A pod the model does not admit on the
node's state at that point is counted as a kubelet rejection and takes nothing. An admitted pod holds
what the scheduler decided for it (numasched.io/allocation) where it carries a decision, and
otherwise what the model's kubelet picks, resource by resource.

From the same replay:
* span: pods whose pinned CPUs and devices touch more NUMA nodes than the fewest that the node's
  capacity could hold them on (the width the kubelet calls preferred);
* NVLink: pods given two or more GPUs not all joined pairwise by NVLink (or an NVSwitch) while
  such a set of the same size was free on that node;
* stranded GPUs: free GPUs at the end that no pending GPU request could use with an aligned
  placement (its preferred width, on NUMA nodes with enough free GPUs, NICs and exclusive CPUs).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from itertools import combinations
from typing import Any

import attrs
import kubelet_model  # type: ignore[import-not-found]

from numasched.api.allocation import ContainerAllocation, PodAllocation
from numasched.api.idset import IdSet
from numasched.api.node import NodeInfo
from numasched.api.numamask import NumaMask, iterate_masks
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo
from numasched.api.topology import CpuManagerPolicy, NumaTopology
from numasched.plugins.numaaware.admission import container_request, containers_in_order
from numasched.plugins.numaaware.providers.base import free_resources
from numasched.plugins.numaaware.providers.cpu import guaranteed_cpus
from numasched.plugins.numaaware.providers.device import requested_devices

GPU = "nvidia.com/gpu"
REPLAY_DEVICES = (GPU, "rdma/hca")


@attrs.frozen(slots=True)
class PinnedRequest:
    """What a pod pins on a node with topology: exclusive CPUs and devices per resource."""

    cpus: int
    devices: tuple[tuple[str, int], ...]

    @property
    def empty(self) -> bool:
        return self.cpus == 0 and not self.devices

    def device_count(self, resource: str) -> int:
        return dict(self.devices).get(resource, 0)


def pinned_request(task: TaskInfo, topology: NumaTopology) -> PinnedRequest:
    cpus = 0
    devices: dict[str, int] = {}
    for container in containers_in_order(task):
        if container.init:
            continue
        request = container_request(task, container)
        if topology.policies.cpu_manager_policy == CpuManagerPolicy.STATIC:
            cpus += guaranteed_cpus(request)
        for resource in topology.devices:
            count = requested_devices(request, resource)
            if count:
                devices[resource] = devices.get(resource, 0) + count
    return PinnedRequest(cpus, tuple(sorted(devices.items())))


def _devices_in(topology: NumaTopology, resource: str, ids: Iterable[str], mask: NumaMask) -> int:
    group = topology.devices.get(resource)
    if group is None:
        return 0
    return sum(
        1
        for device in ids
        if (info := group.by_id.get(device)) is not None and info.numa is not None and mask.is_set(info.numa)
    )


def fits_in(
    topology: NumaTopology, request: PinnedRequest, mask: NumaMask, cpus: IdSet, devices: Mapping[str, Sequence[str]]
) -> bool:
    """Whether the given CPUs and device ids inside the mask's NUMA nodes hold the request."""
    if request.cpus and len(cpus & topology.cpus_in(mask)) < request.cpus:
        return False
    return all(
        _devices_in(topology, resource, devices.get(resource, ()), mask) >= count for resource, count in request.devices
    )


def _fingerprint(topology: NumaTopology) -> Hashable:
    """Equal for nodes of the same machine shape and kubelet CPU policy (what widths depend on)."""
    devices = tuple(
        (resource, tuple((d.id, d.numa, d.healthy) for d in group.devices))
        for resource, group in sorted(topology.devices.items())
    )
    cpus = tuple(sorted((numa, len(ids & topology.allocatable_cpus)) for numa, ids in topology.cpus_by_numa.items()))
    return (topology.numa_ids, cpus, devices, topology.policies.cpu_manager_policy)


class WidthCache:
    """necessary_width per machine shape and request: many nodes share a shape."""

    def __init__(self) -> None:
        self._widths: dict[tuple[Hashable, PinnedRequest], int | None] = {}
        self._fingerprints: dict[str, Hashable] = {}

    def width(self, topology: NumaTopology, request: PinnedRequest) -> int | None:
        fingerprint = self._fingerprints.get(topology.node_name)
        if fingerprint is None:
            fingerprint = self._fingerprints[topology.node_name] = _fingerprint(topology)
        key = (fingerprint, request)
        if key not in self._widths:
            self._widths[key] = necessary_width(topology, request)
        return self._widths[key]


def necessary_width(topology: NumaTopology, request: PinnedRequest) -> int | None:
    """The fewest NUMA nodes the node's capacity could hold the request on; None if none could."""
    all_devices = {resource: [d.id for d in group.devices if d.healthy] for resource, group in topology.devices.items()}
    for mask in iterate_masks(topology.numa_ids):
        if fits_in(topology, request, mask, topology.allocatable_cpus, all_devices):
            return mask.count()
    return None


def _numa_of(allocation: PodAllocation, topology: NumaTopology) -> NumaMask:
    ids: set[int] = set()
    for container in allocation.containers:
        ids.update(topology.cpu_info[cpu].numa for cpu in container.cpuset if cpu in topology.cpu_info)
        for resource, devices in container.devices.items():
            group = topology.devices.get(resource)
            if group is None:
                continue
            for device in devices:
                info = group.by_id.get(device)
                if info is not None and info.numa is not None:
                    ids.add(info.numa)
        for per_numa in container.memory.values():
            ids.update(numa for numa, size in per_numa.items() if size)
    return NumaMask.from_ids(ids)


def effective_allocation(decision: PodAllocation | None, kubelet: PodAllocation | None) -> PodAllocation | None:
    """Per container and resource: the scheduler's decision where it made one, else the kubelet's."""
    if decision is None:
        return kubelet
    if kubelet is None:
        return decision
    decided = {container.name: container for container in decision.containers}
    merged: list[ContainerAllocation] = []
    names = [c.name for c in kubelet.containers] + [c.name for c in decision.containers]
    for name in dict.fromkeys(names):
        own = decided.get(name)
        theirs = next((c for c in kubelet.containers if c.name == name), None)
        if own is None or theirs is None:
            merged.append(own or theirs)  # type: ignore[arg-type]
            continue
        devices = {**theirs.devices, **own.devices}
        memory = {**theirs.memory, **own.memory}
        merged.append(ContainerAllocation(name, own.cpuset or theirs.cpuset, own.numa or theirs.numa, devices, memory))
    return PodAllocation(tuple(merged))


def is_nvlink_set(topology: NumaTopology, resource: str, devices: Sequence[str]) -> bool:
    """Every pair joined directly by NVLink or through an NVSwitch."""
    for first, second in combinations(devices, 2):
        link = topology.link((resource, first), (resource, second))
        if link is None or not (link.nvlinks > 0 or link.nvswitch):
            return False
    return True


def nvlink_set_free(topology: NumaTopology, resource: str, free: Sequence[str], size: int) -> bool:
    return any(is_nvlink_set(topology, resource, subset) for subset in combinations(free, size))


def _conflicts(node: NodeInfo, decision: PodAllocation) -> bool:
    if decision.cpus() & node.numa_usage.cpus:
        return True
    return any(
        decision.devices(resource) & node.numa_usage.devices.get(resource, frozenset())
        for resource in decision.resources()
    )


@attrs.define(slots=True)
class QualityReport:
    placed: int = 0
    rejected: int = 0
    decision_conflicts: int = 0
    pinned_pods: int = 0
    span_excess: int = 0
    gpu_set_pods: int = 0
    nvlink_missed: int = 0
    free_gpus: int = 0
    stranded_gpus: int | None = None
    rejection_examples: list[str] = attrs.field(factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "placed": self.placed,
            "rejected": self.rejected,
            "decision_conflicts": self.decision_conflicts,
            "pinned_pods": self.pinned_pods,
            "span_excess": self.span_excess,
            "gpu_set_pods": self.gpu_set_pods,
            "nvlink_missed": self.nvlink_missed,
            "free_gpus": self.free_gpus,
            "stranded_gpus": self.stranded_gpus,
            "rejection_examples": list(self.rejection_examples),
        }


def kubelet_allocation(task: TaskInfo, admission: Any) -> PodAllocation:
    """What the model's kubelet gave each container of an admitted pod, as an allocation record."""
    containers = []
    for name, (cpus, devices) in admission.containers.items():
        ids = {resource: tuple(sorted(found)) for resource, found in devices.items() if found}
        containers.append(ContainerAllocation(name, IdSet(sorted(cpus)), None, ids))
    return PodAllocation(tuple(containers))


def replay_node(
    node: NodeInfo, tasks: Sequence[TaskInfo], report: QualityReport, widths: WidthCache | None = None
) -> NodeInfo:
    """Admit the node's pods in bind order as its kubelet would; returns the node as it ends up."""
    state = NodeInfo.create(node.name, node.allocatable, node.capacity)
    state.topology = node.topology
    topology = node.topology
    cache = widths or WidthCache()
    kubelet = kubelet_model.NodeState.empty(kubelet_model.node_from_topology(topology)) if topology else None
    for task in tasks:
        report.placed += 1
        if topology is None or kubelet is None:
            state.add_task(attrs.evolve(task, allocation=None))
            continue
        admission = kubelet_model.admit(kubelet, kubelet_model.pod_from_task(task))
        if not admission.admitted:
            report.rejected += 1
            if len(report.rejection_examples) < 5:
                policy = topology.policies.topology_manager_policy.value
                report.rejection_examples.append(f"{task.key} on {node.name} ({policy}): {admission.reason}")
            continue
        free_before = free_resources(state)
        decision = task.allocation
        if decision is not None and _conflicts(state, decision):
            report.decision_conflicts += 1
        held = effective_allocation(decision, kubelet_allocation(task, admission))
        if held is not None:
            kubelet.take(held.cpus(), {resource: held.devices(resource) for resource in held.resources()})
        _judge(topology, task, held, free_before.free_devices(GPU), report, cache)
        state.add_task(attrs.evolve(task, allocation=held))
    return state


def _judge(
    topology: NumaTopology,
    task: TaskInfo,
    held: PodAllocation | None,
    free_gpus: Sequence[str],
    report: QualityReport,
    widths: WidthCache,
) -> None:
    request = pinned_request(task, topology)
    if request.empty or held is None:
        return
    report.pinned_pods += 1
    width = widths.width(topology, request)
    if width is not None and _numa_of(held, topology).count() > width:
        report.span_excess += 1
    gpus = sorted(held.devices(GPU))
    if len(gpus) >= 2 and GPU in topology.devices:
        report.gpu_set_pods += 1
        if not is_nvlink_set(topology, GPU, gpus) and nvlink_set_free(topology, GPU, free_gpus, len(gpus)):
            report.nvlink_missed += 1


def stranded_gpus(
    state: NodeInfo, pending: Sequence[PinnedRequest], widths: WidthCache | None = None
) -> tuple[int, int]:
    """(free GPUs, free GPUs no pending request could use aligned) on one replayed node."""
    topology = state.topology
    if topology is None or GPU not in topology.devices:
        return 0, 0
    free = free_resources(state)
    free_gpus = free.free_devices(GPU)
    if not free_gpus:
        return 0, 0
    usable: set[str] = set()
    group = topology.devices[GPU]
    cache = widths or WidthCache()
    for request in pending:
        width = cache.width(topology, request)
        if width is None:
            continue
        for mask in iterate_masks(topology.numa_ids):
            if mask.count() != width:
                continue
            if fits_in(topology, request, mask, free.cpus, free.devices):
                usable.update(
                    d
                    for d in free_gpus
                    if (info := group.by_id.get(d)) is not None and info.numa is not None and mask.is_set(info.numa)
                )
    return len(free_gpus), len(free_gpus) - len(usable)


def evaluate(snapshot: ClusterSnapshot, bind_order: Sequence[str], pending: Sequence[TaskInfo]) -> QualityReport:
    """Replay every node's pods (bind_order: pod keys, first bound first) and measure the result.

    pending: pods of ours still waiting at the end, for the stranded-GPU count.
    """
    order = {key: index for index, key in enumerate(bind_order)}
    report = QualityReport()
    widths = WidthCache()
    states: list[NodeInfo] = []
    for name in sorted(snapshot.nodes):
        node = snapshot.nodes[name]
        tasks = sorted((t for t in node.tasks.values() if t.key in order), key=lambda t: order[t.key])
        states.append(replay_node(node, tasks, report, widths))
    # Pending requests as each kind of node would pin them (that depends on its CPU policy and
    # device names only).
    shapes_by_kind: dict[Hashable, list[PinnedRequest]] = {}
    for state in states:
        topology = state.topology
        if topology is None or GPU not in topology.devices:
            continue
        kind = (topology.policies.cpu_manager_policy, tuple(sorted(topology.devices)))
        shapes = shapes_by_kind.get(kind)
        if shapes is None:
            found = {pinned_request(task, topology) for task in pending}
            shapes = shapes_by_kind[kind] = sorted(
                (r for r in found if r.device_count(GPU)), key=lambda r: (r.cpus, r.devices)
            )
        free, stranded = stranded_gpus(state, shapes, widths)
        report.free_gpus += free
        if shapes:
            report.stranded_gpus = (report.stranded_gpus or 0) + stranded
    return report
