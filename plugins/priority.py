"""priority: jobs and tasks of higher priority go first (Volcano's priority plugin).

A PriorityClass known to the cluster gives the value; without one, the priority the object carries.
As a preemptable filter it lets a preemptor take only tasks of lower-priority jobs (or, within its
own job, lower-priority tasks).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from numasched.api.job import JobInfo
from numasched.api.task import TaskInfo
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import ABSTAIN, PERMIT, Session

PLUGIN_NAME = "priority"


def effective_priority(item: JobInfo | TaskInfo, priority_classes: Mapping[str, int]) -> int:
    if item.priority_class_name and item.priority_class_name in priority_classes:
        return priority_classes[item.priority_class_name]
    return item.priority


def _higher_first(first: int, second: int) -> int:
    if first == second:
        return 0
    return -1 if first > second else 1


class PriorityPlugin:
    name = PLUGIN_NAME

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments

    def on_session_open(self, ssn: Session) -> None:
        classes = ssn.snapshot.priority_classes

        def job_order(first: JobInfo, second: JobInfo) -> int:
            return _higher_first(effective_priority(first, classes), effective_priority(second, classes))

        def task_order(first: TaskInfo, second: TaskInfo) -> int:
            return _higher_first(effective_priority(first, classes), effective_priority(second, classes))

        def preemptable(preemptor: TaskInfo, preemptees: Sequence[TaskInfo]) -> tuple[list[TaskInfo], int]:
            """Volcano: another job's task only when that job's priority is lower than the
            preemptor job's; a task of the same job only when its own priority is lower."""
            preemptor_job = ssn.jobs.get(preemptor.job_id)
            if preemptor_job is None:
                # Nothing to weigh the victims against: no opinion.
                return [], ABSTAIN
            victims = []
            for preemptee in preemptees:
                victim_job = ssn.jobs.get(preemptee.job_id)
                if victim_job is None:
                    continue
                if victim_job.uid != preemptor_job.uid:
                    if effective_priority(victim_job, classes) >= effective_priority(preemptor_job, classes):
                        continue
                elif effective_priority(preemptee, classes) >= effective_priority(preemptor, classes):
                    continue
                victims.append(preemptee)
            return victims, PERMIT

        ssn.add_job_order_fn(self.name, job_order)
        ssn.add_task_order_fn(self.name, task_order)
        ssn.add_preemptable_fn(self.name, preemptable)

    def on_session_close(self, ssn: Session) -> None:
        return None


def build(arguments: Arguments) -> PriorityPlugin:
    return PriorityPlugin(arguments)
