"""reclaim and gangreclaim: a queue below its share takes back what other queues borrowed (Volcano).

Queues in queue order, skipping overused ones (a plugin's overused answer, see queue_points);
their starving jobs in job order; each pending task, while its queue may reclaim for it
(Volcano's preemptive point, queue_points.preemptive: proportion's allocatable check, capacity's
deserved share within the real capability), looks for victims among the Running or Bound tasks
of other queues whose Queue is reclaimable (spec.reclaimable not false), filtered by the
plugins' reclaimable vote (proportion: queues above their deserved share). Victims and nodes are
chosen as preempt chooses them (smallest NUMA-admissible set on a node copy, see preempt.py;
among equals, victims of the queue nearest the reclaimer's first, queue_points); the job's
evictions are committed only when it is then pipelined, else rolled back. gangreclaim takes
victim gangs whole beyond their spare tasks, as gangpreempt does.
"""

from __future__ import annotations

import structlog

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.snapshot import QueueInfo
from numasched.api.task import TaskInfo
from numasched.scheduler.actions import queue_points
from numasched.scheduler.actions.preempt import (
    choose_victims,
    evictable,
    job_starving,
    pending_preemptors,
    place_with_evictions,
    preemptor_jobs,
    settle,
)
from numasched.scheduler.framework.session import Session
from numasched.scheduler.framework.statement import Statement

_log = structlog.get_logger(__name__)

RECLAIM = "reclaim"
GANG_RECLAIM = "gangreclaim"


class ReclaimAction:
    def __init__(self, name: str = RECLAIM, *, gang: bool = False) -> None:
        self.name = name
        self.gang = gang

    def execute(self, ssn: Session) -> None:
        nodes = sorted(ssn.nodes.values(), key=lambda node: node.name)
        by_queue = preemptor_jobs(ssn)
        queues = queue_points.sorted_queues(ssn, (ssn.queues.get(name) or QueueInfo(name) for name in by_queue))
        for queue in queues:
            if queue_points.overused(ssn, queue):
                continue
            for job in ssn.sorted_jobs(by_queue[queue.name]):
                if ssn.should_stop():
                    return
                self._reclaim_for(ssn, queue, job, nodes)

    def _reclaim_for(self, ssn: Session, queue: QueueInfo, job: JobInfo, nodes: list[NodeInfo]) -> None:
        statements: list[Statement] = []

        def candidate(task: TaskInfo) -> bool:
            victim_job = ssn.jobs.get(task.job_id)
            if not evictable(task) or victim_job is None or victim_job.queue == job.queue:
                return False
            victim_queue = ssn.queues.get(victim_job.queue)
            return victim_queue is None or victim_queue.reclaimable

        for reclaimer in pending_preemptors(ssn, job):
            if not job_starving(ssn, job):
                break
            if not queue_points.preemptive(ssn, queue, reclaimer):
                continue
            if not ssn.pre_predicate(reclaimer).passed:
                continue
            choice = choose_victims(ssn, reclaimer, nodes, candidate, ssn.reclaimable, gang=self.gang)
            if choice is None:
                continue
            reason = f"reclaimed by {reclaimer.key} of queue {queue.name} ({self.name})"
            statement = place_with_evictions(ssn, queue, reclaimer, choice, reason, check_queue=False)
            if statement is not None:
                statements.append(statement)
        if settle(ssn, job, statements):
            _log.info("reclaim committed", action=self.name, job=job.key, placements=len(statements))
