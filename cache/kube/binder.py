"""Writing to the API server: Bindings, events, the PodScheduled condition, PodGroup status.

Every call is bounded by a timeout. The binder uses the client's raw mode and reads the status
code itself: the client cannot deserialize the Status the API server answers a Binding with, and
in raw mode it does not raise on 4xx/5xx, so the code is the only truth about the outcome.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import aiohttp
import structlog
from kubernetes_asyncio import client

from numasched.api.job import JobInfo
from numasched.api.task import TaskInfo
from numasched.cache.binder import BindOutcome, BindRequest, BindStatus
from numasched.cache.kube.informer import read_status

log = structlog.get_logger("numasched.binder")

DEFAULT_TIMEOUT_S = 10.0
# The same unschedulable message is not written again for a pod more often than this.
DEFAULT_REPEAT_INTERVAL_S = 60.0
MERGE_PATCH = "application/merge-patch+json"


def rfc3339(moment: float | None = None) -> str:
    stamp = datetime.fromtimestamp(time.time() if moment is None else moment, UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(moment: float | None = None) -> str:
    stamp = datetime.fromtimestamp(time.time() if moment is None else moment, UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def outcome_for_status(status: int, message: str) -> BindOutcome:
    if 200 <= status < 300:
        return BindOutcome(BindStatus.BOUND)
    if status == 409:
        return BindOutcome(BindStatus.CONFLICT, message)
    if status == 404:
        return BindOutcome(BindStatus.GONE, message)
    return BindOutcome(BindStatus.FAILED, f"{status}: {message}")


class KubeBinder:
    """POST pods/{name}/binding with the allocation annotations in the Binding's metadata."""

    def __init__(self, api_client: client.ApiClient, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        # Any: in raw mode the client returns the HTTP response, not the model its stubs promise.
        self._core: Any = client.CoreV1Api(api_client)
        self._timeout = timeout

    async def bind(self, request: BindRequest) -> BindOutcome:
        task = request.task
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": task.name, "namespace": task.namespace, "annotations": dict(request.annotations)},
            "target": {"apiVersion": "v1", "kind": "Node", "name": request.node_name},
        }
        if task.uid:
            # The API server refuses the binding if the pod was replaced by another of the same name.
            body["metadata"]["uid"] = task.uid
        try:
            response = await self._core.create_namespaced_pod_binding(
                task.name, task.namespace, body, _preload_content=False, _request_timeout=self._timeout
            )
            if 200 <= response.status < 300:
                response.release()
                outcome = BindOutcome(BindStatus.BOUND)
            else:
                error = await read_status(response)
                outcome = outcome_for_status(error.status, error.message)
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            outcome = BindOutcome(BindStatus.FAILED, f"bind request failed: {error!r}")
        if outcome.status is BindStatus.BOUND:
            log.info("bound", pod=task.key, node=request.node_name)
        else:
            log.warning(
                "bind failed", pod=task.key, node=request.node_name, status=str(outcome.status), error=outcome.message
            )
        return outcome


class KubeStatusReporter:
    """Events and conditions a person reads to learn why a pod is (not) running."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        scheduler_name: str = "numasched",
        timeout: float = DEFAULT_TIMEOUT_S,
        repeat_interval: float = DEFAULT_REPEAT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        instance: str = "",
    ) -> None:
        self._core: Any = client.CoreV1Api(api_client)
        self._custom: Any = client.CustomObjectsApi(api_client)
        self._scheduler_name = scheduler_name
        self._instance = instance or scheduler_name
        self._timeout = timeout
        self._repeat_interval = repeat_interval
        self._clock = clock
        # Per pod (or job): the last message written and when, to keep events from flooding.
        self._last_written: dict[str, tuple[str, float]] = {}
        self.write_errors = 0

    def _should_write(self, key: str, message: str) -> bool:
        now = self._clock()
        last = self._last_written.get(key)
        if last is not None and last[0] == message and now - last[1] < self._repeat_interval:
            return False
        self._last_written[key] = (message, now)
        return True

    async def scheduled(self, task: TaskInfo, node_name: str) -> None:
        self._last_written.pop(task.uid or task.key, None)
        await self.event(
            pod_reference(task),
            "Normal",
            "Scheduled",
            f"Successfully assigned {task.namespace}/{task.name} to {node_name}",
            action="Binding",
        )

    async def unschedulable(self, task: TaskInfo, message: str) -> None:
        if not self._should_write(task.uid or task.key, message):
            return
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": rfc3339(),
        }
        await self._call(
            f"pod {task.key} condition",
            self._core.patch_namespaced_pod_status(
                task.name,
                task.namespace,
                {"status": {"conditions": [condition]}},
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )
        await self.event(pod_reference(task), "Warning", "FailedScheduling", message, action="Scheduling")

    async def job_status(self, job: JobInfo, phase: str, message: str) -> None:
        if not job.has_pod_group or not self._should_write(f"podgroup/{job.key}", f"{phase}\n{message}"):
            return
        condition_type = "Unschedulable" if message else "Scheduled"
        condition = {
            "type": condition_type,
            "status": "True",
            "reason": "NotEnoughResources" if message else "tasks in gang are ready to be scheduled",
            "message": message,
            "transitionID": str(uuid.uuid4()),
            "lastTransitionTime": rfc3339(),
        }
        await self._call(
            f"podgroup {job.key} status",
            self._custom.patch_namespaced_custom_object_status(
                "scheduling.volcano.sh",
                "v1beta1",
                job.namespace,
                "podgroups",
                job.name,
                {"status": {"phase": phase, "conditions": [condition]}},
                _content_type=MERGE_PATCH,
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )
        if message:
            reference = {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "namespace": job.namespace,
                "name": job.name,
                "uid": job.uid if "/" not in job.uid else "",
            }
            await self.event(reference, "Warning", "Unschedulable", message, action="Scheduling")

    async def event(
        self, involved: Mapping[str, Any], event_type: str, reason: str, message: str, *, action: str = ""
    ) -> None:
        """A core/v1 Event about an object; a failure to write it is logged, never raised."""
        namespace = str(involved.get("namespace") or "default")
        now = rfc3339()
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{involved.get('name', 'object')}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": {k: v for k, v in involved.items() if v},
            "type": event_type,
            "reason": reason,
            "message": message[:1024],
            "action": action,
            "source": {"component": self._scheduler_name},
            "reportingComponent": self._scheduler_name,
            "reportingInstance": self._instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        await self._call(
            f"event {reason} for {involved.get('kind')} {namespace}/{involved.get('name')}",
            self._core.create_namespaced_event(namespace, body, _preload_content=False, _request_timeout=self._timeout),
        )

    async def _call(self, what: str, request: Any) -> None:
        try:
            response = await request
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            self.write_errors += 1
            log.warning("status write failed", target=what, error=repr(error))
            return
        if 200 <= response.status < 300:
            response.release()
            return
        error_status = await read_status(response)
        self.write_errors += 1
        log.warning("status write refused", target=what, status=error_status.status, error=error_status.message)


def pod_reference(task: TaskInfo) -> dict[str, str]:
    return {"apiVersion": "v1", "kind": "Pod", "namespace": task.namespace, "name": task.name, "uid": task.uid}
