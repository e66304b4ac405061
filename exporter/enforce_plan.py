"""What the agent should pin, and how a decision compares with what the node did. Pure: no I/O.

A pod is ours when it carries numasched.io/allocation. Each of its running containers with a
decided cpuset is pinned by the agent, except those the kubelet's static CPU manager pins itself
(a Guaranteed pod's container asking for a whole number of CPUs): the kubelet owns their cgroups
and reports their CPUs through PodResources, which is what they are compared with.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from numasched.api.allocation import (
    ALLOCATION_ANNOTATION,
    AllocationError,
    ContainerAllocation,
    PodAllocation,
    allocation_from_json,
    merge_pod_allocations,
)
from numasched.api.idset import IdSet
from numasched.api.quantity import QuantityError, parse_milli
from numasched.api.task import whole_cpus
from numasched.exporter.enforce_cgroup import ContainerId, QosClass, parse_container_id
from numasched.exporter.usage import NodeUsage, PodUsage

# Resource labels of a mismatch besides device resource names: the CPUs and the memory NUMA nodes.
CPU = "cpu"
MEMORY_NODES = "memory"


@attrs.frozen(slots=True)
class ContainerView:
    name: str
    # Of the running instance; None while the container is not running (nothing to pin yet).
    container_id: ContainerId | None
    # The static CPU manager pins this container itself (Guaranteed pod, whole CPUs requested).
    kubelet_pins_if_static: bool


@attrs.frozen(slots=True)
class PodView:
    uid: str
    namespace: str
    name: str
    node: str
    qos: QosClass
    containers: tuple[ContainerView, ...] = ()
    # None: not decided by numasched (no annotation), or the annotation is unreadable (problem says why).
    allocation: PodAllocation | None = None
    problem: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def decided(self) -> bool:
        return self.allocation is not None or bool(self.problem)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _cpu_milli(resources: Mapping[str, Any], field: str) -> int | None:
    raw = _mapping(resources.get(field)).get("cpu")
    if raw is None:
        return None
    try:
        return parse_milli(raw)
    except (QuantityError, ValueError, TypeError):
        return None


def qos_of(pod: Mapping[str, Any]) -> QosClass:
    """status.qosClass (set by the API server) or, when absent, computed as the kubelet does:
    Guaranteed when every container limits CPU and memory with requests equal to limits,
    BestEffort when none asks for either, Burstable otherwise."""
    reported = _mapping(pod.get("status")).get("qosClass")
    if reported in {item.value for item in QosClass}:
        return QosClass(reported)
    spec = _mapping(pod.get("spec"))
    containers = [_mapping(c) for c in _list(spec.get("containers")) + _list(spec.get("initContainers"))]
    any_asked = guaranteed = False
    guaranteed = bool(containers)
    for container in containers:
        resources = _mapping(container.get("resources"))
        limits, requests = _mapping(resources.get("limits")), _mapping(resources.get("requests"))
        for name in ("cpu", "memory"):
            if name in limits or name in requests:
                any_asked = True
            if name not in limits or requests.get(name, limits[name]) != limits[name]:
                guaranteed = False
    if guaranteed:
        return QosClass.GUARANTEED
    return QosClass.BURSTABLE if any_asked else QosClass.BEST_EFFORT


def _whole_cpu_request(container: Mapping[str, Any]) -> bool:
    resources = _mapping(container.get("resources"))
    requested = _cpu_milli(resources, "requests")
    if requested is None:
        requested = _cpu_milli(resources, "limits")  # requests default to limits
    return requested is not None and whole_cpus(requested) > 0


def _running_ids(status: Mapping[str, Any]) -> dict[str, ContainerId]:
    ids: dict[str, ContainerId] = {}
    for entry in _list(status.get("containerStatuses")) + _list(status.get("initContainerStatuses")):
        fields = _mapping(entry)
        if "running" not in _mapping(fields.get("state")):
            continue
        container_id = parse_container_id(fields.get("containerID"))
        if isinstance(fields.get("name"), str) and container_id is not None:
            ids[fields["name"]] = container_id
    return ids


def pod_view(pod: Mapping[str, Any]) -> PodView:
    """The facts the agent needs from a pod as the API server serves it (camelCase JSON); never
    raises: an unreadable annotation becomes `problem`."""
    metadata, spec = _mapping(pod.get("metadata")), _mapping(pod.get("spec"))
    qos = qos_of(pod)
    running = _running_ids(_mapping(pod.get("status")))
    containers = tuple(
        ContainerView(
            name=fields["name"],
            container_id=running.get(fields["name"]),
            kubelet_pins_if_static=qos is QosClass.GUARANTEED and _whole_cpu_request(fields),
        )
        for fields in (_mapping(c) for c in _list(spec.get("initContainers")) + _list(spec.get("containers")))
        if isinstance(fields.get("name"), str)
    )
    annotation = _mapping(metadata.get("annotations")).get(ALLOCATION_ANNOTATION)
    allocation: PodAllocation | None = None
    problem = ""
    if annotation is not None:
        try:
            allocation = allocation_from_json(str(annotation))
        except AllocationError as error:
            problem = f"{ALLOCATION_ANNOTATION}: {error}"
    return PodView(
        uid=str(metadata.get("uid") or ""),
        namespace=str(metadata.get("namespace") or ""),
        name=str(metadata.get("name") or ""),
        node=str(spec.get("nodeName") or ""),
        qos=qos,
        containers=containers,
        allocation=allocation,
        problem=problem,
    )


@attrs.frozen(slots=True)
class PinTarget:
    pod: PodView
    container: str
    container_id: ContainerId
    cpus: IdSet
    # NUMA nodes of memory: the decision's, else those of the decided CPUs; None when neither says.
    mems: IdSet | None


@attrs.frozen(slots=True)
class PodPlan:
    targets: tuple[PinTarget, ...] = ()
    # Containers the kubelet pins (compared through PodResources, never written).
    kubelet_pinned: tuple[str, ...] = ()


def expected_mems(decision: ContainerAllocation, numa_of_cpu: Mapping[int, int]) -> IdSet | None:
    if decision.numa is not None and not decision.numa.is_empty():
        return IdSet(decision.numa.ids())
    nodes = {numa_of_cpu[cpu] for cpu in decision.cpuset if cpu in numa_of_cpu}
    return IdSet(nodes) if nodes else None


def plan_pod(pod: PodView, static_cpu_manager: bool, numa_of_cpu: Mapping[int, int]) -> PodPlan:
    if pod.allocation is None:
        return PodPlan()
    decisions = {container.name: container for container in pod.allocation.containers}
    targets: list[PinTarget] = []
    kubelet_pinned: list[str] = []
    for container in pod.containers:
        decision = decisions.get(container.name)
        if decision is None or not decision.cpuset:
            continue
        if static_cpu_manager and container.kubelet_pins_if_static:
            kubelet_pinned.append(container.name)
            continue
        if container.container_id is None:
            continue
        targets.append(
            PinTarget(
                pod, container.name, container.container_id, decision.cpuset, expected_mems(decision, numa_of_cpu)
            )
        )
    return PodPlan(tuple(targets), tuple(kubelet_pinned))


@attrs.frozen(slots=True)
class Observation:
    """What the node did for one container; None where it is not known."""

    cpus: IdSet | None = None
    mems: IdSet | None = None
    devices: Mapping[str, tuple[str, ...]] | None = None


@attrs.frozen(slots=True)
class Mismatch:
    pod: PodView
    container: str
    resource: str
    predicted: str
    observed: str

    @property
    def key(self) -> tuple[str, str, str, str]:
        """One mismatch: reported once, however many periods it lasts."""
        return (self.pod.uid, self.container, self.resource, self.observed)

    def message(self) -> str:
        return (
            f"container {self.container}: {self.resource} decided {self.predicted or '(none)'}, "
            f"the node has {self.observed or '(none)'}"
        )


def _ids(ids: Iterable[str]) -> str:
    return ",".join(sorted(ids))


def compare(
    pod: PodView, decision: ContainerAllocation, mems: IdSet | None, observation: Observation
) -> list[Mismatch]:
    """The resources where the node differs from the decision; unknown observations are no mismatch."""
    found: list[Mismatch] = []
    if observation.cpus is not None and decision.cpuset and observation.cpus != decision.cpuset:
        found.append(Mismatch(pod, decision.name, CPU, decision.cpuset.format(), observation.cpus.format()))
    if observation.mems is not None and mems is not None and observation.mems != mems:
        found.append(Mismatch(pod, decision.name, MEMORY_NODES, mems.format(), observation.mems.format()))
    if observation.devices is not None:
        for resource, ids in sorted(decision.devices.items()):
            held = observation.devices.get(resource, ())
            if set(held) != set(ids):
                found.append(Mismatch(pod, decision.name, resource, _ids(ids), _ids(held)))
    return found


def pinned_cpus(cpus: IdSet, node_cpus: IdSet) -> IdSet:
    """The CPUs a container's cpuset holds: none when it may run on every CPU of the node (an
    unpinned container holds nothing exclusively), else the cpuset itself."""
    return IdSet() if not cpus or node_cpus.is_subset(cpus) else cpus


def with_observed(usage: NodeUsage, observed: Sequence[PodUsage]) -> NodeUsage:
    """The usage with what the agent read back from the cgroups added, container by container,
    so that the published podAllocations hold what the node does, not what was predicted."""
    if not observed:
        return usage
    pods = list(usage.pods)
    for seen in observed:
        index = next(
            (
                position
                for position, pod in enumerate(pods)
                if (pod.uid and pod.uid == seen.uid) or (pod.name and pod.key == seen.key)
            ),
            None,
        )
        if index is None:
            pods.append(seen)
            continue
        known = pods[index]
        merged = merge_pod_allocations(PodAllocation(known.containers), PodAllocation(seen.containers))
        pods[index] = attrs.evolve(
            known,
            uid=known.uid or seen.uid,
            namespace=known.namespace or seen.namespace,
            name=known.name or seen.name,
            containers=merged.containers,
        )
    pods.sort(key=lambda pod: pod.key)
    return attrs.evolve(usage, pods=tuple(pods))
