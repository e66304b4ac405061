"""Resource arithmetic with Volcano's per-dimension rules, shared by the queue plugins
(proportion, capacity, drf, overcommit).

Volcano tells a scalar resource that a list does not name from one set to 0, and each operation
says what a missing one means: zero (nothing of it) or infinity (no limit on it). CPU and memory
are always present. The functions here never change their arguments.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from numasched.api.job import JobInfo
from numasched.api.resource import Resource
from numasched.api.task import TaskStatus

# Volcano's minResource: two amounts closer than this are equal.
TOLERANCE = 0.1
INFINITY = math.inf

# Statuses whose resources a queue holds (Volcano's AllocatedStatus).
ALLOCATED_STATUSES = frozenset(
    {TaskStatus.ALLOCATED, TaskStatus.BINDING, TaskStatus.BOUND, TaskStatus.RUNNING, TaskStatus.PIPELINED}
)


def names(*resources: Resource) -> list[str]:
    """cpu, memory and every scalar any of them names, in a stable order."""
    scalars: set[str] = set()
    for resource in resources:
        scalars.update(resource.scalars)
    return ["cpu", "memory", *sorted(scalars)]


def _get(resource: Resource, name: str, missing: float) -> float:
    if name == "cpu":
        return resource.milli_cpu
    if name == "memory":
        return resource.memory
    return resource.scalars.get(name, missing)


def amount(resource: Resource, name: str) -> float:
    """One dimension by name ("cpu", "memory" or a scalar; 0 when absent)."""
    return _get(resource, name, 0.0)


def _build(values: dict[str, float]) -> Resource:
    return Resource(values.pop("cpu", 0.0), values.pop("memory", 0.0), {name: value for name, value in values.items()})


def exceeded_part(left: Resource, right: Resource) -> Resource:
    """Per dimension, how much left is above right (never negative)."""
    return _build({name: max(_get(left, name, 0.0) - _get(right, name, 0.0), 0.0) for name in names(left, right)})


def scaled(resource: Resource, factor: float) -> Resource:
    return Resource(
        resource.milli_cpu * factor, resource.memory * factor, {n: v * factor for n, v in resource.scalars.items()}
    )


def minimum(resource: Resource, limit: Resource, *, missing_is_infinite: bool) -> Resource:
    """Per dimension of `resource`, the smaller of it and `limit` (Volcano's MinDimensionResource):
    a scalar `limit` does not name leaves the value (infinite) or zeroes it."""
    values = {"cpu": min(resource.milli_cpu, limit.milli_cpu), "memory": min(resource.memory, limit.memory)}
    for name, value in resource.scalars.items():
        bound = limit.scalars.get(name, INFINITY if missing_is_infinite else 0.0)
        values[name] = min(value, bound)
    return _build(values)


def maximum(first: Resource, second: Resource) -> Resource:
    """Per dimension, the larger (Volcano's helpers.Max); negative scalars are dropped."""
    values = {"cpu": max(first.milli_cpu, second.milli_cpu), "memory": max(first.memory, second.memory)}
    for resource in (first, second):
        for name, value in resource.scalars.items():
            if value >= 0:
                values[name] = max(value, values.get(name, 0.0))
    return _build(values)


def _at_most(value: float, bound: float) -> bool:
    return value < bound or abs(value - bound) < TOLERANCE


def less_equal(resource: Resource, bound: Resource, *, missing_is_infinite: bool = False) -> bool:
    """Every dimension of resource within bound (Volcano's LessEqual with a default for scalars
    bound does not name)."""
    if not _at_most(resource.milli_cpu, bound.milli_cpu) or not _at_most(resource.memory, bound.memory):
        return False
    for name, value in resource.scalars.items():
        limit = bound.scalars.get(name, INFINITY if missing_is_infinite else 0.0)
        if not _at_most(value, limit):
            return False
    return True


def exceeded_names(resource: Resource, bound: Resource, request: Resource) -> list[str]:
    """The dimensions that request asks for where resource is above bound (Volcano's
    LessEqualWithDimensionAndResourcesName): what request does not ask for is not compared."""
    over: list[str] = []
    if request.milli_cpu > 0 and resource.milli_cpu > bound.milli_cpu:
        over.append("cpu")
    if request.memory > 0 and resource.memory > bound.memory:
        over.append("memory")
    for name, asked in sorted(request.scalars.items()):
        if asked <= 0:
            continue
        if resource.scalars.get(name, 0.0) > bound.scalars.get(name, 0.0):
            over.append(name)
    return over


def same(first: Resource, second: Resource) -> bool:
    """Equal in every dimension (infinite ones included)."""
    for name in names(first, second):
        left, right = _get(first, name, 0.0), _get(second, name, 0.0)
        if left != right and abs(left - right) >= TOLERANCE:
            return False
    return True


def share(allocated: Resource, deserved: Resource) -> float:
    """The largest allocated/deserved over the dimensions deserved names (Volcano's queue share
    over deserved.ResourceNames(): only dimensions of at least 0.1, so a CPU or memory deserved
    nothing of does not count)."""
    result = 0.0
    for name in names(deserved):
        owed = _get(deserved, name, 0.0)
        if owed < TOLERANCE:
            continue
        result = max(result, _get(allocated, name, 0.0) / owed)
    return result


def total(resources: Iterable[Resource]) -> Resource:
    result = Resource()
    for resource in resources:
        result.add(resource)
    return result


def job_allocated(job: JobInfo) -> Resource:
    return total(task.resreq for task in job.tasks.values() if task.status in ALLOCATED_STATUSES)


def job_request(job: JobInfo) -> Resource:
    """What the job holds and what its pending tasks ask for (a queue's request)."""
    return total(
        task.resreq
        for task in job.tasks.values()
        if task.status in ALLOCATED_STATUSES or task.status is TaskStatus.PENDING
    )


def inqueue_part(job: JobInfo) -> Resource:
    """What an admitted (Inqueue) PodGroup reserves beyond what it already holds: its
    minResources less its allocated tasks' requests (Volcano's GetInqueueResource)."""
    if job.min_resources is None:
        return Resource()
    return exceeded_part(job.min_resources, job_allocated(job))


def elastic_part(job: JobInfo) -> Resource:
    """What the job holds beyond its minResources (Volcano's elastic resources)."""
    if job.min_resources is None:
        return Resource()
    return exceeded_part(job_allocated(job), job.min_resources)


def cluster_total(allocatables: Iterable[Resource]) -> Resource:
    return total(allocatables)


class EnqueuedWatch:
    """Volcano's JobEnqueued event without a session point for it: the enqueue action admits a
    job (phase Inqueue) right after every plugin permitted it, before it asks about the next one.
    So each plugin remembers the job it last permitted and, when asked about the next job, counts
    the last one as enqueued if it was (a reject by another plugin leaves it Pending)."""

    def __init__(self, on_enqueued: Callable[[JobInfo], None]) -> None:
        self._on_enqueued = on_enqueued
        self._last: JobInfo | None = None
        self._counted: set[str] = set()

    def permitted(self, job: JobInfo) -> None:
        self._last = job

    def settle(self) -> None:
        job, self._last = self._last, None
        if job is not None and job.pod_group_phase == "Inqueue" and job.uid not in self._counted:
            self._counted.add(job.uid)
            self._on_enqueued(job)
