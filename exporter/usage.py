"""What is in use on the node: exclusive CPUs, devices and pinned memory per pod and container.

Two sources, best first: the kubelet PodResources API (exporter/podresources/client.py) and, when
its socket is absent, the kubelet's checkpoint files, which know pod UIDs but not names: the CPU
manager's (exclusive CPUs) and the device manager's (device ids per container), when readable.
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
    # Whether the device holdings are known (PodResources, or the device manager checkpoint).
    devices_known: bool = False

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
    except (OSError, UnicodeDecodeError) as error:
        log.warning(
            "CPU manager checkpoint unreadable; no usage known",
            path=str(path),
            error=getattr(error, "strerror", None) or str(error),
        )
        return NO_USAGE
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        log.warning("CPU manager checkpoint is not JSON; no usage known", path=str(path), error=str(error))
        return NodeUsage(source="checkpoint")
    return parse_cpu_manager_state(document, str(path))


# The device manager's checkpoint (pkg/kubelet/cm/devicemanager/checkpoint): Data.PodDeviceEntries
# [{PodUID, ContainerName, ResourceName, DeviceIDs, AllocResp}], DeviceIDs keyed by NUMA node
# ({"0": [ids], "-1": [ids]}) since Kubernetes 1.20, a plain list before.
DeviceHoldings = dict[str, dict[str, dict[str, tuple[str, ...]]]]  # pod uid -> container -> resource -> ids


def _entry_device_ids(raw: Any) -> list[str] | None:
    if isinstance(raw, list):
        return [str(device_id) for device_id in raw]
    if isinstance(raw, Mapping):
        ids: list[str] = []
        for per_numa in raw.values():
            if not isinstance(per_numa, list):
                return None
            ids.extend(str(device_id) for device_id in per_numa)
        return ids
    return None


def parse_device_checkpoint(document: Any, source: str = "<inline>") -> DeviceHoldings | None:
    """Device ids per pod UID and container; None when the file cannot say (holdings unknown)."""
    data = document.get("Data") if isinstance(document, Mapping) else None
    entries = data.get("PodDeviceEntries") if isinstance(data, Mapping) else None
    if entries is None and isinstance(data, Mapping):
        entries = []  # no pod holds a device
    if not isinstance(entries, list):
        log.warning("device manager checkpoint has no Data.PodDeviceEntries list; device use unknown", path=source)
        return None
    holdings: DeviceHoldings = {}
    for index, entry in enumerate(entries):
        fields = entry if isinstance(entry, Mapping) else {}
        pod_uid, container, resource = (fields.get(key) for key in ("PodUID", "ContainerName", "ResourceName"))
        ids = _entry_device_ids(fields.get("DeviceIDs"))
        if not all(isinstance(value, str) and value for value in (pod_uid, container, resource)) or ids is None:
            # One unreadable entry hides which devices it holds: the whole file cannot be trusted.
            log.warning("device manager checkpoint entry unreadable; device use unknown", path=source, entry=index)
            return None
        per_resource = holdings.setdefault(str(pod_uid), {}).setdefault(str(container), {})
        per_resource[str(resource)] = tuple(dict.fromkeys([*per_resource.get(str(resource), ()), *ids]))
    return holdings


def read_device_checkpoint(path: Path) -> DeviceHoldings | None:
    try:
        document = json.loads(path.read_text())
    except OSError as error:
        log.warning(
            "device manager checkpoint unreadable; device use unknown",
            path=str(path),
            error=getattr(error, "strerror", None) or str(error),
        )
        return None
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as error:
        log.warning("device manager checkpoint is not JSON; device use unknown", path=str(path), error=str(error))
        return None
    return parse_device_checkpoint(document, str(path))


def with_device_holdings(usage: NodeUsage, holdings: DeviceHoldings | None) -> NodeUsage:
    """The checkpoint usage with each container's devices added (pods holding only devices too)."""
    if holdings is None:
        return usage
    pods = {pod.uid: pod for pod in usage.pods}
    for pod_uid, containers in sorted(holdings.items()):
        pod = pods.get(pod_uid, PodUsage(uid=pod_uid))
        by_name = {container.name: container for container in pod.containers}
        for name, devices in sorted(containers.items()):
            container = by_name.get(name, ContainerAllocation(name))
            by_name[name] = attrs.evolve(container, devices={**container.devices, **devices})
        pods[pod_uid] = attrs.evolve(pod, containers=tuple(by_name.values()))
    return attrs.evolve(usage, pods=tuple(pods[uid] for uid in sorted(pods)), devices_known=True)


def read_checkpoints(cpu_manager_state: Path, device_checkpoint: Path | None) -> NodeUsage:
    """Use from the kubelet's checkpoint files, when the PodResources API is unavailable."""
    # source stays "none" when the CPU manager's file is unreadable: CPU use is then unknown even if
    # the device manager's file says which devices are held.
    usage = read_cpu_manager_state(cpu_manager_state)
    if device_checkpoint is None:
        return usage
    return with_device_holdings(usage, read_device_checkpoint(device_checkpoint))


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
