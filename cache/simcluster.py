"""An in-memory cluster that behaves like the API server for the scheduler: it loads objects from
YAML as `kubectl get -o yaml` prints them, feeds them to the Cache as watch events, applies
bindings the way the API server does (spec.nodeName and the Binding's annotations copied onto the
pod), and keeps the events and conditions a real cluster would show."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import attrs
import yaml

from numasched.api.job import JobInfo
from numasched.api.task import TaskInfo
from numasched.cache.binder import Binder, BindOutcome, BindRequest, BindStatus, StatusReporter
from numasched.cache.cache import KINDS, Cache
from numasched.cache.events import EventType, ObjectEvent, object_key, object_name

# Kinds the simulator understands beyond those the cache converts (PodDisruptionBudgets are kept
# for `numasched defrag`, which reads them from the dump).
_CONFIG_KINDS = frozenset({"ConfigMap", "PodDisruptionBudget"})


@attrs.frozen(slots=True)
class ClusterEvent:
    """A Kubernetes Event as the scheduler would have posted it."""

    kind: str
    name: str
    type: str
    reason: str
    message: str


@attrs.frozen(slots=True)
class LoadProblem:
    source: str
    message: str


def _documents(text: str, source: str, problems: list[LoadProblem]) -> list[Mapping[str, Any]]:
    """Every object in a YAML stream, with List kinds flattened; YAML errors reported by line."""
    found: list[Mapping[str, Any]] = []
    try:
        for index, document in enumerate(yaml.safe_load_all(text)):
            if document is None:
                continue
            if not isinstance(document, Mapping):
                problems.append(LoadProblem(source, f"document {index + 1}: not an object; skipped"))
                continue
            if str(document.get("kind", "")).endswith("List") and isinstance(document.get("items"), list):
                for item in document["items"]:
                    if isinstance(item, Mapping):
                        found.append(item)
                    else:
                        problems.append(LoadProblem(source, f"document {index + 1}: a List item is not an object"))
            else:
                found.append(document)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problems.append(LoadProblem(source, f"YAML error{where}: {getattr(error, 'problem', error)}; rest skipped"))
    return found


class SimCluster(Binder, StatusReporter):
    """Objects by kind and name, a Cache kept in step, and an API-server-like binder and status
    reporter (the same protocols the Kubernetes ones implement)."""

    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.objects: dict[str, dict[str, dict[str, Any]]] = {kind: {} for kind in (*KINDS, *_CONFIG_KINDS)}
        self.events: list[ClusterEvent] = []
        self.load_problems: list[LoadProblem] = []
        self.bind_count: dict[str, int] = {}

    def load_text(self, text: str, source: str) -> None:
        for obj in _documents(text, source, self.load_problems):
            self.add(obj, source)

    def load_files(self, paths: Iterable[Path]) -> None:
        for path in paths:
            try:
                text = path.read_text()
            except OSError as error:
                self.load_problems.append(LoadProblem(str(path), f"cannot read: {error.strerror or error}"))
                continue
            self.load_text(text, str(path))

    def add(self, obj: Mapping[str, Any], source: str = "") -> None:
        kind = str(obj.get("kind") or "")
        if kind not in self.objects:
            known = ", ".join(sorted(self.objects))
            self.load_problems.append(
                LoadProblem(source, f"{kind or '<no kind>'} {object_name(obj)}: unknown kind (known: {known}); skipped")
            )
            return
        stored = copy.deepcopy(dict(obj))
        metadata = stored.get("metadata")
        if not isinstance(metadata, dict) or not metadata.get("name"):
            # The API server refuses an object without a name; so do we.
            self.load_problems.append(LoadProblem(source, f"{kind} <unknown>: metadata.name is missing; skipped"))
            return
        if kind == "Pod":
            metadata.setdefault("namespace", "default")
            # The API server gives every pod a uid; simulated ones get a stable one.
            metadata.setdefault("uid", f"sim-{metadata['namespace']}-{metadata['name']}")
        # Cluster-scoped kinds by name alone, as the cache keys them (a stray namespace ignored).
        self.objects[kind][object_key(kind, stored)] = stored
        if kind in KINDS:
            self.cache.apply(ObjectEvent(kind, EventType.ADDED, stored))

    def config_maps(self) -> list[Mapping[str, Any]]:
        return list(self.objects["ConfigMap"].values())

    def pods(self) -> list[dict[str, Any]]:
        return list(self.objects["Pod"].values())

    # ---- Binder -------------------------------------------------------------------------------

    async def bind(self, request: BindRequest) -> BindOutcome:
        task = request.task
        pod = self.objects["Pod"].get(task.key)
        if pod is None:
            return BindOutcome(BindStatus.GONE, f"pod {task.key} not found")
        spec = pod.setdefault("spec", {})
        if spec.get("nodeName"):
            return BindOutcome(BindStatus.CONFLICT, f"pod {task.key} is already assigned to node {spec['nodeName']}")
        if request.node_name not in self.objects["Node"]:
            return BindOutcome(BindStatus.FAILED, f"node {request.node_name} not found")
        spec["nodeName"] = request.node_name
        pod.setdefault("metadata", {}).setdefault("annotations", {}).update(request.annotations)
        status = pod.setdefault("status", {})
        status["phase"] = "Running"
        conditions = [c for c in status.get("conditions", []) if c.get("type") != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "True"})
        status["conditions"] = conditions
        self.bind_count[task.key] = self.bind_count.get(task.key, 0) + 1
        self.cache.apply(ObjectEvent("Pod", EventType.MODIFIED, pod))
        return BindOutcome(BindStatus.BOUND)

    # ---- StatusReporter -----------------------------------------------------------------------

    async def scheduled(self, task: TaskInfo, node_name: str) -> None:
        self.events.append(
            ClusterEvent("Pod", task.key, "Normal", "Scheduled", f"Successfully assigned {task.key} to {node_name}")
        )

    async def unschedulable(self, task: TaskInfo, message: str) -> None:
        pod = self.objects["Pod"].get(task.key)
        if pod is not None:
            status = pod.setdefault("status", {})
            conditions = [c for c in status.get("conditions", []) if c.get("type") != "PodScheduled"]
            conditions.append(
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
            )
            status["conditions"] = conditions
        self.events.append(ClusterEvent("Pod", task.key, "Warning", "FailedScheduling", message))

    async def job_status(self, job: JobInfo, phase: str, message: str) -> None:
        group = self.objects["PodGroup"].get(job.key)
        if group is not None:
            group.setdefault("status", {})["phase"] = phase
        reason = "Scheduled" if phase in ("Running", "Inqueue") else "Unschedulable"
        self.events.append(
            ClusterEvent("PodGroup", job.key, "Normal" if reason == "Scheduled" else "Warning", reason, message)
        )
