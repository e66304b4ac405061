"""drf: dominant resource fairness between jobs (Volcano's drf plugin).

A job's share is its largest fraction of any cluster resource it holds (allocated / total
allocatable, over the resources the cluster has). Extension points:
- jobOrder: the job with the lower dominant share first;
- preemptable: a running task may be taken for a preemptor while its job, without it, would
  still hold at least the share the preemptor's job would hold with the preemptor
  (a difference under 1e-6 counts as equal), so preemption never inverts fairness;
- allocate / deallocate events keep each job's share current within the session.

Volcano's namespace fairness (`enableNamespaceOrder`) and hierarchical DRF (`enableHierarchy`)
are not implemented: the loader refuses `enableHierarchy: true` beside proportion as Volcano does,
and both are documented in docs/configuration.md as not done.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from numasched.api.job import JobInfo
from numasched.api.resource import Resource
from numasched.api.task import TaskInfo
from numasched.plugins import queue_share as qs
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

    def on_session_open(self, ssn: Session) -> None:
        self.total = qs.total(node.allocatable for node in ssn.nodes.values())
        self.jobs = {}
        for job in ssn.jobs.values():
            allocated = qs.job_allocated(job)
            self.jobs[job.uid] = JobShare(allocated, dominant_share(allocated, self.total))
        ssn.add_job_order_fn(self.name, self.job_order)
        ssn.add_preemptable_fn(self.name, self.preemptable)
        ssn.add_event_handler(
            EventHandler(allocate=lambda event: self._move(event, 1), deallocate=lambda event: self._move(event, -1))
        )

    def on_session_close(self, ssn: Session) -> None:
        self.jobs = {}

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


def build(arguments: Arguments) -> DrfPlugin:
    return DrfPlugin(arguments)
