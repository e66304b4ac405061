"""allocate: place the pending tasks that ask for resources, job by job, gang-aware (Volcano).

Queues in name order, their jobs in job order, each job's pending tasks in task order. A task
goes to the best node that passes the resource check and the predicates; the job's placements
are bound together once the job is ready, kept when it is pipelined, rolled back otherwise.
"""

from __future__ import annotations

from collections.abc import Sequence

import structlog

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.snapshot import QueueInfo
from numasched.api.task import TaskInfo
from numasched.scheduler.actions.enqueue import QUEUE_OPEN, is_pending
from numasched.scheduler.session import Session
from numasched.scheduler.statement import JobOutcome, Statement, settle_job
from numasched.scheduler.status import Status

_log = structlog.get_logger(__name__)


def resource_fit(task: TaskInfo, node: NodeInfo) -> list[Status]:
    """What the node cannot hold of the task, counting resources being released (Volcano's
    allocate checks this itself, before the plugins' predicates)."""
    return [
        Status.unschedulable(f"Insufficient {name}", "allocate")
        for name in task.init_resreq.insufficient(node.future_idle())
    ]


def feasible_nodes(ssn: Session, task: TaskInfo, nodes: Sequence[NodeInfo], *, check_resources: bool) -> list[NodeInfo]:
    """Nodes that pass; why each other node failed is recorded on the session."""
    passing: list[NodeInfo] = []
    for node in nodes:
        missing = resource_fit(task, node) if check_resources else []
        if missing:
            for status in missing:
                ssn.record_fit_error(task, node.name, status)
            continue
        status = ssn.predicate(task, node)
        if not status.passed:
            ssn.record_fit_error(task, node.name, status)
            continue
        passing.append(node)
    return passing


def choose_node(ssn: Session, task: TaskInfo, candidates: list[NodeInfo]) -> NodeInfo:
    """A best-node plugin's choice, else the highest total score; ties go to the smallest name
    so the same cluster always gets the same placement."""
    batch = ssn.batch_node_order(task, candidates)
    by_score: dict[float, list[NodeInfo]] = {}
    for node in candidates:
        score = ssn.node_order(task, node) + batch.get(node.name, 0.0)
        by_score.setdefault(score, []).append(node)
    chosen = ssn.best_node(task, by_score)
    if chosen is not None:
        return chosen
    return min(by_score[max(by_score)], key=lambda node: node.name)


def _mark_pending(job: JobInfo, message: str) -> None:
    for task in job.pending_tasks():
        if not task.fit_error:
            task.fit_error = message


def _gang_message(job: JobInfo, placed: int, failures: list[TaskInfo]) -> str:
    message = f"pod group {job.key} is not ready: {placed} of {job.min_available} required tasks could be placed"
    if failures:
        message += f"; {failures[0].key}: {failures[0].fit_error}"
    return message


class AllocateAction:
    name = "allocate"

    def execute(self, ssn: Session) -> None:
        nodes = sorted(ssn.nodes.values(), key=lambda node: node.name)
        by_queue: dict[str, list[JobInfo]] = {}
        for job in ssn.jobs.values():
            by_queue.setdefault(job.queue, []).append(job)
        for queue_name in sorted(by_queue):
            queue = ssn.queues.get(queue_name) or QueueInfo(queue_name)
            for job in ssn.sorted_jobs(by_queue[queue_name]):
                if not any(not task.best_effort for task in job.pending_tasks()):
                    continue
                if queue.state != QUEUE_OPEN:
                    _mark_pending(job, f"queue {queue.name} is {queue.state}")
                    continue
                if is_pending(job):
                    _mark_pending(job, f"pod group {job.key} is not admitted yet (phase Pending)")
                    continue
                verdict = ssn.job_valid(job)
                if verdict is not None:
                    _mark_pending(job, verdict.message or verdict.reason)
                    continue
                self._allocate_job(ssn, queue, job, nodes)

    def _allocate_job(self, ssn: Session, queue: QueueInfo, job: JobInfo, nodes: list[NodeInfo]) -> None:
        pending = [task for task in ssn.sorted_tasks(job.pending_tasks()) if not task.best_effort]
        best_effort_pending = len(job.pending_tasks()) - len(pending)
        statement = Statement(ssn)
        failures: list[TaskInfo] = []
        for index, task in enumerate(pending):
            if not ssn.allocatable(queue, task):
                task.fit_error = f"queue {queue.name} cannot take this task now"
                failures.append(task)
                continue
            pre = ssn.pre_predicate(task)
            if not pre.passed:
                task.fit_error = pre.reason or f"rejected by {pre.plugin}"
                failures.append(task)
            else:
                candidates = feasible_nodes(ssn, task, nodes, check_resources=True)
                if candidates:
                    node = choose_node(ssn, task, candidates)
                    if task.init_resreq.fits_in(node.idle):
                        statement.allocate(task, node)
                    else:
                        statement.pipeline(task, node)
                    continue
                task.fit_error = ssn.fit_error_message(task)
                failures.append(task)
            # Keep going only while the gang can still be met by the tasks left to try.
            remaining = len(pending) - index - 1 + best_effort_pending
            if job.ready_task_num() + job.waiting_task_num() + remaining < job.min_available:
                break
        placed = job.ready_task_num() + job.waiting_task_num()
        outcome = settle_job(ssn, job, statement)
        if outcome is JobOutcome.KEPT:
            for task in pending:
                if task.node_name and not task.fit_error:
                    task.fit_error = f"pod group {job.key} is pipelined: waiting for resources being released"
        _mark_pending(job, _gang_message(job, placed, failures))
        _log.debug("job allocated", job=job.key, outcome=outcome.value, placed=placed, failed=len(failures))
