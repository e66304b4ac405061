"""Writing to the API server: Bindings, events, the PodScheduled condition, PodGroup status.

Every call is bounded by a timeout. The binder uses the client's raw mode and reads the status
code itself: the client cannot deserialize the Status the API server answers a Binding with, and
in raw mode it does not raise on 4xx/5xx, so the code is the only truth about the outcome.

PodGroup status is written as Volcano writes it: Volcano's PodGroup CRD declares no status
subresource (`subresources: {}`), so `PATCH podgroups/<name>/status` is a 404 on a real install.
We read the object, set its status, and update the whole object with the resourceVersion we read
as precondition; a 409 (someone wrote in between) reads again and re-applies, a few times.
"""

from __future__ import annotations

import json
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
from numasched.cache.binder import Binder, BindOutcome, BindRequest, BindStatus, StatusReporter
from numasched.cache.claim_status import ClaimWriteError, release_claims, reserve_claims
from numasched.cache.kube.informer import read_status

log = structlog.get_logger("numasched.binder")

DEFAULT_TIMEOUT_S = 10.0
# Read-modify-write rounds for a PodGroup before giving up until its next report.
POD_GROUP_CONFLICT_RETRIES = 5
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


class KubeBinder(Binder):
    """POST pods/{name}/binding with the allocation annotations in the Binding's metadata; before
    it, the pod's ResourceClaims' status (cache/claim_status.py), taken back if the binding fails."""

    def __init__(self, api_client: client.ApiClient, *, timeout: float = DEFAULT_TIMEOUT_S) -> None:
        # Any: in raw mode the client returns the HTTP response, not the model its stubs promise.
        self._core: Any = client.CoreV1Api(api_client)
        self._custom: Any = client.CustomObjectsApi(api_client)
        self._timeout = timeout

    # ---- ClaimStore (resource.k8s.io/v1 resourceclaims) ----------------------------------------

    async def get_claim(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            response = await self._custom.get_namespaced_custom_object(
                "resource.k8s.io", "v1", namespace, "resourceclaims", name,
                _preload_content=False, _request_timeout=self._timeout,
            )  # fmt: skip
            if response.status == 404:
                response.release()
                return None
            if not 200 <= response.status < 300:
                error = await read_status(response)
                raise ClaimWriteError(f"reading it failed: {error.status}: {error.message}")
            found: Mapping[str, Any] = json.loads(await response.read())
            return found
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as error:
            raise ClaimWriteError(f"reading it failed: {error!r}") from None

    async def put_claim_status(self, claim: Mapping[str, Any]) -> None:
        metadata = claim.get("metadata") or {}
        namespace, name = str(metadata.get("namespace") or ""), str(metadata.get("name") or "")
        try:
            response = await self._custom.replace_namespaced_custom_object_status(
                "resource.k8s.io", "v1", namespace, "resourceclaims", name, dict(claim),
                _preload_content=False, _request_timeout=self._timeout,
            )  # fmt: skip
            if 200 <= response.status < 300:
                response.release()
                return
            error = await read_status(response)
            raise ClaimWriteError(
                f"status write refused: {error.status}: {error.message}", conflict=error.status == 409
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            raise ClaimWriteError(f"status write failed: {error!r}") from None

    async def bind(self, request: BindRequest) -> BindOutcome:
        task = request.task
        # The claims first (kube-scheduler's PreBind): a pod is never bound without its devices.
        written, problem = await reserve_claims(self, task, request.node_name)
        if problem:
            log.warning("claims not written", pod=task.key, node=request.node_name, error=problem)
            return BindOutcome(BindStatus.FAILED, problem)
        outcome = await self._bind_pod(request)
        if outcome.status is not BindStatus.BOUND and written:
            for failure in await release_claims(self, written, task):
                log.warning("claim not released", pod=task.key, error=failure)
        return outcome

    async def _bind_pod(self, request: BindRequest) -> BindOutcome:
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


class KubeStatusReporter(StatusReporter):
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
        await self.pod_unschedulable(pod_reference(task), message)

    async def pod_unschedulable(
        self, reference: Mapping[str, str], message: str, *, reason: str = "Unschedulable"
    ) -> None:
        """PodScheduled=False with `reason` and a FailedScheduling event, on the pod `reference` names."""
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": rfc3339(),
        }
        namespace, name = str(reference.get("namespace") or ""), str(reference.get("name") or "")
        await self._call(
            f"pod {namespace}/{name} condition",
            self._core.patch_namespaced_pod_status(
                name,
                namespace,
                {"status": {"conditions": [condition]}},
                _preload_content=False,
                _request_timeout=self._timeout,
            ),
        )
        await self.event(reference, "Warning", "FailedScheduling", message, action="Scheduling")

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
        uid = await self._update_pod_group_status(job, phase, condition)
        if message:
            reference = {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "namespace": job.namespace,
                "name": job.name,
                "uid": uid,
            }
            await self.event(reference, "Warning", "Unschedulable", message, action="Scheduling")

    async def _update_pod_group_status(self, job: JobInfo, phase: str, condition: Mapping[str, Any]) -> str:
        """Read, set status, update with the read resourceVersion; again on 409. The uid read, or ""."""
        what = f"podgroup {job.key} status"
        uid = ""
        for _ in range(POD_GROUP_CONFLICT_RETRIES):
            current = await self._read(
                what,
                self._custom.get_namespaced_custom_object(
                    "scheduling.volcano.sh",
                    "v1beta1",
                    job.namespace,
                    "podgroups",
                    job.name,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                ),
            )
            if current is None:
                return uid
            metadata = current.get("metadata")
            uid = str(metadata.get("uid") or "") if isinstance(metadata, Mapping) else ""
            updated = with_pod_group_status(current, phase, condition)
            if updated == current:
                return uid
            status = await self._write(
                what,
                self._custom.replace_namespaced_custom_object(
                    "scheduling.volcano.sh",
                    "v1beta1",
                    job.namespace,
                    "podgroups",
                    job.name,
                    updated,
                    _preload_content=False,
                    _request_timeout=self._timeout,
                ),
            )
            if status != 409:
                return uid
        self.write_errors += 1
        log.warning("status write gave up", target=what, conflicts=POD_GROUP_CONFLICT_RETRIES)
        return uid

    async def _read(self, what: str, request: Any) -> dict[str, Any] | None:
        """The JSON object a GET answers, or None (logged) when it fails or is not an object."""
        try:
            response = await request
            if not 200 <= response.status < 300:
                error_status = await read_status(response)
                if error_status.status != 404:
                    self.write_errors += 1
                    log.warning("read before write refused", target=what, status=error_status.status)
                return None
            try:
                body = json.loads(await response.read())
            finally:
                response.release()
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as error:
            self.write_errors += 1
            log.warning("read before write failed", target=what, error=repr(error))
            return None
        return body if isinstance(body, dict) else None

    async def _write(self, what: str, request: Any) -> int:
        """Send a write; its HTTP status (0 when no answer came). 409 is left to the caller."""
        try:
            response = await request
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            self.write_errors += 1
            log.warning("status write failed", target=what, error=repr(error))
            return 0
        if 200 <= response.status < 300:
            response.release()
            return int(response.status)
        error_status = await read_status(response)
        if error_status.status != 409:
            self.write_errors += 1
            log.warning("status write refused", target=what, status=error_status.status, error=error_status.message)
        return error_status.status

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


def with_pod_group_status(current: Mapping[str, Any], phase: str, condition: Mapping[str, Any]) -> dict[str, Any]:
    """The PodGroup with its status phase set and `condition` in place of any of the same type, as
    Volcano's scheduler updates it. An existing condition that says the same (status, reason,
    message) is kept as it is, so an unchanged report is a no-op write (no new resourceVersion)."""
    updated = dict(current)
    raw_status = current.get("status")
    status: dict[str, Any] = dict(raw_status) if isinstance(raw_status, Mapping) else {}
    raw_conditions = status.get("conditions")
    conditions = [c for c in raw_conditions if isinstance(c, Mapping)] if isinstance(raw_conditions, list) else []
    same = ("status", "reason", "message")
    result: list[Mapping[str, Any]] = []
    placed = False
    for existing in conditions:
        if existing.get("type") != condition.get("type"):
            result.append(existing)
        elif not placed:
            placed = True
            says_the_same = all(existing.get(key) == condition.get(key) for key in same)
            result.append(existing if says_the_same else dict(condition))
    if not placed:
        result.append(dict(condition))
    status["phase"] = phase
    status["conditions"] = result
    updated["status"] = status
    return updated
