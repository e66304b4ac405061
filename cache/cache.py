"""The scheduler's view of the cluster, fed by watch events and read through snapshots.

Objects arrive as JSON (from the informers or the simulator) and are converted once, on arrival.
A bad object is reported through `on_problem` and skipped; it never stops the others. Pods the
scheduler has placed but the API server has not yet confirmed are kept as assumptions, so the next
cycle sees their CPUs and devices as taken.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import attrs
import structlog

from numasched.api.allocation import PodAllocation
from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.snapshot import ClusterSnapshot, QueueInfo
from numasched.api.task import TaskInfo, TaskStatus
from numasched.api.topology import NumaTopology
from numasched.cache.convert_pod import (
    ConversionError,
    bound_pod_allocation,
    node_to_node_info,
    pod_job_id,
    pod_to_task,
    podgroup_to_job,
    priority_class_value,
    queue_to_queue_info,
)
from numasched.cache.convert_topology import nrt_to_topology, numatopology_to_topology, reported_pod_allocations
from numasched.cache.events import EventType, ObjectEvent, object_name

log = structlog.get_logger("numasched.cache")

ProblemHandler = Callable[[str, str, str], None]
KINDS = ("Pod", "Node", "PodGroup", "Queue", "PriorityClass", "Numatopology", "NodeResourceTopology")
_FINISHED = frozenset({TaskStatus.SUCCEEDED, TaskStatus.FAILED})
# Every TaskInfo field, in the order its __init__ takes them (all are init, none keyword-only).
_task_fields = operator.attrgetter(*(field.name for field in attrs.fields(TaskInfo)))


def _session_copy(task: TaskInfo) -> TaskInfo:
    """A copy of the task the session may change (status, node, allocation, fit error) without the
    change reaching the cache. Shallow, as TaskInfo.clone, but it shares the request Resources:
    nothing in a session changes a task's requests, and attrs.evolve plus two Resource copies per
    task per cycle was most of the snapshot's cost (10,000 pods: 0.26 s of 0.5 s)."""
    return TaskInfo(*_task_fields(task))


@attrs.frozen(slots=True)
class _Assumption:
    node_name: str
    allocation: PodAllocation | None


@attrs.frozen(slots=True)
class _TopologyRecord:
    topology: NumaTopology | None
    error: str
    reported: dict[str, PodAllocation]


class Cache:
    def __init__(
        self, scheduler_names: Collection[str] = ("numasched",), *, on_problem: ProblemHandler | None = None
    ) -> None:
        self.scheduler_names = frozenset(scheduler_names)
        self._on_problem = on_problem
        self._raw: dict[str, dict[str, Mapping[str, Any]]] = {kind: {} for kind in KINDS}
        self._tasks: dict[str, TaskInfo] = {}
        self._task_uid_by_key: dict[str, str] = {}
        self._nodes: dict[str, NodeInfo] = {}
        self._pod_groups: dict[str, JobInfo] = {}
        self._queues: dict[str, QueueInfo] = {}
        self._priority_classes: dict[str, int] = {}
        self._numatopologies: dict[str, _TopologyRecord] = {}
        self._nrts: dict[str, _TopologyRecord] = {}
        self._assumed: dict[str, _Assumption] = {}
        # Problems currently standing, by (kind, name): shown by simulate and cleared on a fix.
        self.problems: dict[tuple[str, str], str] = {}
        self._handlers = self._handler_table()

    # ---- events -------------------------------------------------------------------------------

    def apply(self, event: ObjectEvent) -> None:
        handler = self._handlers.get(event.kind)
        if handler is None:
            self._problem(event.kind, object_name(event.obj), f"unknown kind {event.kind!r}; skipped")
            return
        name = object_name(event.obj)
        key = self._key(event.kind, event.obj)
        if event.type is EventType.DELETED:
            self._raw[event.kind].pop(key, None)
            self.problems.pop((event.kind, name), None)
            handler(key, None)
            return
        self.problems.pop((event.kind, name), None)
        try:
            handler(key, event.obj)
        except ConversionError as error:
            self._problem(error.kind, error.name, error.message)
            # A broken update must not leave the previous good version behind as if current.
            self._raw[event.kind].pop(key, None)
            handler(key, None)
            return
        self._raw[event.kind][key] = event.obj

    def replace(self, kind: str, objects: Iterable[Mapping[str, Any]]) -> None:
        """A full re-list: objects not in `objects` are gone."""
        fresh = list(objects)
        keep = {self._key(kind, obj) for obj in fresh}
        for key, obj in list(self._raw.get(kind, {}).items()):
            if key not in keep:
                self.apply(ObjectEvent(kind, EventType.DELETED, obj))
        for obj in fresh:
            self.apply(ObjectEvent(kind, EventType.MODIFIED, obj))

    def _handler_table(self) -> dict[str, Callable[[str, Mapping[str, Any] | None], None]]:
        return {
            "Pod": self._on_pod,
            "Node": self._on_node,
            "PodGroup": self._on_pod_group,
            "Queue": self._on_queue,
            "PriorityClass": self._on_priority_class,
            "Numatopology": self._on_numatopology,
            "NodeResourceTopology": self._on_nrt,
        }

    @staticmethod
    def _key(kind: str, obj: Mapping[str, Any]) -> str:
        if kind == "Pod":
            metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
            if isinstance(metadata, Mapping) and metadata.get("uid"):
                return str(metadata["uid"])
        return object_name(obj)

    def _problem(self, kind: str, name: str, message: str) -> None:
        self.problems[(kind, name)] = message
        log.warning("object skipped", kind=kind, object=name, problem=message)
        if self._on_problem is not None:
            self._on_problem(kind, name, message)

    def _on_pod(self, key: str, obj: Mapping[str, Any] | None) -> None:
        old = self._tasks.pop(key, None)
        if old is not None:
            self._task_uid_by_key.pop(old.key, None)
        if obj is None:
            self._assumed.pop(key, None)
            return
        task = pod_to_task(obj)
        try:
            task.allocation = bound_pod_allocation(task)
        except ConversionError as error:
            self._problem(error.kind, error.name, f"{error.message}; its CPUs and devices are not tracked")
        self._tasks[key] = task
        self._task_uid_by_key[task.key] = key
        if task.node_name:
            # The API server confirmed the binding (or someone else placed it): no longer assumed.
            self._assumed.pop(key, None)

    def _on_node(self, key: str, obj: Mapping[str, Any] | None) -> None:
        if obj is None:
            self._nodes.pop(key, None)
            return
        self._nodes[key] = node_to_node_info(obj)

    def _on_pod_group(self, key: str, obj: Mapping[str, Any] | None) -> None:
        if obj is None:
            self._pod_groups.pop(key, None)
            return
        self._pod_groups[key] = podgroup_to_job(obj)

    def _on_queue(self, key: str, obj: Mapping[str, Any] | None) -> None:
        if obj is None:
            self._queues.pop(key, None)
            return
        self._queues[key] = queue_to_queue_info(obj)

    def _on_priority_class(self, key: str, obj: Mapping[str, Any] | None) -> None:
        if obj is None:
            self._priority_classes.pop(key, None)
            return
        name, value = priority_class_value(obj)
        self._priority_classes[name] = value

    def _on_numatopology(self, key: str, obj: Mapping[str, Any] | None) -> None:
        if obj is None:
            self._numatopologies.pop(key, None)
        else:
            self._numatopologies[key] = self._topology_record("Numatopology", key, obj)

    def _on_nrt(self, key: str, obj: Mapping[str, Any] | None) -> None:
        if obj is None:
            self._nrts.pop(key, None)
        else:
            self._nrts[key] = self._topology_record("NodeResourceTopology", key, obj)

    def _topology_record(self, kind: str, key: str, obj: Mapping[str, Any]) -> _TopologyRecord:
        """A topology that does not convert leaves its node schedulable without NUMA awareness."""
        try:
            if kind == "Numatopology":
                topology = numatopology_to_topology(obj, lambda message: self._problem(kind, key, message))
                return _TopologyRecord(topology, "", reported_pod_allocations(obj))
            return _TopologyRecord(nrt_to_topology(obj), "", {})
        except ConversionError as error:
            self._problem(kind, key, error.message)
            return _TopologyRecord(None, f"{kind} {key}: {error.message}", {})

    # ---- assumptions --------------------------------------------------------------------------

    def assume(self, task_uid: str, node_name: str, allocation: PodAllocation | None) -> None:
        self._assumed[task_uid] = _Assumption(node_name, allocation)

    def forget(self, task_uid: str) -> None:
        self._assumed.pop(task_uid, None)

    def pod_object(self, task_uid: str) -> Mapping[str, Any] | None:
        return self._raw["Pod"].get(task_uid)

    def task_uid(self, namespace: str, name: str) -> str | None:
        return self._task_uid_by_key.get(f"{namespace}/{name}")

    # ---- snapshot -----------------------------------------------------------------------------

    def _is_ours(self, task: TaskInfo) -> bool:
        return task.scheduler_name in self.scheduler_names

    def _topology_for(self, node_name: str) -> _TopologyRecord | None:
        return self._numatopologies.get(node_name) or self._nrts.get(node_name)

    def snapshot(self) -> ClusterSnapshot:
        """A copy the session may change freely: nodes with their tasks accounted, jobs, queues."""
        snapshot = ClusterSnapshot(
            queues={name: attrs.evolve(queue) for name, queue in self._queues.items()},
            priority_classes=dict(self._priority_classes),
        )
        if "default" not in snapshot.queues:
            snapshot.queues["default"] = QueueInfo("default")
        for name, base in self._nodes.items():
            node = base.clone()
            record = self._topology_for(name)
            if record is not None:
                node.topology = record.topology
                node.topology_error = record.error
            snapshot.nodes[name] = node
        for group_key, group in self._pod_groups.items():
            snapshot.jobs[group_key] = attrs.evolve(group, tasks={})
        for uid, stored in self._tasks.items():
            if stored.status in _FINISHED and not self._is_ours(stored):
                continue
            task = _session_copy(stored)
            assumption = self._assumed.get(uid)
            if assumption is not None and not task.node_name:
                task.node_name = assumption.node_name
                task.status = TaskStatus.BINDING
                task.allocation = assumption.allocation
            if task.node_name:
                record = self._topology_for(task.node_name)
                if record is not None:
                    # What the node reports it actually assigned wins over our annotation.
                    reported = record.reported.get(uid) or record.reported.get(task.key)
                    if reported is not None:
                        task.allocation = reported
                host = snapshot.nodes.get(task.node_name)
                if host is not None and task.status not in _FINISHED:
                    host.add_task(task)
            if self._is_ours(task):
                self._add_to_job(snapshot, task)
        return snapshot

    def _add_to_job(self, snapshot: ClusterSnapshot, task: TaskInfo) -> None:
        job_id, has_group = pod_job_id(task.namespace, task.name, task.annotations)
        job = snapshot.jobs.get(job_id)
        if job is None:
            if has_group:
                # Gang members wait for their PodGroup rather than being placed one by one.
                task.fit_error = f"waiting for PodGroup {job_id}"
                return
            job = JobInfo(
                uid=job_id,
                namespace=task.namespace,
                name=task.name,
                priority=task.priority,
                priority_class_name=task.priority_class_name,
                creation_timestamp=task.creation_timestamp,
            )
            snapshot.jobs[job_id] = job
        job.add_task(task)

    def tasks_waiting_for_group(self) -> list[TaskInfo]:
        """Our pending pods whose PodGroup does not exist (yet)."""
        waiting = []
        for task in self._tasks.values():
            job_id, has_group = pod_job_id(task.namespace, task.name, task.annotations)
            if self._is_ours(task) and has_group and job_id not in self._pod_groups and not task.node_name:
                waiting.append(task)
        return waiting
