"""Evicting in the simulated cluster: the victim gets the DisruptionTarget condition and a Preempted
event, as through the API, and then terminates at once (the cache sees it deleted), so the next
cycle can bind the preemptor where it was pipelined.

PodDisruptionBudgets are honoured as the Eviction API honours them: an eviction that a budget
selecting the pod does not allow is refused (Blocked, as the API's 429), and an allowed one takes
one from the budget's status.disruptionsAllowed and lists the pod in status.disruptedPods. A budget
without a status (as input files usually have them) is worked out from the cluster's pods the way
the disruption controller would (see api/disruption_budget.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from numasched.api.disruption_budget import DisruptionBudget, computed_disruptions_allowed
from numasched.cache.convert_pdb import pdb_from_object
from numasched.cache.events import EventType, ObjectEvent, object_key
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
        refusal = self._take_from_budgets(pod)
        if refusal:
            return EvictOutcome(EvictStatus.BLOCKED, refusal)
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

    def _take_from_budgets(self, pod: Mapping[str, Any]) -> str:
        """Refuse (the reason) when a budget selecting the pod allows no disruption now; else
        record the disruption on every such budget's status, as the API server does."""
        metadata = pod.get("metadata") or {}
        namespace, name = str(metadata.get("namespace") or "default"), str(metadata.get("name") or "")
        labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
        selecting: list[tuple[dict[str, Any], DisruptionBudget]] = []
        for obj in self.cluster.objects["PodDisruptionBudget"].values():
            budget, _ = pdb_from_object(obj)
            if budget.matches(namespace, labels) and name not in budget.disrupted_pods:
                selecting.append((obj, budget))
        for _, budget in selecting:
            if self._allowed(budget) <= 0:
                return f"Cannot evict pod as it would violate the pod's disruption budget {budget.key}"
        for obj, budget in selecting:
            status = obj.setdefault("status", {})
            status["disruptionsAllowed"] = self._allowed(budget) - 1
            status.setdefault("disruptedPods", {})[name] = "simulated"
            self.cluster.objects["PodDisruptionBudget"][object_key("PodDisruptionBudget", obj)] = obj
            self.cluster.cache.apply(ObjectEvent("PodDisruptionBudget", EventType.MODIFIED, obj))
        return ""

    def _allowed(self, budget: DisruptionBudget) -> int:
        if budget.disruptions_allowed is not None:
            return budget.disruptions_allowed
        expected = healthy = 0
        for pod in self.cluster.objects["Pod"].values():
            metadata = pod.get("metadata") or {}
            labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
            if not budget.matches(str(metadata.get("namespace") or "default"), labels):
                continue
            phase = (pod.get("status") or {}).get("phase") or "Pending"
            if phase in ("Succeeded", "Failed"):
                continue
            expected += 1
            if phase == "Running" and not metadata.get("deletionTimestamp"):
                healthy += 1
        return computed_disruptions_allowed(budget, expected, healthy)
