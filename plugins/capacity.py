"""capacity: queues with an explicit deserved share and a hard capability (Volcano's capacity
plugin, flat queues).

Each queue deserves its spec.deserved (within its real capability: spec.capability bounded by what
the other queues' guarantees leave of the cluster, and at least its spec.guarantee).
Extension points, as Volcano registers them:
- allocatable: a queue takes a task while allocated + request stays within its real capability
  (compared on the dimensions the task asks for): a queue may borrow idle resources up to its
  capability, beyond what it deserves;
- jobEnqueued: a PodGroup is admitted while minResources + allocated + inqueue - elastic stays
  within the real capability; a Queue that is not Open admits nothing;
- reclaimable: a running task of another queue is a victim while its queue, without it, still
  holds its guarantee, and either the task asks for nothing the queue deserves or the queue holds
  more than it deserves of something the task asks for (the borrowed part is given back first);
- queue order (QueuePolicy): higher spec.priority first, then the lowest allocated/deserved
  share, then a queue with a deserved share before one without.

Hierarchical queues (Volcano's enableHierarchy with spec.parent) are not implemented: spec.parent
is read but each queue is treated as a leaf; docs/configuration.md says so.
"""

from __future__ import annotations

from collections.abc import Sequence

from numasched.api.job import JobInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import QueueInfo
from numasched.api.task import TaskInfo
from numasched.plugins import queue_share as qs
from numasched.plugins.proportion import QueueAttr, build_queue_attrs, register_queue_points, session_total
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import PERMIT, REJECT, Session

PLUGIN_NAME = "capacity"
QUEUE_OPEN = "Open"


def set_deserved(attrs_by_queue: dict[str, QueueAttr], queues: dict[str, QueueInfo]) -> None:
    """deserved = spec.deserved bounded by the real capability, at least the guarantee."""
    for name, attr in attrs_by_queue.items():
        queue = queues.get(name)
        spec = queue.deserved.clone() if queue is not None and queue.deserved is not None else Resource()
        deserved = qs.minimum(spec, attr.real_capability, missing_is_infinite=True)
        attr.deserved = qs.maximum(deserved, attr.guarantee)
        attr.update_share()


def asks_for_deserved(task: TaskInfo, deserved: Resource) -> bool:
    """Whether the task asks for any resource the queue deserves some of."""
    return any(task.resreq.get(name) > 0 and deserved.get(name) > 0 for name in qs.names(task.resreq))


def exceeds_deserved_on(allocated: Resource, deserved: Resource, task: TaskInfo) -> bool:
    """The queue holds more than it deserves of some resource the task asks for."""
    return any(
        task.resreq.get(name) > 0 and allocated.get(name) > deserved.get(name) + qs.TOLERANCE
        for name in qs.names(task.resreq)
    )


class CapacityPlugin:
    name = PLUGIN_NAME

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments
        self.queue_attrs: dict[str, QueueAttr] = {}

    def on_session_open(self, ssn: Session) -> None:
        total = session_total(ssn)
        self.queue_attrs = build_queue_attrs(ssn.queues, list(ssn.jobs.values()), total)
        set_deserved(self.queue_attrs, ssn.queues)
        register_queue_points(ssn, self)

    def on_session_close(self, ssn: Session) -> None:
        self.queue_attrs = {}

    def overused(self, queue: QueueInfo) -> bool:
        # Volcano's capacity plugin registers no overused function: its allocatable check bounds
        # each queue by its capability instead.
        return False

    def queue_order(self, first: QueueInfo, second: QueueInfo) -> int:
        if first.priority != second.priority:
            return -1 if first.priority > second.priority else 1
        first_attr, second_attr = self.queue_attrs.get(first.name), self.queue_attrs.get(second.name)
        if first_attr is None or second_attr is None:
            return 0
        if first_attr.share != second_attr.share:
            return -1 if first_attr.share < second_attr.share else 1
        first_has, second_has = not first_attr.deserved.is_empty(), not second_attr.deserved.is_empty()
        if first_has == second_has:
            return 0
        return -1 if first_has else 1

    def allocatable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        if queue.state != QUEUE_OPEN:
            return False
        attr = self.queue_attrs.get(queue.name)
        if attr is None:
            return True
        future = attr.allocated.clone().add(task.resreq)
        return not qs.exceeded_names(future, attr.real_capability, task.resreq)

    def job_enqueueable(self, ssn: Session, job: JobInfo) -> int:
        if ssn.queue_of(job).state != QUEUE_OPEN:
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
            if not qs.less_equal(attr.guarantee, allocated.clone().sub(reclaimee.resreq)):
                continue
            if asks_for_deserved(reclaimee, attr.deserved) and not exceeds_deserved_on(
                allocated, attr.deserved, reclaimee
            ):
                continue
            allocated.sub(reclaimee.resreq)
            victims.append(reclaimee)
        return victims, PERMIT


def build(arguments: Arguments) -> CapacityPlugin:
    return CapacityPlugin(arguments)
