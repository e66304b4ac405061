"""A small Kubernetes API server for tests: objects in memory, the REST and watch protocol, faults.

It speaks enough of the real protocol for the real ``kubernetes_asyncio`` client: list (with
resourceVersion, label and field selectors), watch (chunked JSON lines, bookmarks, 410 Gone as an
ERROR event once history is compacted), get / create / update (409 on a stale resourceVersion) /
patch (merge, strategic merge, JSON patch) / delete, the ``pods/{name}/binding`` and ``status``
subresources, and a little discovery. A test injects faults on demand: drop every watch (now or
every N seconds), compact history, fail binds with 5xx or 409, slow responses, a group that is not
installed.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import random
import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

JsonObject = dict[str, Any]


@dataclass(frozen=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool
    subresources: tuple[str, ...] = ()

    @property
    def group_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


RESOURCE_TYPES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "pods", "Pod", True, ("status", "binding")),
    ResourceType("", "v1", "nodes", "Node", False, ("status",)),
    ResourceType("", "v1", "events", "Event", True),
    ResourceType("", "v1", "configmaps", "ConfigMap", True),
    ResourceType("", "v1", "namespaces", "Namespace", False, ("status",)),
    ResourceType("events.k8s.io", "v1", "events", "Event", True),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease", True),
    ResourceType("nodeinfo.volcano.sh", "v1alpha1", "numatopologies", "Numatopology", False),
    ResourceType("topology.node.k8s.io", "v1alpha2", "noderesourcetopologies", "NodeResourceTopology", False),
    # Volcano's PodGroup CRD declares `subresources: {}`: PATCH .../podgroups/<name>/status is a 404.
    ResourceType("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup", True),
    ResourceType("scheduling.volcano.sh", "v1beta1", "queues", "Queue", False, ("status",)),
    ResourceType("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", False),
    ResourceType("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, ("status",)),
)

# Lists merged by key in a strategic merge patch, as the Kubernetes types declare them.
STRATEGIC_MERGE_KEYS: dict[str, str] = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "env": "name",
    "ports": "containerPort",
    "volumes": "name",
    "tolerations": "key",
}


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


def status_body(code: int, reason: str, message: str) -> JsonObject:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success" if code < 400 else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


# ---------------------------------------------------------------------------------------------
# selectors


@dataclass(frozen=True)
class LabelRequirement:
    key: str
    operator: str  # in, notin, exists, !exists (equality is "in" / "notin" of one value)
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "exists":
            return self.key in labels
        if self.operator == "!exists":
            return self.key not in labels
        present = labels.get(self.key) in self.values
        return present if self.operator == "in" else not present


def parse_label_selector(text: str) -> tuple[LabelRequirement, ...]:
    """The label selector syntax: a=b, a==b, a!=b, a, !a, a in (x,y), a notin (x,y)."""
    requirements: list[LabelRequirement] = []
    for raw_term in re.findall(r"(?:[^,(]|\([^)]*\))+", text):
        term = raw_term.strip()
        if not term:
            continue
        set_match = re.fullmatch(r"([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)", term)
        equality = re.fullmatch(r"([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)", term)
        if set_match:
            key, op, values_text = set_match.groups()
            values = frozenset(v.strip() for v in values_text.split(",") if v.strip())
            requirements.append(LabelRequirement(key, op, values))
        elif equality:
            key, op, value = equality.groups()
            requirements.append(LabelRequirement(key, "notin" if op == "!=" else "in", frozenset({value})))
        elif re.fullmatch(r"![\w./-]+", term):
            requirements.append(LabelRequirement(term[1:], "!exists"))
        elif re.fullmatch(r"[\w./-]+", term):
            requirements.append(LabelRequirement(term, "exists"))
        else:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {term!r}")
    return tuple(requirements)


FIELD_PATHS: dict[str, tuple[str, ...]] = {
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
    "spec.nodeName": ("spec", "nodeName"),
    "spec.schedulerName": ("spec", "schedulerName"),
    "status.phase": ("status", "phase"),
}


def field_value(obj: Mapping[str, Any], path: tuple[str, ...]) -> str:
    value: Any = obj
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else None
    return "" if value is None else str(value)


@dataclass(frozen=True)
class FieldRequirement:
    path: tuple[str, ...]
    value: str
    negated: bool

    def matches(self, obj: Mapping[str, Any]) -> bool:
        return (field_value(obj, self.path) == self.value) != self.negated


def parse_field_selector(text: str) -> tuple[FieldRequirement, ...]:
    requirements: list[FieldRequirement] = []
    for raw_term in text.split(","):
        term = raw_term.strip()
        if not term:
            continue
        match = re.fullmatch(r"([\w.]+)\s*(==|=|!=)\s*(.*)", term)
        if not match or match.group(1) not in FIELD_PATHS:
            raise ApiError(400, "BadRequest", f"field label not supported: {term!r}")
        requirements.append(FieldRequirement(FIELD_PATHS[match.group(1)], match.group(3), match.group(2) == "!="))
    return tuple(requirements)


@dataclass(frozen=True)
class Selector:
    namespace: str | None
    labels: tuple[LabelRequirement, ...]
    fields: tuple[FieldRequirement, ...]

    def matches(self, obj: Mapping[str, Any]) -> bool:
        metadata = obj.get("metadata", {})
        if self.namespace is not None and metadata.get("namespace") != self.namespace:
            return False
        labels = metadata.get("labels") or {}
        return all(r.matches(labels) for r in self.labels) and all(r.matches(obj) for r in self.fields)


# ---------------------------------------------------------------------------------------------
# patches


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A strategic merge patch for the lists this server knows the merge key of; others replace."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and key in STRATEGIC_MERGE_KEYS and isinstance(result.get(key), list):
            merge_key = STRATEGIC_MERGE_KEYS[key]
            merged = [copy.deepcopy(item) for item in result[key]]
            for item in value:
                position = next(
                    (
                        i
                        for i, existing in enumerate(merged)
                        if isinstance(item, dict)
                        and isinstance(existing, dict)
                        and existing.get(merge_key) == item.get(merge_key)
                    ),
                    None,
                )
                if position is None:
                    merged.append(copy.deepcopy(item))
                else:
                    merged[position] = strategic_merge_patch(merged[position], item)
            result[key] = merged
        else:
            result[key] = strategic_merge_patch(result.get(key), value)
    return result


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 JSON patch: add, replace, remove, test."""
    if not isinstance(operations, list):
        raise ApiError(400, "BadRequest", "a JSON patch must be a list of operations")
    document = copy.deepcopy(target)
    for operation in operations:
        op, path = operation.get("op"), str(operation.get("path", ""))
        parts = [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]
        if not parts:
            raise ApiError(422, "Invalid", f"JSON patch path {path!r} names the whole object")
        parent = document
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.setdefault(part, {})
        last = parts[-1]
        try:
            if op == "test":
                current = parent[int(last)] if isinstance(parent, list) else parent.get(last)
                if current != operation.get("value"):
                    raise ApiError(422, "Invalid", f"JSON patch test failed at {path}")
            elif op in ("add", "replace"):
                if isinstance(parent, list):
                    if last == "-":
                        parent.append(operation.get("value"))
                    elif op == "add":
                        parent.insert(int(last), operation.get("value"))
                    else:
                        parent[int(last)] = operation.get("value")
                else:
                    if op == "replace" and last not in parent:
                        raise ApiError(422, "Invalid", f"JSON patch replace of a missing path {path}")
                    parent[last] = operation.get("value")
            elif op == "remove":
                del parent[int(last) if isinstance(parent, list) else last]
            else:
                raise ApiError(422, "Invalid", f"JSON patch operation {op!r} not supported")
        except (KeyError, IndexError, ValueError) as error:
            raise ApiError(422, "Invalid", f"JSON patch {op} at {path}: {error}") from error
    return document


# ---------------------------------------------------------------------------------------------
# the store


@dataclass
class HistoryEntry:
    resource_version: int
    resource: ResourceType
    type: str
    obj: JsonObject
    previous: JsonObject | None


@dataclass(eq=False)
class WatchConnection:
    resource: ResourceType
    selector: Selector
    queue: asyncio.Queue[HistoryEntry | None]
    closed: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class Faults:
    """What goes wrong, set by the test while the server runs."""

    bind_failures_left: int = 0
    bind_failure_code: int = 500
    bind_failure_ratio: float = 0.0
    # Fail a bind only after applying it, as a lost response would: the retry then sees 409.
    bind_failure_after_commit: bool = False
    bind_conflicts_left: int = 0
    delay_seconds: float = 0.0
    delay_methods: frozenset[str] = frozenset()
    missing_groups: set[str] = field(default_factory=set)
    # Before each of the next N updates (PUT) of an object, someone else writes it first.
    concurrent_writes_left: int = 0
    drop_watches_every: float = 0.0


# -- TokenReview and SubjectAccessReview -----------------------------------------------------------
# Which tokens name which users and what each may do; answered as the real API server does (201
# with the review's status filled in).

AUTHENTICATION = ("apis", "authentication.k8s.io", "v1", "tokenreviews")
AUTHORIZATION = ("apis", "authorization.k8s.io", "v1", "subjectaccessreviews")


@dataclass
class AccessReviews:
    # token -> (username, groups)
    users: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    # (username, verb, resource, namespace, name) a user may do; resource "" with a path below for URLs
    allowed: set[tuple[str, str, str, str, str]] = field(default_factory=set)
    # (username, verb, path) on non-resource URLs
    allowed_paths: set[tuple[str, str, str]] = field(default_factory=set)
    # Every review received, in order: ("TokenReview" | "SubjectAccessReview", spec)
    received: list[tuple[str, JsonObject]] = field(default_factory=list)

    def add_user(self, token: str, username: str, groups: tuple[str, ...] = ("system:authenticated",)) -> None:
        self.users[token] = (username, groups)

    def allow(self, username: str, verb: str, resource: str, namespace: str = "", name: str = "") -> None:
        self.allowed.add((username, verb, resource, namespace, name))

    def allow_path(self, username: str, verb: str, path: str) -> None:
        self.allowed_paths.add((username, verb, path))

    def handler(self, method: str, parts: list[str]) -> Callable[[JsonObject], JsonObject] | None:
        if method != "POST":
            return None
        if tuple(parts) == AUTHENTICATION:
            return self.token_review
        if tuple(parts) == AUTHORIZATION:
            return self.subject_access_review
        return None

    def token_review(self, body: JsonObject) -> JsonObject:
        spec = body.get("spec") or {}
        self.received.append(("TokenReview", spec))
        user = self.users.get(str(spec.get("token") or ""))
        status: JsonObject = (
            {"authenticated": True, "user": {"username": user[0], "groups": list(user[1]), "uid": f"uid-{user[0]}"}}
            if user is not None
            else {"authenticated": False, "error": "invalid bearer token"}
        )
        return {**body, "status": status}

    def subject_access_review(self, body: JsonObject) -> JsonObject:
        spec = body.get("spec") or {}
        self.received.append(("SubjectAccessReview", spec))
        user = str(spec.get("user") or "")
        resource = spec.get("resourceAttributes")
        path = spec.get("nonResourceAttributes")
        if isinstance(resource, dict):
            wanted = (
                user,
                str(resource.get("verb") or ""),
                str(resource.get("resource") or ""),
                str(resource.get("namespace") or ""),
                str(resource.get("name") or ""),
            )
            allowed = wanted in self.allowed
        elif isinstance(path, dict):
            allowed = (user, str(path.get("verb") or ""), str(path.get("path") or "")) in self.allowed_paths
        else:
            allowed = False
        status: JsonObject = {"allowed": allowed}
        if not allowed:
            status["reason"] = "no RBAC rule matched"
        return {**body, "status": status}


class KubeApiServer:
    """An in-memory API server on 127.0.0.1; ``async with KubeApiServer() as server: ...``."""

    def __init__(
        self,
        *,
        bookmark_interval: float = 1.0,
        max_history: int = 100_000,
        seed: int = 0,
    ) -> None:
        self.objects: dict[ResourceType, dict[tuple[str, str], JsonObject]] = {
            resource: {} for resource in RESOURCE_TYPES
        }
        self.history: list[HistoryEntry] = []
        self.resource_version = 1
        # Watches from before this version get 410 Gone.
        self.compacted_version = 0
        self.max_history = max_history
        self.bookmark_interval = bookmark_interval
        self.faults = Faults()
        self.bind_counts: Counter[tuple[str, str]] = Counter()
        self.injected_bind_failures = 0
        self.request_counts: Counter[tuple[str, str]] = Counter()
        self.watches: set[WatchConnection] = set()
        self.dropped_watches = 0
        self._random = random.Random(seed)
        # TokenReview and SubjectAccessReview answers (AccessReviews above).
        self.reviews = AccessReviews()
        self._runner: web.AppRunner | None = None
        self._dropper: asyncio.Task[None] | None = None
        self.port = 0

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server: Any = site._server
        assert server is not None and server.sockets
        self.port = server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._dropper is not None:
            self._dropper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._dropper
        self.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> KubeApiServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def kubeconfig(self) -> JsonObject:
        """A kubeconfig for this server, as a dict (write it with json.dump or yaml)."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "test", "cluster": {"server": self.url}}],
            "users": [{"name": "test", "user": {"token": "test-token"}}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
            "current-context": "test",
        }

    # -- faults ---------------------------------------------------------------------------------

    def drop_watches(self) -> int:
        """Close every open watch connection now; returns how many were dropped."""
        dropped = 0
        for watch in list(self.watches):
            if not watch.closed.is_set():
                watch.closed.set()
                watch.queue.put_nowait(None)
                dropped += 1
        self.dropped_watches += dropped
        return dropped

    def drop_watches_every(self, seconds: float) -> None:
        """Drop every watch now and then every ``seconds`` until called again with 0."""
        if self._dropper is not None:
            self._dropper.cancel()
            self._dropper = None
        self.faults.drop_watches_every = seconds
        if seconds > 0:
            self._dropper = asyncio.get_running_loop().create_task(self._drop_periodically(seconds))

    async def _drop_periodically(self, seconds: float) -> None:
        while True:
            self.drop_watches()
            await asyncio.sleep(seconds)

    def compact(self) -> None:
        """Forget all history: a watch resuming from any earlier version gets 410 Gone."""
        self.compacted_version = self.resource_version
        self.history.clear()

    def fail_binds(self, count: int = 0, *, code: int = 500, ratio: float = 0.0, after_commit: bool = False) -> None:
        """Fail the next ``count`` binds, and then a ``ratio`` of all binds, with ``code``."""
        self.faults.bind_failures_left = count
        self.faults.bind_failure_code = code
        self.faults.bind_failure_ratio = ratio
        self.faults.bind_failure_after_commit = after_commit

    def conflict_binds(self, count: int) -> None:
        """Answer the next ``count`` binds with 409 Conflict (another scheduler won)."""
        self.faults.bind_conflicts_left = count

    def write_concurrently(self, count: int) -> None:
        """The next `count` PUTs each find the object changed by another writer since it was read
        (a real version bump, so a resourceVersion precondition fails with 409)."""
        self.faults.concurrent_writes_left = count

    def slow_down(self, seconds: float, methods: Iterable[str] = ()) -> None:
        """Delay every response (or those of the given HTTP methods) by ``seconds``."""
        self.faults.delay_seconds = seconds
        self.faults.delay_methods = frozenset(m.upper() for m in methods)

    def uninstall_group(self, group: str) -> None:
        """Every path of the API group answers 404, as when its CRD is not installed."""
        self.faults.missing_groups.add(group)

    def install_group(self, group: str) -> None:
        self.faults.missing_groups.discard(group)

    # -- direct access for tests ----------------------------------------------------------------

    def resource_for(self, api_version: str, kind: str) -> ResourceType:
        for resource in RESOURCE_TYPES:
            if resource.group_version == api_version and resource.kind == kind:
                return resource
        raise KeyError(f"no resource for {api_version} {kind}")

    def add(self, obj: Mapping[str, Any]) -> JsonObject:
        """Create an object as a client would (fills uid, resourceVersion, timestamps)."""
        resource = self.resource_for(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        namespace = obj.get("metadata", {}).get("namespace", "default") if resource.namespaced else ""
        return copy.deepcopy(self._create(resource, namespace, copy.deepcopy(dict(obj))))

    def get(self, api_version: str, kind: str, name: str, namespace: str = "") -> JsonObject | None:
        resource = self.resource_for(api_version, kind)
        found = self.objects[resource].get((namespace if resource.namespaced else "", name))
        return copy.deepcopy(found) if found is not None else None

    def list(self, api_version: str, kind: str) -> list[JsonObject]:
        resource = self.resource_for(api_version, kind)
        return [copy.deepcopy(obj) for obj in self.objects[resource].values()]

    def replace(self, obj: Mapping[str, Any]) -> JsonObject:
        """Overwrite an existing object regardless of its resourceVersion (as an admin would)."""
        resource = self.resource_for(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        metadata = obj.get("metadata", {})
        key = (metadata.get("namespace", "default") if resource.namespaced else "", metadata["name"])
        body = copy.deepcopy(dict(obj))
        body["metadata"].pop("resourceVersion", None)
        return copy.deepcopy(self._update(resource, key, body, subresource=None))

    def delete(self, api_version: str, kind: str, name: str, namespace: str = "") -> None:
        resource = self.resource_for(api_version, kind)
        self._delete(resource, (namespace if resource.namespaced else "", name))

    # -- store operations -----------------------------------------------------------------------

    def _next_version(self) -> int:
        self.resource_version += 1
        return self.resource_version

    def _record(self, resource: ResourceType, type_: str, obj: JsonObject, previous: JsonObject | None) -> None:
        entry = HistoryEntry(self.resource_version, resource, type_, copy.deepcopy(obj), previous)
        self.history.append(entry)
        if len(self.history) > self.max_history:
            dropped = self.history[: len(self.history) - self.max_history]
            del self.history[: len(dropped)]
            self.compacted_version = dropped[-1].resource_version
        for watch in self.watches:
            if watch.resource == resource and not watch.closed.is_set():
                watch.queue.put_nowait(entry)

    def _create(self, resource: ResourceType, namespace: str, body: JsonObject) -> JsonObject:
        metadata = body.setdefault("metadata", {})
        if not isinstance(metadata, dict):
            raise ApiError(400, "BadRequest", "metadata must be an object")
        name = metadata.get("name")
        if not name and metadata.get("generateName"):
            name = f"{metadata['generateName']}{uuid.uuid4().hex[:5]}"
            metadata["name"] = name
        if not name:
            raise ApiError(422, "Invalid", f"{resource.kind}: metadata.name: Required value")
        key = (namespace if resource.namespaced else "", str(name))
        if key in self.objects[resource]:
            raise ApiError(409, "AlreadyExists", f'{resource.plural} "{name}" already exists')
        if resource.namespaced:
            metadata["namespace"] = namespace
        else:
            metadata.pop("namespace", None)
        metadata["uid"] = metadata.get("uid") or str(uuid.uuid4())
        metadata["creationTimestamp"] = metadata.get("creationTimestamp") or time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime()
        )
        metadata["resourceVersion"] = str(self._next_version())
        body["apiVersion"] = resource.group_version
        body["kind"] = resource.kind
        self.objects[resource][key] = body
        self._record(resource, "ADDED", body, None)
        return body

    def _update(
        self, resource: ResourceType, key: tuple[str, str], body: JsonObject, subresource: str | None
    ) -> JsonObject:
        current = self.objects[resource].get(key)
        if current is None:
            raise ApiError(404, "NotFound", f'{resource.plural} "{key[1]}" not found')
        metadata = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        wanted_version = metadata.get("resourceVersion") if metadata else None
        if wanted_version and wanted_version != current["metadata"]["resourceVersion"]:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {resource.plural} "{key[1]}": the object has been '
                "modified; please apply your changes to the latest version and try again",
            )
        if subresource == "status":
            updated = copy.deepcopy(current)
            updated["status"] = copy.deepcopy(body.get("status", {}))
        else:
            updated = copy.deepcopy(body)
            if "status" in resource.subresources and "status" in current:
                # The main resource ignores status changes when a status subresource exists.
                updated["status"] = copy.deepcopy(current["status"])
            kept = current["metadata"]
            updated_metadata = updated.setdefault("metadata", {})
            for fixed in ("name", "namespace", "uid", "creationTimestamp"):
                if fixed in kept:
                    updated_metadata[fixed] = kept[fixed]
        return self._commit(resource, key, updated, current)

    def _commit(
        self, resource: ResourceType, key: tuple[str, str], updated: JsonObject, current: JsonObject
    ) -> JsonObject:
        updated["apiVersion"] = resource.group_version
        updated["kind"] = resource.kind
        updated["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        if updated == current:
            # A no-op write keeps the version and tells no watcher, as the API server does.
            return current
        updated["metadata"]["resourceVersion"] = str(self._next_version())
        self.objects[resource][key] = updated
        self._record(resource, "MODIFIED", updated, current)
        return updated

    def _delete(self, resource: ResourceType, key: tuple[str, str]) -> JsonObject:
        current = self.objects[resource].pop(key, None)
        if current is None:
            raise ApiError(404, "NotFound", f'{resource.plural} "{key[1]}" not found')
        deleted = copy.deepcopy(current)
        deleted["metadata"]["resourceVersion"] = str(self._next_version())
        self._record(resource, "DELETED", deleted, current)
        return deleted

    def _bind(self, namespace: str, name: str, binding: JsonObject) -> JsonObject:
        pods = next(r for r in RESOURCE_TYPES if r.kind == "Pod")
        pod = self.objects[pods].get((namespace, name))
        if pod is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found')
        target = binding.get("target") or {}
        node_name = target.get("name") if isinstance(target, dict) else None
        if not node_name:
            raise ApiError(422, "Invalid", "Binding: target.name: Required value")
        faults = self.faults
        if faults.bind_conflicts_left > 0:
            faults.bind_conflicts_left -= 1
            raise ApiError(409, "Conflict", f"Operation cannot be fulfilled on pods/binding {name!r}: injected")
        failing = faults.bind_failures_left > 0 or (
            faults.bind_failure_ratio > 0 and self._random.random() < faults.bind_failure_ratio
        )
        if failing and faults.bind_failures_left > 0:
            faults.bind_failures_left -= 1
        if failing:
            self.injected_bind_failures += 1
        if failing and not faults.bind_failure_after_commit:
            raise ApiError(faults.bind_failure_code, "InternalError", f"injected bind failure for {name}")
        if pod.get("spec", {}).get("nodeName"):
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is already assigned '
                f"to node {pod['spec']['nodeName']!r}",
            )
        updated = copy.deepcopy(pod)
        updated.setdefault("spec", {})["nodeName"] = node_name
        annotations = (binding.get("metadata") or {}).get("annotations") or {}
        if annotations:
            updated["metadata"].setdefault("annotations", {}).update(annotations)
        conditions = [
            c for c in updated.setdefault("status", {}).get("conditions", []) if c.get("type") != "PodScheduled"
        ]
        conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()})
        updated["status"]["conditions"] = conditions
        self._commit(pods, (namespace, name), updated, pod)
        self.bind_counts[(namespace, name)] += 1
        if failing:
            raise ApiError(faults.bind_failure_code, "InternalError", f"injected failure after binding {name}")
        return status_body(201, "", "")

    # -- HTTP -----------------------------------------------------------------------------------

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self.request_counts[(request.method, request.path)] += 1
        faults = self.faults
        if faults.delay_seconds > 0 and (not faults.delay_methods or request.method in faults.delay_methods):
            await asyncio.sleep(faults.delay_seconds)
        try:
            return await self._route(request)
        except ApiError as error:
            return web.json_response(status_body(error.code, error.reason, error.message), status=error.code)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if parts == ["version"]:
            return web.json_response({"major": "1", "minor": "31", "gitVersion": "v1.31.0-numasched-test"})
        if parts == ["api"]:
            return web.json_response({"kind": "APIVersions", "versions": ["v1"]})
        if parts == ["apis"]:
            return web.json_response(self._group_list())
        review = self.reviews.handler(request.method, parts)
        if review is not None:
            return web.json_response(review(await _json_body(request)), status=201)
        if parts and parts[0] == "api":
            group, rest = "", parts[1:]
        elif parts and parts[0] == "apis" and len(parts) >= 2:
            group, rest = parts[1], parts[2:]
        else:
            raise ApiError(404, "NotFound", f"the server could not find the requested resource {request.path}")
        if group in self.faults.missing_groups:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if not rest:
            raise ApiError(404, "NotFound", f"no discovery for group {group!r}")
        version, rest = rest[0], rest[1:]
        if not rest:
            return web.json_response(self._resource_list(group, version))
        namespace: str | None = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        plural, name, subresource = rest[0], (rest[1] if len(rest) > 1 else None), (rest[2] if len(rest) > 2 else None)
        resource = next((r for r in RESOURCE_TYPES if (r.group, r.version, r.plural) == (group, version, plural)), None)
        if resource is None or len(rest) > 3 or (subresource and subresource not in resource.subresources):
            raise ApiError(404, "NotFound", f"the server could not find the requested resource {request.path}")
        if resource.namespaced and name is not None and namespace is None:
            raise ApiError(404, "NotFound", f"{resource.plural} is namespaced; the path needs a namespace")
        if not resource.namespaced and namespace is not None:
            raise ApiError(404, "NotFound", f"{resource.plural} is cluster scoped")
        return await self._serve(request, resource, namespace, name, subresource)

    async def _serve(
        self,
        request: web.Request,
        resource: ResourceType,
        namespace: str | None,
        name: str | None,
        subresource: str | None,
    ) -> web.StreamResponse:
        method = request.method
        scope_namespace = namespace or ""
        if name is None:
            if method == "GET":
                if query_bool(request.query.get("watch")):
                    return await self._watch(request, resource, namespace)
                return web.json_response(self._list(request, resource, namespace))
            if method == "POST":
                if resource.namespaced and namespace is None:
                    raise ApiError(405, "MethodNotAllowed", "create needs a namespace")
                created = self._create(resource, scope_namespace, await _json_body(request))
                return web.json_response(created, status=201)
            raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on a collection")
        key = (scope_namespace, name)
        if subresource == "binding":
            if method != "POST":
                raise ApiError(405, "MethodNotAllowed", "binding accepts POST only")
            return web.json_response(self._bind(scope_namespace, name, await _json_body(request)), status=201)
        if method == "GET":
            found = self.objects[resource].get(key)
            if found is None:
                raise ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')
            return web.json_response(found)
        if method == "PUT":
            body = await _json_body(request)
            current = self.objects[resource].get(key)
            if self.faults.concurrent_writes_left > 0 and current is not None:
                self.faults.concurrent_writes_left -= 1
                other = copy.deepcopy(current)
                annotations = other["metadata"].setdefault("annotations", {})
                annotations["test/concurrent-writes"] = str(int(annotations.get("test/concurrent-writes", "0")) + 1)
                other["metadata"].pop("resourceVersion", None)
                self._update(resource, key, other, subresource=None)
            return web.json_response(self._update(resource, key, body, subresource))
        if method == "PATCH":
            current = self.objects[resource].get(key)
            if current is None:
                raise ApiError(404, "NotFound", f'{resource.plural} "{name}" not found')
            patch = json.loads(await request.text() or "null")
            content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
            if content_type == "application/merge-patch+json":
                patched = merge_patch(current, patch)
            elif content_type == "application/strategic-merge-patch+json":
                if resource.group and resource.kind not in ("Lease",):
                    raise ApiError(415, "UnsupportedMediaType", "strategic merge patch is not supported for CRDs")
                patched = strategic_merge_patch(current, patch)
            elif content_type == "application/json-patch+json":
                patched = json_patch(current, patch)
            else:
                raise ApiError(
                    415, "UnsupportedMediaType", f"the body of the request was in an unknown format {content_type!r}"
                )
            return web.json_response(self._update(resource, key, patched, subresource))
        if method == "DELETE":
            return web.json_response(self._delete(resource, key))
        raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed")

    def _selector(self, request: web.Request, namespace: str | None) -> Selector:
        return Selector(
            namespace,
            parse_label_selector(request.query.get("labelSelector", "")),
            parse_field_selector(request.query.get("fieldSelector", "")),
        )

    def _list(self, request: web.Request, resource: ResourceType, namespace: str | None) -> JsonObject:
        selector = self._selector(request, namespace)
        wanted = request.query.get("resourceVersion", "")
        if request.query.get("resourceVersionMatch") == "Exact" and wanted and int(wanted) < self.compacted_version:
            raise ApiError(410, "Expired", f"too old resource version: {wanted} ({self.compacted_version})")
        items = [copy.deepcopy(obj) for obj in self.objects[resource].values() if selector.matches(obj)]
        return {
            "apiVersion": resource.group_version,
            "kind": f"{resource.kind}List",
            "metadata": {"resourceVersion": str(self.resource_version)},
            "items": items,
        }

    async def _watch(self, request: web.Request, resource: ResourceType, namespace: str | None) -> web.StreamResponse:
        selector = self._selector(request, namespace)
        bookmarks = query_bool(request.query.get("allowWatchBookmarks"))
        timeout = float(request.query.get("timeoutSeconds", "0") or 0)
        since_text = request.query.get("resourceVersion", "")
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        watch = WatchConnection(resource, selector, asyncio.Queue())
        self.watches.add(watch)
        try:
            if since_text in ("", "0"):
                # No version: the current state as synthetic ADDED events, then changes.
                for obj in list(self.objects[resource].values()):
                    if selector.matches(obj):
                        await _send(response, "ADDED", obj)
            else:
                since = int(since_text)
                if since < self.compacted_version:
                    gone = status_body(410, "Expired", f"too old resource version: {since} ({self.compacted_version})")
                    await _send(response, "ERROR", gone)
                    return response
                for past in list(self.history):
                    if past.resource_version > since and past.resource == resource:
                        await self._send_entry(response, watch, past)
            deadline = asyncio.get_running_loop().time() + timeout if timeout > 0 else None
            while not watch.closed.is_set():
                wait = self.bookmark_interval if bookmarks else 3600.0
                if deadline is not None:
                    wait = min(wait, deadline - asyncio.get_running_loop().time())
                    if wait <= 0:
                        break
                try:
                    entry = await asyncio.wait_for(watch.queue.get(), timeout=wait)
                except TimeoutError:
                    if bookmarks and not watch.closed.is_set():
                        marker = {
                            "apiVersion": resource.group_version,
                            "kind": resource.kind,
                            "metadata": {"resourceVersion": str(self.resource_version)},
                        }
                        await _send(response, "BOOKMARK", marker)
                    continue
                if entry is None:
                    break
                await self._send_entry(response, watch, entry)
        except (ConnectionResetError, asyncio.CancelledError):
            # The client went away; nothing to tell it.
            pass
        finally:
            watch.closed.set()
            self.watches.discard(watch)
        return response

    async def _send_entry(self, response: web.StreamResponse, watch: WatchConnection, entry: HistoryEntry) -> None:
        now_matches = watch.selector.matches(entry.obj)
        before_matches = entry.previous is not None and watch.selector.matches(entry.previous)
        if entry.type == "ADDED" and now_matches:
            await _send(response, "ADDED", entry.obj)
        elif entry.type == "DELETED" and before_matches:
            await _send(response, "DELETED", entry.obj)
        elif entry.type == "MODIFIED":
            # As the API server's watch cache does: leaving the selector reads as a deletion.
            if now_matches and before_matches:
                await _send(response, "MODIFIED", entry.obj)
            elif now_matches:
                await _send(response, "ADDED", entry.obj)
            elif before_matches:
                await _send(response, "DELETED", entry.obj)

    def _group_list(self) -> JsonObject:
        groups: dict[str, set[str]] = {}
        for resource in RESOURCE_TYPES:
            if resource.group and resource.group not in self.faults.missing_groups:
                groups.setdefault(resource.group, set()).add(resource.version)
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [
                {
                    "name": group,
                    "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in sorted(versions)],
                    "preferredVersion": {
                        "groupVersion": f"{group}/{sorted(versions)[0]}",
                        "version": sorted(versions)[0],
                    },
                }
                for group, versions in sorted(groups.items())
            ],
        }

    def _resource_list(self, group: str, version: str) -> JsonObject:
        resources = [r for r in RESOURCE_TYPES if (r.group, r.version) == (group, version)]
        if not resources:
            raise ApiError(404, "NotFound", f"no group version {group}/{version}")
        entries: list[JsonObject] = []
        for resource in resources:
            entries.append(
                {
                    "name": resource.plural,
                    "singularName": resource.kind.lower(),
                    "namespaced": resource.namespaced,
                    "kind": resource.kind,
                    "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
                }
            )
            for sub in resource.subresources:
                entries.append(
                    {
                        "name": f"{resource.plural}/{sub}",
                        "singularName": "",
                        "namespaced": resource.namespaced,
                        "kind": "Binding" if sub == "binding" else resource.kind,
                        "verbs": ["create"] if sub == "binding" else ["get", "patch", "update"],
                    }
                )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": resources[0].group_version,
            "resources": entries,
        }


def query_bool(value: str | None) -> bool:
    """Go's strconv.ParseBool, which the API server uses for query flags."""
    return value in ("1", "t", "T", "true", "TRUE", "True")


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


async def _json_body(request: web.Request) -> JsonObject:
    try:
        body = json.loads(await request.text())
    except json.JSONDecodeError as error:
        raise ApiError(400, "BadRequest", f"the request body is not JSON: {error}") from error
    if not isinstance(body, dict):
        raise ApiError(400, "BadRequest", "the request body must be a JSON object")
    return body


async def _send(response: web.StreamResponse, type_: str, obj: Mapping[str, Any]) -> None:
    await response.write(json.dumps({"type": type_, "object": obj}).encode() + b"\n")
