"""conformance: never pick a cluster-critical pod as a victim (Volcano's conformance plugin).

Critical means the system-cluster-critical or system-node-critical class, or the kube-system
namespace. Registered as the preemptable and reclaimable filter that evicting actions consult.
"""

from __future__ import annotations

from collections.abc import Sequence

from numasched.api.task import TaskInfo
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import PERMIT, Session

PLUGIN_NAME = "conformance"
CRITICAL_PRIORITY_CLASSES = frozenset({"system-cluster-critical", "system-node-critical"})
SYSTEM_NAMESPACE = "kube-system"


def is_critical(task: TaskInfo) -> bool:
    return task.priority_class_name in CRITICAL_PRIORITY_CLASSES or task.namespace == SYSTEM_NAMESPACE


def evictable(evictor: TaskInfo, evictees: Sequence[TaskInfo]) -> tuple[list[TaskInfo], int]:
    return [task for task in evictees if not is_critical(task)], PERMIT


class ConformancePlugin:
    name = PLUGIN_NAME

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_preemptable_fn(self.name, evictable)
        ssn.add_reclaimable_fn(self.name, evictable)

    def on_session_close(self, ssn: Session) -> None:
        return None


def build(arguments: Arguments) -> ConformancePlugin:
    return ConformancePlugin(arguments)
