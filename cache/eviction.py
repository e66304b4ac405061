"""Evicting: what the scheduling loop asks the cluster to do with a preemption or reclaim victim.

The Kubernetes evictor (cache/kube/evictor.py) and the simulated cluster's (cache/sim_evictor.py)
both implement Evictor. evict is called once per victim the session committed; it reports the
outcome rather than raising, and bounds every request it makes by its own timeout.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import Protocol

import attrs
import structlog

from numasched.api.task import TaskInfo

_log = structlog.get_logger("numasched.eviction")

# kube-scheduler's condition and reason for a pod it preempts (k8s.io/api core/v1).
DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_REASON = "PreemptionByScheduler"
# The event reason kube-scheduler writes on a preempted pod.
PREEMPTED_EVENT_REASON = "Preempted"


class EvictStatus(enum.StrEnum):
    EVICTED = "Evicted"
    BLOCKED = "Blocked"  # a PodDisruptionBudget does not allow it now (429)
    GONE = "Gone"  # the pod no longer exists (404), or is another pod of that name
    FAILED = "Failed"  # anything else: 5xx, timeout, connection error


@attrs.frozen(slots=True)
class EvictRequest:
    task: TaskInfo
    node_name: str
    # Who is making room and why, as the session recorded it ("preempted by team/trainer (preempt)").
    reason: str


@attrs.frozen(slots=True)
class EvictOutcome:
    status: EvictStatus
    message: str = ""


class Evictor(Protocol):
    async def evict(self, request: EvictRequest) -> EvictOutcome: ...


def condition_message(scheduler_name: str, request: EvictRequest) -> str:
    return f"{scheduler_name}: {request.reason}, to make room on node {request.node_name}"


def event_message(request: EvictRequest) -> str:
    reason = request.reason
    return f"{reason[:1].upper()}{reason[1:]} on node {request.node_name}"


def eviction_call(evictor: Evictor, request: EvictRequest) -> Callable[[], Awaitable[None]]:
    """The loop's unit of work for one victim: evict it and log what came of it (never raises
    for an outcome; the caller bounds the whole call by its report timeout)."""

    async def call() -> None:
        outcome = await evictor.evict(request)
        if outcome.status is EvictStatus.EVICTED:
            _log.info("victim evicted", pod=request.task.key, node=request.node_name, reason=request.reason)
        else:
            _log.warning(
                "victim not evicted; it keeps running and the next cycle decides again",
                pod=request.task.key,
                node=request.node_name,
                status=str(outcome.status),
                error=outcome.message,
            )

    return call
