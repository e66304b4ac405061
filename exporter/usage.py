"""What is in use on the node: exclusive CPUs, devices and pinned memory per pod and container.

Two sources, best first: the kubelet PodResources API (exporter/podresources/client.py) and, when
its socket is absent, the CPU manager checkpoint file, which knows only CPUs and pod UIDs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs
import structlog

from numasched.api.allocation import ContainerAllocation
from numasched.api.idset import IdSet, IdSetError

log = structlog.get_logger("numasched.exporter.usage")


@attrs.frozen(slots=True)
class PodUsage:
    # PodResources names pods; the checkpoint only knows UIDs. Either may be filled in later
    # from the API server's view of the node's pods.
    namespace: str = ""
    name: str = ""
    uid: str = ""
    containers: tuple[ContainerAllocation, ...] = ()

    @property
    def key(self) -> str:
        """spec.podAllocations key: namespace/name, or the UID when the name is unknown."""
        return f"{self.namespace}/{self.name}" if self.name else self.uid


@attrs.frozen(slots=True)
class NodeUsage:
    source: str  # "podresources", "checkpoint" or "none"
    pods: tuple[PodUsage, ...] = ()
    # From GetAllocatableResources: what the kubelet will hand out; None when not reported.
    allocatable_cpus: IdSet | None = None
    allocatable_devices: dict[str, tuple[str, ...]] | None = None
    allocatable_memory: dict[str, dict[int, int]] | None = None

    def used_cpus(self) -> IdSet:
        result = IdSet()
        for pod in self.pods:
            for container in pod.containers:
                result = result | container.cpuset
        return result

    def used_devices(self, resource: str) -> set[str]:
        return {
            device
            for pod in self.pods
            for container in pod.containers
            for device in container.devices.get(resource, ())
        }


NO_USAGE = NodeUsage(source="none")


def parse_cpu_manager_state(document: Any, source: str = "<inline>") -> NodeUsage:
    """The kubelet's cpu_manager_state checkpoint: {policyName, defaultCpuSet, entries}."""
    if not isinstance(document, Mapping):
        log.warning("CPU manager checkpoint is not an object; no usage known", path=source)
        return NodeUsage(source="checkpoint")
    entries = document.get("entries") or {}
    if not isinstance(entries, Mapping):
        log.warning("CPU manager checkpoint entries are not an object; no usage known", path=source)
        return NodeUsage(source="checkpoint")
    pods: list[PodUsage] = []
    for pod_uid, containers in sorted(entries.items()):
        if not isinstance(containers, Mapping):
            log.warning("CPU manager checkpoint entry is not an object; pod skipped", path=source, pod_uid=pod_uid)
            continue
        allocations: list[ContainerAllocation] = []
        for container, cpuset in sorted(containers.items()):
            try:
                cpus = IdSet.parse(str(cpuset))
            except IdSetError as error:
                log.warning(
                    "CPU manager checkpoint cpuset unreadable; container skipped",
                    path=source,
                    pod_uid=pod_uid,
                    container=container,
                    error=str(error),
                )
                continue
            if cpus:
                allocations.append(ContainerAllocation(str(container), cpuset=cpus))
        if allocations:
            pods.append(PodUsage(uid=str(pod_uid), containers=tuple(allocations)))
    return NodeUsage(source="checkpoint", pods=tuple(pods))


def read_cpu_manager_state(path: Path) -> NodeUsage:
    try:
        text = path.read_text()
    except OSError as error:
        log.warning(
            "CPU manager checkpoint unreadable; no usage known",
            path=str(path),
            error=error.strerror or str(error),
        )
        return NO_USAGE
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        log.warning("CPU manager checkpoint is not JSON; no usage known", path=str(path), error=str(error))
        return NodeUsage(source="checkpoint")
    return parse_cpu_manager_state(document, str(path))


def with_pod_names(usage: NodeUsage, pods: Mapping[str, tuple[str, str]]) -> NodeUsage:
    """Fill names from UIDs and UIDs from names using the API server's pods on this node.

    `pods` maps a pod UID to (namespace, name).
    """
    by_name = {names: uid for uid, names in pods.items()}
    filled: list[PodUsage] = []
    for pod in usage.pods:
        if not pod.name and pod.uid in pods:
            namespace, name = pods[pod.uid]
            pod = attrs.evolve(pod, namespace=namespace, name=name)
        elif pod.name and not pod.uid:
            pod = attrs.evolve(pod, uid=by_name.get((pod.namespace, pod.name), ""))
        filled.append(pod)
    return attrs.evolve(usage, pods=tuple(filled))
