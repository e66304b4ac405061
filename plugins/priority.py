"""priority: jobs and tasks of higher priority go first (Volcano's priority plugin).

A PriorityClass known to the cluster gives the value; without one, the priority the object carries.
"""

from __future__ import annotations

from collections.abc import Mapping

from numasched.api.job import JobInfo
from numasched.api.task import TaskInfo
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import Session

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

        ssn.add_job_order_fn(self.name, job_order)
        ssn.add_task_order_fn(self.name, task_order)

    def on_session_close(self, ssn: Session) -> None:
        return None


def build(arguments: Arguments) -> PriorityPlugin:
    return PriorityPlugin(arguments)
