"""Evicting: what the scheduling loop asks the cluster to do with a preemption or reclaim victim.

The Kubernetes evictor (cache/kube/evictor.py) and the simulated cluster's (cache/sim_evictor.py)
both implement Evictor. evict is called once per victim the session committed; it reports the
outcome rather than raising, and bounds every request it makes by its own timeout.
"""

from __future__ import annotations

import enum
from typing import Protocol

import attrs

from numasched.api.task import TaskInfo

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
