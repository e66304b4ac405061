"""Binding: what the scheduler asks the cluster to do with a placed pod, and the annotations that
carry its CPU and device decision to the node side."""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping, Sequence
from json.encoder import encode_basestring_ascii as _quoted
from typing import Protocol

import attrs

from numasched.api.allocation import (
    ALLOCATION_ANNOTATION,
    VOLCANO_DECISION_ANNOTATION,
    PodAllocation,
)
from numasched.api.dra_claims import without_claims
from numasched.api.idset import IdSet
from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.task import TaskInfo
from numasched.api.topology import NumaTopology


@attrs.frozen(slots=True)
class BindRequest:
    task: TaskInfo
    node_name: str
    annotations: dict[str, str] = attrs.field(factory=dict)


class BindStatus(enum.StrEnum):
    BOUND = "Bound"
    CONFLICT = "Conflict"  # the pod is already bound (409)
    GONE = "Gone"  # the pod no longer exists (404)
    FAILED = "Failed"  # anything retryable: 5xx, timeout, connection error


@attrs.frozen(slots=True)
class BindOutcome:
    status: BindStatus
    message: str = ""


class Binder(Protocol):
    """What the scheduling loop binds through: the Kubernetes binder (cache/kube/binder.py) and the
    simulated cluster (cache/simcluster.py) both implement it. bind is called once per placed pod
    from the loop's bind workers, bounded by the loop's bind timeout; it reports the outcome
    rather than raising (whatever it does raise fails that one bind)."""

    async def bind(self, request: BindRequest) -> BindOutcome: ...


class StatusReporter(Protocol):
    """Where the loop tells a person what happened: a pod bound, a pod that does not fit and why,
    a PodGroup's phase. Best effort: the loop bounds each call and logs what it raises."""

    async def scheduled(self, task: TaskInfo, node_name: str) -> None: ...

    async def unschedulable(self, task: TaskInfo, message: str) -> None: ...

    async def job_status(self, job: JobInfo, phase: str, message: str) -> None: ...


def volcano_decision(allocation: PodAllocation, topology: NumaTopology | None) -> str:
    """volcano.sh/topology-decision: per NUMA node, the CPUs (list format) and device ids there.

    Where every container's CPUs sit on the one NUMA node chosen for it (what a placement of ours
    gives), the text follows from the allocation and the NUMA nodes of its devices alone: it is
    kept with the allocation object under those, since one completed admission is bound on many
    nodes alike."""
    layout = _simple_layout(allocation, topology)
    if layout is None:
        return _decision_text(allocation, topology)
    texts = allocation.texts_by_layout
    text = texts.get(layout)
    if text is None:
        text = texts[layout] = _decision_text(allocation, topology)
    return text


def _simple_layout(allocation: PodAllocation, topology: NumaTopology | None) -> Hashable | None:
    """The NUMA node of each device id the allocation names (-1: unknown), in its order, when
    each container with CPUs has exactly one NUMA node chosen and all its CPUs are on it; None
    otherwise (the text then depends on how the node's CPUs split across NUMA nodes)."""
    if topology is None:
        return None
    device_numas: list[object] = ["volcano-decision"]
    for container in allocation.containers:
        cpus = container.cpuset
        if cpus:
            numa = container.numa
            if numa is None or numa.count() != 1:
                return None
            # The one NUMA id: the mask's only bit.
            on_numa = topology.cpus_by_numa.get(numa.bits.bit_length() - 1)
            if on_numa is None or cpus.count_common(on_numa) != len(cpus):
                return None
        for resource, ids in container.devices.items():
            group = topology.devices.get(resource)
            by_id = group.by_id if group is not None else {}
            for device_id in ids:
                device = by_id.get(device_id)
                device_numas.append(device.numa if device is not None and device.numa is not None else -1)
    return tuple(device_numas)


def _decision_text(allocation: PodAllocation, topology: NumaTopology | None) -> str:
    """volcano_decision worked out. The JSON text is written here rather than by json.dumps (a
    binding per pod writes it): keys sorted as strings, no spaces, strings quoted as json.dumps
    quotes them, the same text."""
    per_numa: dict[int, dict[str, list[str]]] = {}
    cpus_per_numa: dict[int, IdSet] = {}
    for container in allocation.containers:
        # The NUMA nodes chosen are part of the decision even where no id was pinned there.
        chosen = container.numa.ids() if container.numa is not None else ()
        for numa_id in chosen:
            per_numa.setdefault(numa_id, {})
        left = container.cpuset
        if topology is not None and left:
            left = _split_by_numa(left, chosen, topology.cpus_by_numa, cpus_per_numa)
        if left:
            # CPUs the topology does not list.
            cpus_per_numa[-1] = cpus_per_numa.get(-1, _NO_CPUS) | left
        for resource, ids in container.devices.items():
            group = topology.devices.get(resource) if topology is not None else None
            by_id = group.by_id if group is not None else {}
            for device_id in ids:
                device = by_id.get(device_id)
                numa = device.numa if device is not None and device.numa is not None else -1
                per_numa.setdefault(numa, {}).setdefault(resource, []).append(device_id)
    for numa in cpus_per_numa:
        per_numa.setdefault(numa, {})
    entries: list[str] = []
    for name, numa in sorted((str(numa) if numa >= 0 else "unknown", numa) for numa in per_numa):
        entry = {resource: ",".join(members) for resource, members in per_numa[numa].items()}
        if numa in cpus_per_numa:
            entry["cpu"] = cpus_per_numa[numa].format()
        fields = ",".join(f"{_quoted(key)}:{_quoted(entry[key])}" for key in sorted(entry))
        entries.append(f"{_quoted(name)}:{{{fields}}}")
    return '{"numa":{' + ",".join(entries) + "}}"


def _split_by_numa(
    cpus: IdSet, chosen: Sequence[int], cpus_by_numa: Mapping[int, IdSet], cpus_per_numa: dict[int, IdSet]
) -> IdSet:
    """Adds `cpus` to cpus_per_numa by the NUMA node each is on; returns those on none."""
    if len(chosen) == 1:
        numa = chosen[0]
        # All of them on it (counted in C, no set built).
        if cpus.count_common(cpus_by_numa.get(numa, _NO_CPUS)) == len(cpus):
            # Most containers: all CPUs on the one NUMA node chosen.
            cpus_per_numa[numa] = cpus_per_numa[numa] | cpus if numa in cpus_per_numa else cpus
            return _NO_CPUS
    left = cpus
    # The chosen NUMA nodes first: they hold the CPUs, so the search mostly ends there (a CPU has
    # one NUMA node, so the order does not change the answer).
    for numa in (*chosen, *cpus_by_numa):
        on_numa = cpus_by_numa.get(numa)
        if on_numa is None:
            continue
        here = left & on_numa
        if here:
            cpus_per_numa[numa] = cpus_per_numa.get(numa, _NO_CPUS) | here
            left = left - here
            if not left:
                break
    return left


_NO_CPUS = IdSet()


def binding_annotations(task: TaskInfo, node: NodeInfo | None) -> dict[str, str]:
    """The annotations the Binding carries (the API server copies them onto the pod)."""
    allocation = None if task.allocation is None else without_claims(task.allocation)
    if allocation is None or allocation.names_nothing:
        return {}
    topology = node.topology if node is not None else None
    if topology is not None and not topology.cpu_ids_known:
        # Placeholder ids from a count-only topology must not reach the node; keep the NUMA choice.
        allocation = PodAllocation(tuple(attrs.evolve(c, cpuset=IdSet(), devices={}) for c in allocation.containers))
    return {
        ALLOCATION_ANNOTATION: allocation.json_text,
        VOLCANO_DECISION_ANNOTATION: volcano_decision(allocation, topology),
    }
