"""proportion: queues share the cluster by weight (Volcano's proportion plugin).

Each queue deserves a share of the cluster's allocatable resources in proportion to its weight,
never more than it asks for (its jobs' held and pending requests) nor than its real capability
(its capability, within what the other queues' guarantees leave), never less than its guarantee.
What a satisfied queue does not take is shared again among the others until nothing is left.

Extension points, as Volcano registers them:
- allocatable: a queue takes a task only while allocated + request stays within deserved, compared
  on the dimensions the task asks for;
- jobEnqueued: a PodGroup is admitted only while minResources + allocated + inqueue - elastic
  stays within the queue's real capability; a Queue that is not Open admits nothing;
- reclaimable: victims from queues holding more than they deserve, until they are back within it;
- preemptive (reclaim asks it): as allocatable;
- queue order and overused (numasched.scheduler.actions.queue_points.QueuePolicy): queues of higher
  spec.priority first, then the lowest share; a queue is overused once deserved <= allocated;
- allocate / deallocate events keep each queue's allocated and share current within the session.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from numasched.api.job import JobInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import QueueInfo
from numasched.api.task import TaskInfo
from numasched.plugins import queue_share as qs
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import PERMIT, REJECT, Event, EventHandler, Session

PLUGIN_NAME = "proportion"
QUEUE_OPEN = "Open"
PHASE_INQUEUE = "Inqueue"
PHASE_RUNNING = "Running"


@attrs.define(slots=True)
class QueueAttr:
    """One queue's figures for this session."""

    name: str
    weight: int
    priority: int = 0
    deserved: Resource = attrs.field(factory=Resource)
    allocated: Resource = attrs.field(factory=Resource)
    request: Resource = attrs.field(factory=Resource)
    elastic: Resource = attrs.field(factory=Resource)
    inqueue: Resource = attrs.field(factory=Resource)
    guarantee: Resource = attrs.field(factory=Resource)
    # None: the queue has no capability and the cluster less others' guarantees bounds it.
    capability: Resource | None = None
    real_capability: Resource = attrs.field(factory=Resource)
    share: float = 0.0

    def update_share(self) -> None:
        self.share = qs.share(self.allocated, self.deserved)


def capability_of(queue: QueueInfo) -> Resource | None:
    """spec.capability, with CPU or memory unset (0) read as unlimited, as Volcano reads it."""
    if queue.capability is None:
        return None
    capability = queue.capability.clone()
    if capability.milli_cpu <= 0:
        capability.milli_cpu = qs.INFINITY
    if capability.memory <= 0:
        capability.memory = qs.INFINITY
    return capability


def reserved_by_job(job: JobInfo) -> Resource:
    """What an admitted PodGroup holds in reserve for its queue beyond its allocated tasks:
    an Inqueue one, and a Running one with at least minMember tasks placed (Volcano)."""
    if job.min_resources is None:
        return Resource()
    if job.pod_group_phase == PHASE_INQUEUE:
        return qs.inqueue_part(job)
    if job.pod_group_phase == PHASE_RUNNING and job.ready_task_num() >= job.min_available:
        return qs.inqueue_part(job)
    return Resource()


def build_queue_attrs(queues: dict[str, QueueInfo], jobs: Sequence[JobInfo], total: Resource) -> dict[str, QueueAttr]:
    """Every queue with a job, with its allocated, request, inqueue and elastic figures and real
    capability (deserved not yet computed)."""
    total_guarantee = qs.total(queue.guarantee for queue in queues.values() if queue.guarantee is not None)
    attrs_by_queue: dict[str, QueueAttr] = {}
    for job in jobs:
        attr = attrs_by_queue.get(job.queue)
        if attr is None:
            queue = queues.get(job.queue) or QueueInfo(job.queue)
            guarantee = queue.guarantee.clone() if queue.guarantee is not None else Resource()
            capability = capability_of(queue)
            real = qs.exceeded_part(total, total_guarantee).add(guarantee)
            if capability is not None:
                real = qs.minimum(real, capability, missing_is_infinite=True)
            attr = QueueAttr(
                name=job.queue,
                weight=queue.weight,
                priority=queue.priority,
                guarantee=guarantee,
                capability=capability,
                real_capability=real,
            )
            attrs_by_queue[job.queue] = attr
        attr.allocated.add(qs.job_allocated(job))
        attr.request.add(qs.job_request(job))
        attr.inqueue.add(reserved_by_job(job))
        attr.elastic.add(qs.elastic_part(job))
    return attrs_by_queue


def compute_deserved(attrs_by_queue: dict[str, QueueAttr], total: Resource) -> None:
    """Volcano's water filling: share what remains by weight among the queues not yet met,
    each bounded by its real capability and its request and at least its guarantee; a queue is
    met when its request is within deserved or its deserved stopped growing."""
    remaining = total.clone()
    met: set[str] = set()
    # Each round meets a queue or ends; the bound only guards against a float that never settles.
    for _ in range(len(attrs_by_queue) * 4 + 4):
        total_weight = sum(attr.weight for name, attr in attrs_by_queue.items() if name not in met)
        if total_weight == 0:
            break
        old_remaining = remaining.clone()
        increased, decreased = Resource(), Resource()
        for name in sorted(attrs_by_queue):
            attr = attrs_by_queue[name]
            if name in met:
                continue
            old = attr.deserved.clone()
            deserved = attr.deserved.clone().add(qs.scaled(remaining, attr.weight / total_weight))
            deserved = qs.minimum(deserved, attr.real_capability, missing_is_infinite=True)
            deserved = qs.minimum(deserved, attr.request, missing_is_infinite=False)
            attr.deserved = qs.maximum(deserved, attr.guarantee)
            attr.update_share()
            if qs.less_equal(attr.request, attr.deserved) or qs.same(attr.deserved, old):
                met.add(name)
            increased.add(qs.exceeded_part(attr.deserved, old))
            decreased.add(qs.exceeded_part(old, attr.deserved))
        remaining = qs.exceeded_part(remaining.clone().add(decreased), increased)
        if remaining.is_empty() or qs.same(remaining, old_remaining):
            break


def session_total(ssn: Session) -> Resource:
    return qs.total(node.allocatable for node in ssn.nodes.values())


class ProportionPlugin:
    name = PLUGIN_NAME

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments
        self.queue_attrs: dict[str, QueueAttr] = {}

    def on_session_open(self, ssn: Session) -> None:
        total = session_total(ssn)
        self.queue_attrs = build_queue_attrs(ssn.queues, list(ssn.jobs.values()), total)
        compute_deserved(self.queue_attrs, total)
        register_queue_points(ssn, self)

    def on_session_close(self, ssn: Session) -> None:
        self.queue_attrs = {}

    # -- queue policy (scheduler.actions.queue_points.QueuePolicy) ------------------------------

    def overused(self, queue: QueueInfo) -> bool:
        attr = self.queue_attrs.get(queue.name)
        return attr is not None and qs.less_equal(attr.deserved, attr.allocated)

    def queue_order(self, first: QueueInfo, second: QueueInfo) -> int:
        if first.priority != second.priority:
            return -1 if first.priority > second.priority else 1
        first_attr, second_attr = self.queue_attrs.get(first.name), self.queue_attrs.get(second.name)
        first_share = first_attr.share if first_attr is not None else 0.0
        second_share = second_attr.share if second_attr is not None else 0.0
        if first_share == second_share:
            return 0
        return -1 if first_share < second_share else 1

    # -- extension functions ---------------------------------------------------------------------

    def allocatable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        if queue.state != QUEUE_OPEN:
            return False
        attr = self.queue_attrs.get(queue.name)
        if attr is None:
            return True
        future = attr.allocated.clone().add(task.resreq)
        return not qs.exceeded_names(future, attr.deserved, task.resreq)

    def preemptive(self, queue: QueueInfo, task: TaskInfo) -> bool:
        """Volcano's preemptiveFn for proportion: the queue may reclaim for the task while it may
        take it (the allocatable check)."""
        return self.allocatable(queue, task)

    def job_enqueueable(self, ssn: Session, job: JobInfo) -> int:
        queue = ssn.queue_of(job)
        if queue.state != QUEUE_OPEN:
            return REJECT
        attr = self.queue_attrs.get(job.queue)
        if attr is None or job.min_resources is None:
            return PERMIT
        wanted = job.min_resources.clone().add(attr.allocated).add(attr.inqueue).sub(attr.elastic)
        return REJECT if qs.exceeded_names(wanted, attr.real_capability, job.min_resources) else PERMIT

    def reclaimable(self, ssn: Session, reclaimees: Sequence[TaskInfo]) -> tuple[list[TaskInfo], int]:
        victims: list[TaskInfo] = []
        allocations: dict[str, Resource] = {}
        for reclaimee in reclaimees:
            job = ssn.jobs.get(reclaimee.job_id)
            attr = self.queue_attrs.get(job.queue) if job is not None else None
            if job is None or attr is None:
                continue
            allocated = allocations.setdefault(job.queue, attr.allocated.clone())
            if not qs.less_equal(allocated, attr.deserved):
                allocated.sub(reclaimee.resreq)
                victims.append(reclaimee)
        return victims, PERMIT


class QueuePlugin(Protocol):
    """What proportion and capacity both register: the queue's room, its admission of jobs, its
    reclaimable victims, over their per-queue attributes."""

    name: str
    queue_attrs: dict[str, QueueAttr]

    def allocatable(self, queue: QueueInfo, task: TaskInfo) -> bool: ...

    def job_enqueueable(self, ssn: Session, job: JobInfo) -> int: ...

    def reclaimable(self, ssn: Session, reclaimees: Sequence[TaskInfo]) -> tuple[list[TaskInfo], int]: ...


def register_queue_points(ssn: Session, plugin: QueuePlugin) -> None:
    """The extension points of a queue plugin, and the bookkeeping they need: an admitted job's
    minimum resources count in its queue, placed tasks in its allocation."""
    watch = qs.EnqueuedWatch(lambda job: count_enqueued(plugin.queue_attrs, job))

    def job_enqueueable(job: JobInfo) -> int:
        watch.settle()
        verdict = plugin.job_enqueueable(ssn, job)
        if verdict == PERMIT:
            watch.permitted(job)
        return verdict

    ssn.add_allocatable_fn(plugin.name, plugin.allocatable)
    ssn.add_job_enqueueable_fn(plugin.name, job_enqueueable)
    ssn.add_reclaimable_fn(plugin.name, lambda reclaimer, reclaimees: plugin.reclaimable(ssn, reclaimees))
    ssn.add_event_handler(
        EventHandler(
            allocate=lambda event: account_move(plugin.queue_attrs, ssn, event, 1),
            deallocate=lambda event: account_move(plugin.queue_attrs, ssn, event, -1),
        )
    )


def count_enqueued(queue_attrs: dict[str, QueueAttr], job: JobInfo) -> None:
    """A job let into its queue this session holds its minimum resources there (inqueue)."""
    attr = queue_attrs.get(job.queue)
    if attr is not None and job.min_resources is not None:
        attr.inqueue.add(job.min_resources)


def account_move(queue_attrs: dict[str, QueueAttr], ssn: Session, event: Event, sign: int) -> None:
    """A task placed (sign 1) or taken back (-1) counts in its queue's allocation and share."""
    job = ssn.jobs.get(event.task.job_id)
    attr = queue_attrs.get(job.queue) if job is not None else None
    if attr is None:
        return
    if sign > 0:
        attr.allocated.add(event.task.resreq)
    else:
        attr.allocated.sub(event.task.resreq)
    attr.update_share()


def build(arguments: Arguments) -> ProportionPlugin:
    return ProportionPlugin(arguments)
