"""Ask the kubelet's PodResources gRPC API what is allocated and allocatable on this node."""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import grpc
import structlog

from numasched.api.allocation import ContainerAllocation
from numasched.api.idset import IdSet
from numasched.exporter.usage import NodeUsage, PodUsage

log = structlog.get_logger("numasched.exporter.podresources")

# The generated modules are untyped; importing them by name keeps mypy out of them.
api_pb2: Any = importlib.import_module("numasched.exporter.podresources.v1.api_pb2")
api_pb2_grpc: Any = importlib.import_module("numasched.exporter.podresources.v1.api_pb2_grpc")


class PodResourcesUnavailable(Exception):
    """The kubelet socket is absent or did not answer List in time."""


def _numa_ids(topology: Any) -> list[int]:
    return sorted(int(node.ID) for node in topology.nodes) if topology is not None else []


def memory_by_numa(entries: Iterable[Any]) -> dict[str, dict[int, int]]:
    """ContainerMemory entries as resource -> NUMA node -> bytes.

    The kubelet reports one size per entry with the set of NUMA nodes it spans; a size spread over
    several nodes is split evenly, any remainder on the lowest node.
    """
    memory: dict[str, dict[int, int]] = {}
    for entry in entries:
        nodes = _numa_ids(entry.topology) if entry.HasField("topology") else []
        size = int(entry.size)
        per_numa = memory.setdefault(str(entry.memory_type), {})
        if not nodes:
            continue
        share, remainder = divmod(size, len(nodes))
        for position, numa in enumerate(nodes):
            per_numa[numa] = per_numa.get(numa, 0) + share + (remainder if position == 0 else 0)
    return {name: per_numa for name, per_numa in memory.items() if per_numa}


def devices_by_resource(entries: Iterable[Any]) -> dict[str, tuple[str, ...]]:
    devices: dict[str, list[str]] = {}
    for entry in entries:
        devices.setdefault(str(entry.resource_name), []).extend(str(i) for i in entry.device_ids)
    return {name: tuple(ids) for name, ids in sorted(devices.items()) if ids}


def usage_from_responses(listing: Any, allocatable: Any | None) -> NodeUsage:
    """Convert List (and GetAllocatableResources, when the kubelet serves it) to NodeUsage."""
    pods: list[PodUsage] = []
    for pod in listing.pod_resources:
        containers: list[ContainerAllocation] = []
        for container in pod.containers:
            allocation = ContainerAllocation(
                name=str(container.name),
                cpuset=IdSet(int(cpu) for cpu in container.cpu_ids),
                devices=devices_by_resource(container.devices),
                memory=memory_by_numa(container.memory),
            )
            if allocation.cpuset or allocation.devices or allocation.memory:
                containers.append(allocation)
        if containers:
            pods.append(PodUsage(namespace=str(pod.namespace), name=str(pod.name), containers=tuple(containers)))
    pods.sort(key=lambda pod: pod.key)
    if allocatable is None:
        return NodeUsage(source="podresources", pods=tuple(pods))
    return NodeUsage(
        source="podresources",
        pods=tuple(pods),
        allocatable_cpus=IdSet(int(cpu) for cpu in allocatable.cpu_ids),
        allocatable_devices=devices_by_resource(allocatable.devices),
        allocatable_memory=memory_by_numa(allocatable.memory),
    )


async def read_pod_resources(socket: Path, timeout: float) -> NodeUsage:
    """List and GetAllocatableResources over the kubelet's unix socket, each within `timeout`."""
    if not socket.exists():
        raise PodResourcesUnavailable(f"socket {socket} does not exist")
    async with grpc.aio.insecure_channel(f"unix://{socket.absolute()}") as channel:
        stub = api_pb2_grpc.PodResourcesListerStub(channel)
        try:
            listing = await stub.List(api_pb2.ListPodResourcesRequest(), timeout=timeout)
        except grpc.aio.AioRpcError as error:
            raise PodResourcesUnavailable(f"List on {socket}: {error.code().name}: {error.details()}") from None
        allocatable: Any | None = None
        try:
            allocatable = await stub.GetAllocatableResources(api_pb2.AllocatableResourcesRequest(), timeout=timeout)
        except grpc.aio.AioRpcError as error:
            # Kubelets before 1.23 (or with the feature gate off) do not serve it.
            log.warning(
                "GetAllocatableResources failed; allocatable computed from the kubelet configuration",
                socket=str(socket),
                code=error.code().name,
                details=error.details(),
            )
    return usage_from_responses(listing, allocatable)
