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
- preemptive (reclaim asks it, queue_points.preemptive): the queue reclaims for a task only
  while, with it, it stays within its real capability and within its deserved share on some
  dimension the task asks for;
- queue order (QueuePolicy): higher spec.priority first, then the lowest allocated/deserved
  share, then a queue with a deserved share before one without.

With `enableHierarchy: true` on the plugin (Volcano's flag, off by default) the queues form a
tree by spec.parent under the root queue `root` (plugins/capacity_hierarchy.py builds it):
- allocatable: only a leaf queue takes tasks, and only while the task fits the real capability of
  the queue and of every ancestor;
- jobEnqueued: only into a leaf queue, and only while the job's minimum fits the queue and every
  ancestor (minResources + allocated + inqueue - elastic within the real capability);
- what a task or an admitted job holds counts in its queue and every ancestor;
- queue order: higher spec.priority first, then a leaf before a queue with children; two queues
  with children by share; two leaves by the shares of their ancestors just below the deepest
  ancestor they have in common (Volcano's getQueueLevel), so siblings compare as themselves and
  cousins as their parents;
- reclaimable: as for flat queues, against the victim's own (leaf) queue. Volcano's
  `ancestorReclaimLevel` argument (ancestors' deserved shares in reclaim) is not implemented.
"""

from __future__ import annotations

from collections.abc import Sequence

from numasched.api.job import JobInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import QueueInfo
from numasched.api.task import TaskInfo
from numasched.plugins import queue_share as qs
from numasched.plugins.capacity_hierarchy import QueueTree, build_queue_tree, update_capacity_share
from numasched.plugins.proportion import QueueAttr, build_queue_attrs, register_queue_points, session_total
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import PERMIT, REJECT, Event, EventHandler, Session

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
        # The queue tree when enableHierarchy is on; None for flat queues.
        self.tree: QueueTree | None = None

    def on_session_open(self, ssn: Session) -> None:
        total = session_total(ssn)
        if hierarchy_enabled(ssn, self.name):
            self.tree = build_queue_tree(ssn.queues, ssn.jobs.values(), total)
            self.queue_attrs = self.tree.attrs_by_queue
            register_tree_points(ssn, self, self.tree)
            return
        self.queue_attrs = build_queue_attrs(ssn.queues, list(ssn.jobs.values()), total)
        set_deserved(self.queue_attrs, ssn.queues)
        register_queue_points(ssn, self)

    def on_session_close(self, ssn: Session) -> None:
        self.queue_attrs = {}
        self.tree = None

    def overused(self, queue: QueueInfo) -> bool:
        # Volcano's capacity plugin registers no overused function: its allocatable check bounds
        # each queue by its capability instead.
        return False

    def queue_order(self, first: QueueInfo, second: QueueInfo) -> int:
        if first.priority != second.priority:
            return -1 if first.priority > second.priority else 1
        if self.tree is not None:
            return self._tree_order(self.tree, first.name, second.name)
        first_attr, second_attr = self.queue_attrs.get(first.name), self.queue_attrs.get(second.name)
        if first_attr is None or second_attr is None:
            return 0
        if first_attr.share != second_attr.share:
            return -1 if first_attr.share < second_attr.share else 1
        first_has, second_has = not first_attr.deserved.is_empty(), not second_attr.deserved.is_empty()
        if first_has == second_has:
            return 0
        return -1 if first_has else 1

    def _tree_order(self, tree: QueueTree, first: str, second: str) -> int:
        first_leaf, second_leaf = tree.is_leaf(first), tree.is_leaf(second)
        if first_leaf != second_leaf:
            return -1 if first_leaf else 1
        if not first_leaf:
            return compare_share(tree.attrs_by_queue[first], tree.attrs_by_queue[second])
        first_path, second_path = tree.path(first), tree.path(second)
        first_at, second_at = deciding_ancestors(tree.ancestors(first), tree.ancestors(second))
        return compare_share(tree.attrs_by_queue[first_path[first_at]], tree.attrs_by_queue[second_path[second_at]])

    def victim_queue_order(self, first: QueueInfo, second: QueueInfo, preemptor: QueueInfo) -> int:
        """Volcano's victim queue order with hierarchy: the queue sharing the deeper ancestor with
        the preemptor's queue gives up victims first; no opinion for flat queues."""
        if self.tree is None:
            return 0
        first_level = common_level(self.tree.ancestors(first.name), self.tree.ancestors(preemptor.name))
        second_level = common_level(self.tree.ancestors(second.name), self.tree.ancestors(preemptor.name))
        if first_level == second_level:
            return 0
        return -1 if first_level > second_level else 1

    def allocatable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        if queue.state != QUEUE_OPEN:
            return False
        if self.tree is not None:
            return self.tree.is_leaf(queue.name) and all(
                not qs.exceeded_names(
                    self.queue_attrs[name].allocated.clone().add(task.resreq),
                    self.queue_attrs[name].real_capability,
                    task.resreq,
                )
                for name in self.tree.path(queue.name)
            )
        attr = self.queue_attrs.get(queue.name)
        if attr is None:
            return True
        future = attr.allocated.clone().add(task.resreq)
        return not qs.exceeded_names(future, attr.real_capability, task.resreq)

    def preemptive(self, queue: QueueInfo, task: TaskInfo) -> bool:
        """Volcano's preemptiveFn: an open queue may reclaim for a task that keeps it within its
        real capability while it stays within its deserved share on some dimension the task
        asks for (a queue with no deserved share reclaims nothing)."""
        if queue.state != QUEUE_OPEN:
            return False
        attr = self.queue_attrs.get(queue.name)
        if attr is None:
            return True
        future = attr.allocated.clone().add(task.resreq)
        if qs.exceeded_names(future, attr.real_capability, task.resreq):
            return False
        asked = [name for name in qs.names(task.resreq) if qs.amount(task.resreq, name) > 0]
        return any(
            qs.amount(attr.deserved, name) > 0
            and qs.amount(future, name) <= qs.amount(attr.deserved, name) + qs.TOLERANCE
            for name in asked
        )

    def job_enqueueable(self, ssn: Session, job: JobInfo) -> int:
        if ssn.queue_of(job).state != QUEUE_OPEN:
            return REJECT
        if self.tree is not None:
            if not self.tree.is_leaf(job.queue):
                return REJECT
            if job.min_resources is None:
                return PERMIT
            for name in self.tree.path(job.queue):
                level = self.queue_attrs[name]
                wanted = job.min_resources.clone().add(level.allocated).add(level.inqueue).sub(level.elastic)
                if qs.exceeded_names(wanted, level.real_capability, job.min_resources):
                    return REJECT
            return PERMIT
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


def hierarchy_enabled(ssn: Session, name: str) -> bool:
    """Volcano's HierarchyEnabled: the plugin's enableHierarchy is set and true (off when absent,
    unlike the extension-point flags)."""
    for tier in ssn.config.tiers:
        for option in tier.plugins:
            if option.name == name:
                return option.flags.get("hierarchy") is True
    return False


def compare_share(first: QueueAttr, second: QueueAttr) -> int:
    """Volcano's compareShareWithDeserved: the lower share first; on a tie a queue with a
    deserved share before one without."""
    if first.share != second.share:
        return -1 if first.share < second.share else 1
    first_has, second_has = not first.deserved.is_empty(), not second.deserved.is_empty()
    if first_has == second_has:
        return 0
    return -1 if first_has else 1


def common_level(first: list[str], second: list[str]) -> int:
    """Volcano's getQueueLevel over two ancestor lists (root first): the depth of the deepest
    ancestor both share (0 when only the root)."""
    level = 0
    for index in range(min(len(first), len(second))):
        if first[index] != second[index]:
            break
        level = index
    return level


def deciding_ancestors(first: list[str], second: list[str]) -> tuple[int, int]:
    """For two leaves, the indexes into each one's path (ancestors, then the queue) of the queues
    whose shares decide their order: one below the deepest ancestor they share."""
    level = common_level(first, second)
    return level + 1, level + 1


def register_tree_points(ssn: Session, plugin: CapacityPlugin, tree: QueueTree) -> None:
    """register_queue_points for a queue tree: what is admitted or placed counts in the queue and
    in every ancestor."""
    watch = qs.EnqueuedWatch(lambda job: _count_up(tree, job.queue, job.min_resources, 1))

    def job_enqueueable(job: JobInfo) -> int:
        watch.settle()
        verdict = plugin.job_enqueueable(ssn, job)
        if verdict == PERMIT:
            watch.permitted(job)
        return verdict

    def move(event: Event, sign: int) -> None:
        job = ssn.jobs.get(event.task.job_id)
        if job is not None:
            _count_up(tree, job.queue, event.task.resreq, sign, allocated=True)

    ssn.add_allocatable_fn(plugin.name, plugin.allocatable)
    ssn.add_job_enqueueable_fn(plugin.name, job_enqueueable)
    ssn.add_reclaimable_fn(plugin.name, lambda reclaimer, reclaimees: plugin.reclaimable(ssn, reclaimees))
    ssn.add_event_handler(EventHandler(allocate=lambda event: move(event, 1), deallocate=lambda event: move(event, -1)))


def _count_up(tree: QueueTree, queue: str, amount: Resource | None, sign: int, *, allocated: bool = False) -> None:
    if amount is None or queue not in tree.attrs_by_queue:
        return
    for name in tree.path(queue):
        attr = tree.attrs_by_queue[name]
        target = attr.allocated if allocated else attr.inqueue
        if sign > 0:
            target.add(amount)
        else:
            target.sub(amount)
        update_capacity_share(attr)


def build(arguments: Arguments) -> CapacityPlugin:
    return CapacityPlugin(arguments)
