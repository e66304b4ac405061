"""Evicting through the Eviction API (policy/v1, POST pods/<name>/eviction), so the API server
honours PodDisruptionBudgets: a budget that allows no disruption now answers 429 and the pod keeps
running (the next session may choose other victims).

As kube-scheduler does for a pod it preempts, the victim first gets the DisruptionTarget condition
(reason PreemptionByScheduler, saying who needs the room), then the eviction is asked for, with the
pod's uid as precondition so a new pod of the same name is never hit, then a Preempted event
names the preemptor. When the budget refuses, the condition is set back to False with why.
Every request is bounded by the timeout; nothing raises out of evict.
"""

from __future__ import annotations

import uuid
from typing import Any

import aiohttp
import structlog
from kubernetes_asyncio import client

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
from numasched.cache.kube.binder import DEFAULT_TIMEOUT_S, pod_reference, rfc3339
from numasched.cache.kube.informer import read_status

log = structlog.get_logger("numasched.evictor")

BLOCKED_REASON = "EvictionBlocked"


def outcome_for_status(status: int, message: str) -> EvictOutcome:
    if 200 <= status < 300:
        return EvictOutcome(EvictStatus.EVICTED)
    if status == 429:
        return EvictOutcome(EvictStatus.BLOCKED, message)
    if status in (404, 409):
        # 409: the uid precondition failed, the pod of that name is another one.
        return EvictOutcome(EvictStatus.GONE, message)
    return EvictOutcome(EvictStatus.FAILED, f"{status}: {message}")


def eviction_body(request: EvictRequest) -> dict[str, Any]:
    task = request.task
    body: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": task.name, "namespace": task.namespace},
    }
    if task.uid:
        body["deleteOptions"] = {"preconditions": {"uid": task.uid}}
    return body


class KubeEvictor(Evictor):
    def __init__(
        self, api_client: client.ApiClient, *, scheduler_name: str = "numasched", timeout: float = DEFAULT_TIMEOUT_S
    ) -> None:
        self._core: Any = client.CoreV1Api(api_client)
        self._scheduler_name = scheduler_name
        self._timeout = timeout

    async def evict(self, request: EvictRequest) -> EvictOutcome:
        task = request.task
        message = condition_message(self._scheduler_name, request)
        await self._condition(request, "True", PREEMPTION_REASON, message)
        try:
            response = await self._core.create_namespaced_pod_eviction(
                task.name,
                task.namespace,
                eviction_body(request),
                _preload_content=False,
                _request_timeout=self._timeout,
            )
            if 200 <= response.status < 300:
                response.release()
                outcome = EvictOutcome(EvictStatus.EVICTED)
            else:
                error = await read_status(response)
                outcome = outcome_for_status(error.status, error.message)
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            outcome = EvictOutcome(EvictStatus.FAILED, f"eviction request failed: {error!r}")
        if outcome.status is EvictStatus.EVICTED:
            log.info("evicted", pod=task.key, node=request.node_name, reason=request.reason)
            await self._event(request)
        else:
            log.warning(
                "eviction not done; the pod keeps running",
                pod=task.key,
                node=request.node_name,
                status=str(outcome.status),
                error=outcome.message,
            )
            if outcome.status is not EvictStatus.GONE:
                await self._condition(request, "False", BLOCKED_REASON, f"eviction refused: {outcome.message}")
        return outcome

    async def _condition(self, request: EvictRequest, status: str, reason: str, message: str) -> None:
        task = request.task
        condition = {
            "type": DISRUPTION_TARGET,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": rfc3339(),
        }
        await self._send(
            f"pod {task.key} condition",
            self._core.patch_namespaced_pod_status(
                task.name,
                task.namespace,
                {"status": {"conditions": [condition]}},
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )

    async def _event(self, request: EvictRequest) -> None:
        task = request.task
        now = rfc3339()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{task.name}.{uuid.uuid4().hex[:16]}", "namespace": task.namespace},
            "involvedObject": {key: value for key, value in pod_reference(task).items() if value},
            "type": "Normal",
            "reason": PREEMPTED_EVENT_REASON,
            "message": event_message(request)[:1024],
            "action": "Preempting",
            "source": {"component": self._scheduler_name},
            "reportingComponent": self._scheduler_name,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        await self._send(
            f"event Preempted for pod {task.key}",
            self._core.create_namespaced_event(
                task.namespace, body, _preload_content=False, _request_timeout=self._timeout
            ),
        )

    async def _send(self, what: str, call: Any) -> None:
        """A best-effort write: a failure is logged, never raised."""
        try:
            response = await call
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            log.warning("eviction note not written", target=what, error=repr(error))
            return
        if 200 <= response.status < 300:
            response.release()
            return
        refusal = await read_status(response)
        log.warning("eviction note refused", target=what, status=refusal.status, error=refusal.message)
