"""Queue status.allocated, written as Volcano's scheduler writes it at the end of each session.

Volcano sums, per queue, the requests of every task in an allocated status (Allocated, Pipelined,
Binding, Bound, Running) and writes the sum as a ResourceList to the Queue's status.allocated when
it differs from what is there (framework/session.go updateQueueStatus). The quantities are written
in Kubernetes' canonical form: CPU and scalar resources in milli-units (DecimalSI), memory in bytes
(BinarySI when a whole number of Ki, else DecimalSI), as resource.Quantity prints them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Protocol

from numasched.api.job import JobInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import QueueInfo
from numasched.cache.events import EventType, ObjectEvent
from numasched.cache.simcluster import SimCluster
from numasched.plugins.queue_share import ALLOCATED_STATUSES

_DECIMAL_SUFFIXES = {-3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T", 15: "P", 18: "E"}
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")


def decimal_quantity(amount: int, exponent: int) -> str:
    """amount x 10^exponent in canonical DecimalSI (exponent -3 or 0): the largest suffix that
    keeps the number whole."""
    if amount == 0:
        return "0"
    while amount % 1000 == 0 and exponent < 18:
        amount //= 1000
        exponent += 3
    return f"{amount}{_DECIMAL_SUFFIXES[exponent]}"


def binary_quantity(amount: int) -> str:
    """A byte count in canonical BinarySI: the largest power-of-1024 suffix that keeps it whole;
    under 1024 or not a whole number of Ki, Kubernetes prints it as DecimalSI."""
    if abs(amount) < 1024 or amount % 1024 != 0:
        return decimal_quantity(amount, 0)
    index = 0
    while amount % 1024 == 0 and index < len(_BINARY_SUFFIXES) - 1:
        amount //= 1024
        index += 1
    return f"{amount}{_BINARY_SUFFIXES[index]}"


def resource_list(resource: Resource) -> dict[str, str]:
    """Volcano's ConvertRes2ResList: cpu and memory always, every scalar it holds."""
    result = {
        "cpu": decimal_quantity(round(resource.milli_cpu), -3),
        "memory": binary_quantity(round(resource.memory)),
    }
    for name, value in sorted(resource.scalars.items()):
        result[name] = decimal_quantity(round(value), -3)
    return result


def queue_allocated(jobs: Iterable[JobInfo], queues: Mapping[str, QueueInfo]) -> dict[str, Resource]:
    """Per queue known to the cluster, the requests of its tasks in an allocated status."""
    allocated = {name: Resource() for name in queues}
    for job in jobs:
        total = allocated.get(job.queue)
        if total is None:
            continue
        for task in job.tasks.values():
            if task.status in ALLOCATED_STATUSES:
                total.add(task.resreq)
    return allocated


def _same(first: Resource, second: Resource) -> bool:
    return resource_list(first) == resource_list(second)


def changed_queue_status(jobs: Iterable[JobInfo], queues: Mapping[str, QueueInfo]) -> dict[str, dict[str, str]]:
    """The status.allocated to write, for the Queue objects where it differs from what is there
    (not for the implicit default queue, which has no object)."""
    changed: dict[str, dict[str, str]] = {}
    for name, total in queue_allocated(jobs, queues).items():
        if queues[name].implicit:
            continue
        written = queues[name].status_allocated
        if written is None or not _same(written, total):
            changed[name] = resource_list(total)
    return changed


class QueueStatusWriter(Protocol):
    async def write(self, queue_name: str, allocated: Mapping[str, str]) -> bool: ...


def queue_status_call(
    writer: QueueStatusWriter, queue_name: str, allocated: Mapping[str, str]
) -> Callable[[], Awaitable[None]]:
    """The loop's unit of work for one queue's status (the writer logs a failure itself)."""

    async def call() -> None:
        await writer.write(queue_name, allocated)

    return call


class SimQueueStatusWriter:
    """status.allocated on the simulated cluster's Queue objects (the cache sees the update)."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster

    async def write(self, queue_name: str, allocated: Mapping[str, str]) -> bool:
        queue = self.cluster.objects["Queue"].get(queue_name)
        if queue is None:
            return False
        queue.setdefault("status", {})["allocated"] = dict(allocated)
        self.cluster.cache.apply(ObjectEvent("Queue", EventType.MODIFIED, queue))
        return True
