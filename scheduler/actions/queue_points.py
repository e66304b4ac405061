"""Queue order and overuse, asked of the plugins that implement them (proportion, capacity).

Volcano's session has QueueOrderFn and OverusedFn points; numasched's session does not (yet), so
the evicting actions ask the session's plugins directly, in tier order, honouring each plugin's
enableQueueOrder / enabledOverused flag exactly as a session point would.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from numasched.api.snapshot import QueueInfo
from numasched.api.task import TaskInfo
from numasched.scheduler.framework.session import Session

POINT_QUEUE_ORDER = "queueOrder"
POINT_OVERUSED = "overused"
POINT_PREEMPTIVE = "preemptive"


@runtime_checkable
class QueuePolicy(Protocol):
    def overused(self, queue: QueueInfo) -> bool: ...

    def queue_order(self, first: QueueInfo, second: QueueInfo) -> int: ...


def policies(ssn: Session, point: str) -> list[QueuePolicy]:
    """The plugins answering a queue point, in tier order (ask once per action: the check is a
    runtime protocol check, slow in a loop)."""
    return _policies(ssn, point)


def _policies(ssn: Session, point: str) -> list[QueuePolicy]:
    found: list[QueuePolicy] = []
    for tier in ssn.config.tiers:
        for option in tier.plugins:
            plugin = ssn.plugins.get(option.name)
            if option.is_enabled(point) and isinstance(plugin, QueuePolicy):
                found.append(plugin)
    return found


def overused(ssn: Session, queue: QueueInfo, answering: list[QueuePolicy] | None = None) -> bool:
    """True when any enabled plugin says the queue holds at least what it deserves."""
    if answering is None:
        answering = _policies(ssn, POINT_OVERUSED)
    return any(policy.overused(queue) for policy in answering)


def sorted_queues(
    ssn: Session, queues: Iterable[QueueInfo], answering: list[QueuePolicy] | None = None
) -> list[QueueInfo]:
    """The first plugin with an opinion decides; then the queue name."""
    ordering = _policies(ssn, POINT_QUEUE_ORDER) if answering is None else answering

    def compare(first: QueueInfo, second: QueueInfo) -> int:
        for policy in ordering:
            verdict = policy.queue_order(first, second)
            if verdict != 0:
                return verdict
        return (first.name > second.name) - (first.name < second.name)

    return sorted(queues, key=functools.cmp_to_key(compare))


@runtime_checkable
class PreemptivePolicy(Protocol):
    def preemptive(self, queue: QueueInfo, task: TaskInfo) -> bool: ...


def preemptive(ssn: Session, queue: QueueInfo, task: TaskInfo) -> bool:
    """Volcano's Preemptive point, which reclaim asks before a queue takes a task back from the
    others: every enabled plugin that implements it must agree (capacity does)."""
    for tier in ssn.config.tiers:
        for option in tier.plugins:
            plugin = ssn.plugins.get(option.name)
            enabled = option.is_enabled(POINT_PREEMPTIVE) and isinstance(plugin, PreemptivePolicy)
            if enabled and not plugin.preemptive(queue, task):  # type: ignore[union-attr]
                return False
    return True


@runtime_checkable
class VictimQueuePolicy(Protocol):
    def victim_queue_order(self, first: QueueInfo, second: QueueInfo, preemptor: QueueInfo) -> int: ...


def victim_queue_order(ssn: Session, first: QueueInfo, second: QueueInfo, preemptor: QueueInfo) -> int:
    """Volcano's VictimQueueOrderFn: which of two queues gives up a victim first for a preemptor
    of the third; the first plugin with an opinion decides (capacity with hierarchy: the queue
    nearer the preemptor's in the tree), else the queue order reversed (the queue served last
    gives first); 0 when nothing orders them."""
    for tier in ssn.config.tiers:
        for option in tier.plugins:
            plugin = ssn.plugins.get(option.name)
            if isinstance(plugin, VictimQueuePolicy):
                verdict = plugin.victim_queue_order(first, second, preemptor)
                if verdict != 0:
                    return verdict
    for policy in _policies(ssn, POINT_QUEUE_ORDER):
        verdict = policy.queue_order(first, second)
        if verdict != 0:
            return -verdict
    return 0
