"""Evicting in the simulated cluster: the victim gets the DisruptionTarget condition and a Preempted
event, as through the API, and then terminates at once (the cache sees it deleted), so the next
cycle can bind the preemptor where it was pipelined. PodDisruptionBudgets are not simulated."""

from __future__ import annotations

import attrs

from numasched.cache.events import EventType, ObjectEvent
from numasched.cache.eviction import (
    DISRUPTION_TARGET,
    PREEMPTED_EVENT_REASON,
    PREEMPTION_REASON,
    Evictor,
    EvictOutcome,
    EvictRequest,
    EvictStatus,
    condition_message,
    event_message,
)
from numasched.cache.simcluster import ClusterEvent, SimCluster


@attrs.frozen(slots=True)
class SimEviction:
    """One eviction done in the simulation, for the report."""

    pod: str
    node: str
    reason: str


class SimEvictor(Evictor):
    def __init__(self, cluster: SimCluster, *, scheduler_name: str = "numasched") -> None:
        self.cluster = cluster
        self.scheduler_name = scheduler_name
        self.evicted: list[SimEviction] = []

    async def evict(self, request: EvictRequest) -> EvictOutcome:
        task = request.task
        pods = self.cluster.objects["Pod"]
        pod = pods.get(task.key)
        uid = pod.get("metadata", {}).get("uid") if pod is not None else None
        if pod is None or (task.uid and uid and uid != task.uid):
            return EvictOutcome(EvictStatus.GONE, f"pod {task.key} not found")
        status = pod.setdefault("status", {})
        conditions = [c for c in status.get("conditions", []) if c.get("type") != DISRUPTION_TARGET]
        conditions.append(
            {
                "type": DISRUPTION_TARGET,
                "status": "True",
                "reason": PREEMPTION_REASON,
                "message": condition_message(self.scheduler_name, request),
            }
        )
        status["conditions"] = conditions
        self.cluster.events.append(
            ClusterEvent("Pod", task.key, "Normal", PREEMPTED_EVENT_REASON, event_message(request))
        )
        del pods[task.key]
        self.cluster.cache.apply(ObjectEvent("Pod", EventType.DELETED, pod))
        self.evicted.append(SimEviction(task.key, request.node_name, request.reason))
        return EvictOutcome(EvictStatus.EVICTED)
