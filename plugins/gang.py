"""gang: a job runs all together or not at all (Volcano's gang plugin).

A job is valid while enough of its tasks can still run, ready once minAvailable tasks are placed,
pipelined once placed plus pipelined tasks reach minAvailable; jobs not yet ready go first; an
evicting action may take a job's tasks only while it keeps more than minAvailable running.
"""

from __future__ import annotations

from collections.abc import Sequence

from numasched.api.job import JobInfo
from numasched.api.task import TaskInfo
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import ABSTAIN, PERMIT, REJECT, Session
from numasched.scheduler.framework.status import ValidateResult

PLUGIN_NAME = "gang"
NOT_ENOUGH_TASKS = "NotEnoughTasks"


def job_valid(job: JobInfo) -> ValidateResult | None:
    valid = job.valid_task_num()
    if valid < job.min_available:
        return ValidateResult(
            passed=False,
            reason=NOT_ENOUGH_TASKS,
            message=f"not enough valid tasks for gang-scheduling of {job.key}: valid {valid}, min {job.min_available}",
        )
    return None


def job_pipelined(job: JobInfo) -> int:
    return PERMIT if job.is_pipelined() else REJECT


def job_order(first: JobInfo, second: JobInfo) -> int:
    first_ready, second_ready = first.is_ready(), second.is_ready()
    if first_ready == second_ready:
        return 0
    return 1 if first_ready else -1


def victims_keeping_gangs(
    ssn: Session, evictor: TaskInfo, preemptees: Sequence[TaskInfo]
) -> tuple[list[TaskInfo], int]:
    """Volcano's gang preemptable / reclaimable: a job gives up tasks only while it keeps more
    than minAvailable of them running (counted down as its victims are chosen).

    When that leaves no victim at all the plugin abstains: in Volcano an empty answer voids its
    tier and the next tier decides, whereas numasched's session takes an empty answer as a veto
    (so conformance's protection holds); abstaining keeps Volcano's outcome -- a single pod or a
    gang at its minimum is not protected by gang alone -- while conformance still filters. Also
    abstains for an evictor whose job the session does not hold."""
    if evictor.job_id not in ssn.jobs:
        return [], ABSTAIN
    occupied: dict[str, int] = {}
    victims: list[TaskInfo] = []
    for preemptee in preemptees:
        job = ssn.jobs.get(preemptee.job_id)
        if job is None:
            continue
        left = occupied.setdefault(job.uid, job.ready_task_num())
        if left > job.min_available:
            occupied[job.uid] = left - 1
            victims.append(preemptee)
    return victims, PERMIT if victims else ABSTAIN


class GangPlugin:
    name = PLUGIN_NAME

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_job_valid_fn(self.name, job_valid)
        ssn.add_job_order_fn(self.name, job_order)
        ssn.add_job_ready_fn(self.name, JobInfo.is_ready)
        ssn.add_job_pipelined_fn(self.name, job_pipelined)
        ssn.add_preemptable_fn(
            self.name, lambda preemptor, preemptees: victims_keeping_gangs(ssn, preemptor, preemptees)
        )
        ssn.add_reclaimable_fn(
            self.name, lambda reclaimer, reclaimees: victims_keeping_gangs(ssn, reclaimer, reclaimees)
        )

    def on_session_close(self, ssn: Session) -> None:
        """A PodGroup that is still short of its minimum says why (Volcano's Unschedulable
        condition)."""
        for job in ssn.jobs.values():
            if not job.has_pod_group or job.is_ready():
                continue
            unplaced = [task for task in job.pending_tasks() if task.fit_error]
            if not unplaced:
                continue
            missing = job.min_available - job.ready_task_num()
            first = min(unplaced, key=lambda task: task.key)
            message = f"{missing}/{len(job.tasks)} tasks in gang unschedulable: {first.key}: {first.fit_error}"
            phase = ssn.job_updates[job.uid].phase if job.uid in ssn.job_updates else job.pod_group_phase
            ssn.set_job_status(job, phase or "Pending", message)


def build(arguments: Arguments) -> GangPlugin:
    return GangPlugin(arguments)
