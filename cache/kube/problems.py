"""Telling the owner of an object the scheduler cannot use why, on the object itself.

The cache reports a bad object (kind, name, the field and what is wrong with it) synchronously,
while an informer delivers it; writing to the API server is asynchronous, bounded by timeouts and
done only by the leader. So problems are noted here and written by `run`:

- a pod of ours (its schedulerName is one we serve), not bound and not being deleted: the
  PodScheduled=False condition with reason Unschedulable and a FailedScheduling event naming the
  field. The pod is read first (GET) for its schedulerName, uid and resourceVersion, since the
  object that failed to convert is exactly the one we could not read;
- any other object kind we watch: a Warning event on the object (PodGroup minMember -1, a Queue or
  Numatopology that does not convert).

Each object version is reported once: a problem noted again (a re-list, another replica that
became leader) for the same uid, resourceVersion and message is not written again, and a pod whose
PodScheduled condition already says the same is left alone. Memory is bounded: at most
MAX_PENDING problems wait and MAX_REMEMBERED reported versions are remembered.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from typing import Any

import aiohttp
import anyio
import attrs
import structlog
from kubernetes_asyncio import client

from numasched.cache.kube.binder import DEFAULT_TIMEOUT_S, KubeStatusReporter
from numasched.cache.kube.informer import parse_json, read_status

log = structlog.get_logger("numasched.problems")

MAX_PENDING = 10_000
MAX_REMEMBERED = 50_000
# How often a replica that does not lead looks again whether it leads now.
IDLE_POLL_S = 1.0
# Problems written at once (each is a read and one or two writes).
WRITE_CONCURRENCY = 8

# kind -> (apiVersion, plural) of the kinds the cache reports; group "" is the core API.
_KINDS: dict[str, tuple[str, str, str, bool]] = {
    "Pod": ("", "v1", "pods", True),
    "Node": ("", "v1", "nodes", False),
    "PriorityClass": ("scheduling.k8s.io", "v1", "priorityclasses", False),
    "PodGroup": ("scheduling.volcano.sh", "v1beta1", "podgroups", True),
    "Queue": ("scheduling.volcano.sh", "v1beta1", "queues", False),
    "Numatopology": ("nodeinfo.volcano.sh", "v1alpha1", "numatopologies", False),
    "NodeResourceTopology": ("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies", False),
    "PodDisruptionBudget": ("policy", "v1", "poddisruptionbudgets", True),
}


@attrs.frozen(slots=True)
class ObjectProblem:
    kind: str
    # "namespace/name" for namespaced kinds, "name" otherwise (as the cache names objects).
    name: str
    message: str


@attrs.frozen(slots=True)
class ObjectState:
    """What a report about an object depends on, read from the API server."""

    uid: str
    resource_version: str
    scheduler_name: str = ""
    node_name: str = ""
    deleting: bool = False
    # (reason, message) of the pod's PodScheduled=False condition, if it has one.
    scheduled_false: tuple[str, str] | None = None


def object_state(obj: Mapping[str, Any]) -> ObjectState:
    """The fields a report needs, read leniently from an object we know may be malformed."""
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    spec = obj.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}
    status = obj.get("status")
    status = status if isinstance(status, Mapping) else {}
    scheduled_false = None
    conditions = status.get("conditions")
    for condition in conditions if isinstance(conditions, list) else ():
        is_scheduled = isinstance(condition, Mapping) and condition.get("type") == "PodScheduled"
        if is_scheduled and condition.get("status") == "False":
            scheduled_false = (str(condition.get("reason") or ""), str(condition.get("message") or ""))
    return ObjectState(
        uid=str(metadata.get("uid") or ""),
        resource_version=str(metadata.get("resourceVersion") or ""),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=str(spec.get("nodeName") or ""),
        deleting=bool(metadata.get("deletionTimestamp")),
        scheduled_false=scheduled_false,
    )


def problem_message(problem: ObjectProblem) -> str:
    """The text a person reads on the object: which object, which field, what is wrong."""
    if problem.kind == "Pod":
        return f"pod spec cannot be scheduled: {problem.message}"
    return f"{problem.kind} {problem.name} is not usable by the scheduler: {problem.message}"


class ObjectProblemWriter:
    """Notes problems the cache reports and writes them, as the leader, onto the objects."""

    def __init__(
        self,
        api_client: client.ApiClient,
        reporter: KubeStatusReporter,
        *,
        scheduler_names: Collection[str] = ("numasched",),
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self._core: Any = client.CoreV1Api(api_client)
        self._custom: Any = client.CustomObjectsApi(api_client)
        self._scheduling: Any = client.SchedulingV1Api(api_client)
        self._reporter = reporter
        self._scheduler_names = frozenset(scheduler_names)
        self._timeout = timeout
        self._pending: OrderedDict[tuple[str, str], ObjectProblem] = OrderedDict()
        self._reported: OrderedDict[tuple[str, str, str, str], None] = OrderedDict()
        self._wake = anyio.Event()
        self.written = 0
        self.dropped = 0

    # -- noting (synchronous, from the cache's on_problem) --------------------------------------

    def note(self, kind: str, name: str, message: str) -> None:
        if kind not in _KINDS:
            return
        key = (kind, name)
        self._pending.pop(key, None)
        self._pending[key] = ObjectProblem(kind, name, message)
        while len(self._pending) > MAX_PENDING:
            dropped_key, _ = self._pending.popitem(last=False)
            self.dropped += 1
            log.warning("too many object problems waiting; oldest not reported", kind=dropped_key[0])
        self._wake.set()

    @property
    def pending(self) -> int:
        return len(self._pending)

    # -- writing (asynchronous, the leader only) ------------------------------------------------

    async def run(self, leading: Callable[[], bool] = lambda: True) -> None:
        """Write noted problems while `leading()`; until cancelled."""
        while True:
            if not self._pending:
                await self._wake.wait()
                self._wake = anyio.Event()
                continue
            if not leading():
                await anyio.sleep(IDLE_POLL_S)
                continue
            await self.flush()

    async def flush(self) -> None:
        """Write every problem noted so far (each bounded by the request timeout)."""
        batch = list(self._pending.values())
        self._pending.clear()
        limiter = anyio.CapacityLimiter(WRITE_CONCURRENCY)

        async def write_one(problem: ObjectProblem) -> None:
            async with limiter:
                try:
                    await self._write(problem)
                except Exception as error:  # reporting is best effort; the others go on
                    log.warning(
                        "object problem not written",
                        kind=problem.kind,
                        object=problem.name,
                        error=f"{type(error).__name__}: {error}",
                    )

        async with anyio.create_task_group() as group:
            for problem in batch:
                group.start_soon(write_one, problem)

    async def _write(self, problem: ObjectProblem) -> None:
        current = await self._read(problem.kind, problem.name)
        if current is None:
            return
        state = object_state(current)
        message = problem_message(problem)
        remembered = (problem.kind, state.uid, state.resource_version, message)
        if remembered in self._reported:
            return
        namespace, _, name = problem.name.rpartition("/")
        group, version, _, _ = _KINDS[problem.kind]
        reference = {
            "apiVersion": f"{group}/{version}" if group else version,
            "kind": problem.kind,
            "namespace": namespace,
            "name": name,
            "uid": state.uid,
        }
        if problem.kind == "Pod":
            if state.scheduler_name not in self._scheduler_names or state.node_name or state.deleting:
                return
            if state.scheduled_false != ("Unschedulable", message):
                await self._reporter.pod_unschedulable(reference, message)
                self.written += 1
        else:
            await self._reporter.event(reference, "Warning", "InvalidObject", message, action="Scheduling")
            self.written += 1
        self._reported[remembered] = None
        while len(self._reported) > MAX_REMEMBERED:
            self._reported.popitem(last=False)

    async def _read(self, kind: str, name: str) -> dict[str, Any] | None:
        group, version, plural, namespaced = _KINDS[kind]
        namespace, _, short_name = name.rpartition("/")
        options: dict[str, Any] = {"_preload_content": False, "_request_timeout": self._timeout}
        if kind == "Pod":
            request = self._core.read_namespaced_pod(short_name, namespace, **options)
        elif kind == "Node":
            request = self._core.read_node(short_name, **options)
        elif kind == "PriorityClass":
            request = self._scheduling.read_priority_class(short_name, **options)
        elif namespaced:
            request = self._custom.get_namespaced_custom_object(
                group, version, namespace, plural, short_name, **options
            )
        else:
            request = self._custom.get_cluster_custom_object(group, version, plural, short_name, **options)
        try:
            response = await request
            if not 200 <= response.status < 300:
                error = await read_status(response)
                if error.status != 404:
                    log.warning("object problem: read refused", kind=kind, object=name, status=error.status)
                return None
            try:
                body = parse_json(await response.read())
            finally:
                response.release()
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError, RecursionError) as error:
            log.warning("object problem: read failed", kind=kind, object=name, error=repr(error))
            return None
        return body if isinstance(body, dict) else None
