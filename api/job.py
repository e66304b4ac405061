"""A job: a PodGroup's pods, or a single pod standing alone, with its gang minimum."""

from __future__ import annotations

import attrs

from numasched.api.resource import Resource
from numasched.api.task import READY_STATUSES, TaskInfo, TaskStatus

DEFAULT_QUEUE = "default"


@attrs.define(slots=True)
class JobInfo:
    uid: str
    namespace: str
    name: str
    queue: str = DEFAULT_QUEUE
    min_available: int = 1
    priority: int = 0
    priority_class_name: str = ""
    creation_timestamp: float = 0.0
    # True for a PodGroup object, False for a pod scheduled on its own.
    has_pod_group: bool = False
    pod_group_phase: str = ""
    min_resources: Resource | None = None
    tasks: dict[str, TaskInfo] = attrs.field(factory=dict)
    # The PodGroup's annotations (Volcano's job controller copies the Job's there).
    annotations: dict[str, str] = attrs.field(factory=dict)
    # ready_task_num's answer while the session sorts jobs (nothing changes a job meanwhile, and
    # the job-order functions ask it once per comparison); None otherwise.
    ready_while_sorting: int | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def add_task(self, task: TaskInfo) -> None:
        self.tasks[task.uid] = task

    def tasks_with(self, *statuses: TaskStatus) -> list[TaskInfo]:
        wanted = set(statuses)
        return [task for task in self.tasks.values() if task.status in wanted]

    def ready_task_num(self) -> int:
        if self.ready_while_sorting is not None:
            return self.ready_while_sorting
        return sum(1 for task in self.tasks.values() if task.status in READY_STATUSES)

    def waiting_task_num(self) -> int:
        return sum(1 for task in self.tasks.values() if task.status is TaskStatus.PIPELINED)

    def pending_tasks(self) -> list[TaskInfo]:
        return self.tasks_with(TaskStatus.PENDING)

    def valid_task_num(self) -> int:
        """Tasks that could still run: everything but Failed (Volcano's ValidTaskNum)."""
        return sum(1 for task in self.tasks.values() if task.status is not TaskStatus.FAILED)

    def is_ready(self) -> bool:
        return self.ready_task_num() >= self.min_available

    def is_pipelined(self) -> bool:
        return self.ready_task_num() + self.waiting_task_num() >= self.min_available

    def clone(self) -> JobInfo:
        copy = attrs.evolve(self, tasks={})
        for uid, task in self.tasks.items():
            copy.tasks[uid] = task.clone()
        return copy
