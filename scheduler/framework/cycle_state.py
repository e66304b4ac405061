"""Per-pod state for one decision (kube-scheduler's CycleState): what plugins compute once per pod
at pre-predicate and read per node in predicate, node order and allocate.

The session hands out one CycleState per task being decided (`Session.cycle_state(task)`); a new
task gets a fresh one, so nothing computed for one pod can leak into the next. Keys are chosen by
the plugins (their own name as a prefix keeps them apart).
"""

from __future__ import annotations

from typing import Any


class CycleState:
    __slots__ = ("_values", "task_uid")

    def __init__(self, task_uid: str) -> None:
        self.task_uid = task_uid
        self._values: dict[str, Any] = {}

    def read(self, key: str) -> Any:
        """The value written under key; KeyError when nothing was."""
        return self._values[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._values.get(key, default)

    def write(self, key: str, value: Any) -> None:
        self._values[key] = value

    def __contains__(self, key: object) -> bool:
        return key in self._values
