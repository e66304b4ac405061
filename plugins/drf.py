"""drf: dominant resource fairness between jobs (Volcano's drf plugin).

A job's share is its largest fraction of any cluster resource it holds (allocated / total
allocatable, over the resources the cluster has). Extension points:
- jobOrder: the job with the lower dominant share first;
- preemptable: a running task may be taken for a preemptor while its job, without it, would
  still hold at least the share the preemptor's job would hold with the preemptor
  (a difference under 1e-6 counts as equal), so preemption never inverts fairness;
- allocate / deallocate events keep each job's share current within the session.

With `enableHierarchy: true` (Volcano's hierarchical DRF, plugins/drf_hierarchy.py; the loader
refuses it beside proportion, as Volcano does): the queues form a tree by their
volcano.sh/hierarchy annotations, and drf adds
- queue order (QueuePolicy): Volcano's compareQueues over the tree;
- reclaimable: a running task of another queue is a victim when, with the reclaimer's task placed
  and that task gone, the reclaimer's queue still comes first in that order.

Namespace fairness (`enableNamespaceOrder`) is not here: Volcano removed it in v1.8.0.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from numasched.api.job import JobInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import QueueInfo
from numasched.api.task import TaskInfo
from numasched.plugins import queue_share as qs
from numasched.plugins.capacity import hierarchy_enabled
from numasched.plugins.drf_hierarchy import HdrfTree
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import PERMIT, Event, EventHandler, Session

PLUGIN_NAME = "drf"
# Volcano's shareDelta: shares closer than this are equal.
SHARE_DELTA = 0.000001


def dominant_share(allocated: Resource, total: Resource) -> float:
    """max over the cluster's resources of allocated / total (Volcano's helpers.Share per
    resource: a resource the cluster has none of counts 1 when something of it is held)."""
    result = 0.0
    for name in qs.names(total):
        held, whole = allocated.get(name), total.get(name)
        ratio = (0.0 if held == 0 else 1.0) if whole == 0 else held / whole
        result = max(result, ratio)
    return result


@attrs.define(slots=True)
class JobShare:
    allocated: Resource
    share: float = 0.0


class DrfPlugin:
    name = PLUGIN_NAME

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments
        self.total = Resource()
        self.jobs: dict[str, JobShare] = {}
        # Hierarchical DRF (enableHierarchy): the tree and what every job holds; None when off.
        self.tree: HdrfTree | None = None
        self.total_allocated = Resource()
        self.hierarchy_of: dict[str, str] = {}

    def on_session_open(self, ssn: Session) -> None:
        self.total = qs.total(node.allocatable for node in ssn.nodes.values())
        self.jobs = {}
        for job in ssn.jobs.values():
            allocated = qs.job_allocated(job)
            self.jobs[job.uid] = JobShare(allocated, dominant_share(allocated, self.total))
        ssn.add_job_order_fn(self.name, self.job_order)
        ssn.add_preemptable_fn(self.name, self.preemptable)
        if hierarchy_enabled(ssn, self.name):
            self._open_tree(ssn)
            ssn.add_reclaimable_fn(
                self.name, lambda reclaimer, reclaimees: self.reclaimable(ssn, reclaimer, reclaimees)
            )
        ssn.add_event_handler(
            EventHandler(allocate=lambda event: self._move(event, 1), deallocate=lambda event: self._move(event, -1))
        )

    def on_session_close(self, ssn: Session) -> None:
        self.jobs = {}
        self.tree = None
        self.hierarchy_of = {}

    def _open_tree(self, ssn: Session) -> None:
        tree = HdrfTree(self.total)
        self.total_allocated = Resource()
        for job in ssn.jobs.values():
            queue = ssn.queue_of(job)
            entry = self.jobs[job.uid]
            request = Resource()
            for task in job.tasks.values():
                request.add(task.resreq)
            self.total_allocated.add(entry.allocated)
            self.hierarchy_of[job.uid] = queue.hierarchy
            tree.place_job(job.uid, entry.allocated, request, queue.hierarchy, queue.hierarchy_weights)
        tree.update(self.total_allocated)
        self.tree = tree

    # -- queue policy (scheduler.actions.queue_points.QueuePolicy), hierarchy only ---------------

    def overused(self, queue: QueueInfo) -> bool:
        return False

    def queue_order(self, first: QueueInfo, second: QueueInfo) -> int:
        if self.tree is None:
            return 0
        verdict = self.tree.compare_queues(first.hierarchy, second.hierarchy)
        return -1 if verdict < 0 else (1 if verdict > 0 else 0)

    def reclaimable(
        self, ssn: Session, reclaimer: TaskInfo, reclaimees: Sequence[TaskInfo]
    ) -> tuple[list[TaskInfo], int]:
        """Volcano's HDRF reclaimFn, on a copy of the tree: the reclaimer's task placed, each
        candidate taken out in turn; a victim when the reclaimer's queue then comes first."""
        job = ssn.jobs.get(reclaimer.job_id)
        if self.tree is None or job is None:
            return [], PERMIT
        mine = ssn.queue_of(job).hierarchy
        tree = self.tree.clone()
        total = self.total_allocated.clone().add(reclaimer.resreq)
        leaf = tree.leaf(job.uid, mine)
        if leaf is None:
            return [], PERMIT
        leaf.allocated.add(reclaimer.resreq)
        victims: list[TaskInfo] = []
        for reclaimee in reclaimees:
            victim_job = ssn.jobs.get(reclaimee.job_id)
            theirs = ssn.queue_of(victim_job).hierarchy if victim_job is not None else None
            other = tree.leaf(victim_job.uid, theirs) if victim_job is not None and theirs is not None else None
            if other is None or theirs is None:
                continue
            total.sub(reclaimee.resreq)
            other.allocated.sub(reclaimee.resreq)
            tree.update(total)
            verdict = tree.compare_queues(mine, theirs)
            total.add(reclaimee.resreq)
            other.allocated.add(reclaimee.resreq)
            if verdict < 0:
                victims.append(reclaimee)
        return victims, PERMIT

    def share_of(self, job_uid: str) -> float:
        entry = self.jobs.get(job_uid)
        return entry.share if entry is not None else 0.0

    def job_order(self, first: JobInfo, second: JobInfo) -> int:
        first_share, second_share = self.share_of(first.uid), self.share_of(second.uid)
        if first_share == second_share:
            return 0
        return -1 if first_share < second_share else 1

    def preemptable(self, preemptor: TaskInfo, preemptees: Sequence[TaskInfo]) -> tuple[list[TaskInfo], int]:
        mine = self.jobs.get(preemptor.job_id)
        held = mine.allocated.clone() if mine is not None else Resource()
        preemptor_share = dominant_share(held.add(preemptor.resreq), self.total)
        # Per victim job, what it would hold once the victims chosen so far are gone.
        remaining: dict[str, Resource] = {}
        victims: list[TaskInfo] = []
        for preemptee in preemptees:
            entry = self.jobs.get(preemptee.job_id)
            if entry is None:
                continue
            left = remaining.setdefault(preemptee.job_id, entry.allocated.clone())
            # As Volcano: each candidate of a job is weighed with the ones before it gone.
            after = dominant_share(left.sub(preemptee.resreq), self.total)
            if preemptor_share < after or abs(preemptor_share - after) <= SHARE_DELTA:
                victims.append(preemptee)
        return victims, PERMIT

    def _move(self, event: Event, sign: int) -> None:
        entry = self.jobs.get(event.task.job_id)
        if entry is None:
            entry = self.jobs[event.task.job_id] = JobShare(Resource())
        if sign > 0:
            entry.allocated.add(event.task.resreq)
        else:
            entry.allocated.sub(event.task.resreq)
        entry.share = dominant_share(entry.allocated, self.total)
        if self.tree is not None:
            if sign > 0:
                self.total_allocated.add(event.task.resreq)
            else:
                self.total_allocated.sub(event.task.resreq)
            self.tree.update(self.total_allocated)


def build(arguments: Arguments) -> DrfPlugin:
    return DrfPlugin(arguments)
