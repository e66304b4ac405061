"""The scheduler's view of the cluster, fed by watch events and read through snapshots.

Objects arrive as JSON (from the informers or the simulator) and are converted once, on arrival.
A bad object is reported through `on_problem` and skipped; it never stops the others. Pods the
scheduler has placed but the API server has not yet confirmed are kept as assumptions, so the next
cycle sees their CPUs and devices as taken.

The cache keeps every node accounted (its tasks added, topology set, unknown holders marked) and
brings a node up to date only when something it depends on changed: a pod on it (before or after
the change), the Node, its Numatopology or NodeResourceTopology, an assumption. Such nodes are
marked dirty on the event and rebuilt from their own tasks at the next snapshot, so a snapshot
costs copies, not accounting, and a node nothing touched keeps its `generation` from one snapshot
to the next (kube-scheduler's UpdateSnapshot).
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import attrs
import structlog

from numasched.api.allocation import ALLOCATION_ANNOTATION, PodAllocation, ReportedAllocations
from numasched.api.disruption_budget import DisruptionBudget
from numasched.api.dra_claims import claim_allocations
from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo, UnknownHolder, pinned_holdings, unknown_part
from numasched.api.pod_fingerprint import pods_fingerprint
from numasched.api.queue_hierarchy import resolve_parents
from numasched.api.snapshot import ClusterSnapshot, QueueInfo
from numasched.api.task import QosClass, TaskInfo, TaskStatus
from numasched.api.topology import NumaTopology
from numasched.cache.convert_pdb import pdb_from_object
from numasched.cache.convert_pod import (
    ConversionError,
    bound_pod_allocation,
    node_to_node_info,
    pod_job_id,
    pod_to_task,
    podgroup_to_job,
    priority_class_value,
)
from numasched.cache.convert_queue import queue_from_object
from numasched.cache.convert_topology import (
    nrt_pod_allocation_report,
    nrt_to_topology,
    numatopology_to_topology,
    pod_allocation_report,
)
from numasched.cache.dra_store import DRA_KINDS, DraStore
from numasched.cache.events import CLUSTER_SCOPED_KINDS, EventType, ObjectEvent, object_key, object_name
from numasched.cache.machine_parts import MachineParts

log = structlog.get_logger("numasched.cache")

ProblemHandler = Callable[[str, str, str], None]
KINDS = (
    "Pod",
    "Node",
    "PodGroup",
    "Queue",
    "PriorityClass",
    "Numatopology",
    "NodeResourceTopology",
    "PodDisruptionBudget",
    *DRA_KINDS,
)
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
    kind: str
    topology: NumaTopology | None
    error: str
    reported: ReportedAllocations = attrs.field(factory=ReportedAllocations)


def capacity_mismatch(topology: NumaTopology, node: NodeInfo) -> str:
    """Why a topology cannot describe this Node (more CPUs than its capacity, a device count other
    than its capacity of that resource), or "" when it can. A topology naming CPUs or devices the
    node does not have would hand them out."""
    capacity_cpus = node.capacity.milli_cpu / 1000
    if node.capacity.milli_cpu > 0 and len(topology.cpus) > capacity_cpus:
        return (
            f"the topology lists {len(topology.cpus)} CPUs, more than Node {node.name} status.capacity.cpu "
            f"{capacity_cpus:g}; its NUMA topology is not used"
        )
    for resource, group in sorted(topology.devices.items()):
        if resource not in node.capacity.scalars:
            continue
        capacity = node.capacity.scalars[resource] / 1000
        if len(group.devices) != capacity:
            return (
                f"the topology lists {len(group.devices)} {resource} devices, Node {node.name} "
                f"status.capacity[{resource}] is {capacity:g}; its NUMA topology is not used"
            )
    return ""


@attrs.frozen(slots=True)
class _Candidate:
    """A bound task that holds pinned CPUs or devices on a node with topology."""

    node: NodeInfo
    task: TaskInfo
    holdings: dict[str, int]
    accounted: bool


class Cache:
    def __init__(
        self, scheduler_names: Collection[str] = ("numasched",), *, on_problem: ProblemHandler | None = None
    ) -> None:
        self.scheduler_names = frozenset(scheduler_names)
        self._on_problem = on_problem
        # Converted topologies of one machine shape share one copy of the machine.
        self._machines = MachineParts()
        self._raw: dict[str, dict[str, Mapping[str, Any]]] = {kind: {} for kind in KINDS}
        self._tasks: dict[str, TaskInfo] = {}
        self._task_uid_by_key: dict[str, str] = {}
        self._nodes: dict[str, NodeInfo] = {}
        self._pod_groups: dict[str, JobInfo] = {}
        self._queues: dict[str, QueueInfo] = {}
        self._priority_classes: dict[str, int] = {}
        self._disruption_budgets: dict[str, DisruptionBudget] = {}
        # Per Queue, the spec.parent problem last said about it (api/queue_hierarchy.py).
        self._queue_tree_said: dict[str, str] = {}
        self._numatopologies: dict[str, _TopologyRecord] = {}
        self._nrts: dict[str, _TopologyRecord] = {}
        self._assumed: dict[str, _Assumption] = {}
        # Nodes whose topology contradicts the Node's capacity: the reason, by node name.
        self._rejections: dict[str, str] = {}
        # Per node with a published pods fingerprint: the pod set last checked and whether it matched.
        self._fingerprint_checks: dict[str, tuple[frozenset[tuple[str, str]], str, bool]] = {}
        # Problems currently standing, by (kind, name): shown by simulate and cleared on a fix.
        self.problems: dict[tuple[str, str], str] = {}
        # Objects read with a warning (a namespace on a cluster-scoped kind), by (kind, name).
        self.warnings: dict[tuple[str, str], str] = {}
        # Incremental accounting. Every task with a node (its spec.nodeName, else the node it is
        # assumed on) is indexed under that node; a node is rebuilt from those tasks when dirty.
        self._host_of: dict[str, str] = {}
        self._uids_by_node: dict[str, set[str]] = {}
        # When each task entered _tasks: a rebuilt node adds its tasks in the order a snapshot of
        # the whole cluster would (node.tasks order is seen by plugins and messages).
        self._task_order: dict[str, int] = {}
        self._task_sequence = itertools.count()
        # Each task's job id and whether that is a PodGroup, read once per pod version.
        self._job_of: dict[str, tuple[str, bool]] = {}
        self._accounted: dict[str, NodeInfo] = {}
        self._dirty: set[str] = set()
        # The nodes as the last session left them (offer_session_nodes), by name, until the next
        # snapshot: a node rebuilt into the very state a session left it in keeps that state's
        # generation, so what the session derived from it still holds.
        self._offered: dict[str, NodeInfo] = {}
        # DRA objects (resource.k8s.io/v1) and the claims each pod references.
        self.dra = DraStore(self._problem)
        self._handlers = self._handler_table()

    # ---- events -------------------------------------------------------------------------------

    def apply(self, event: ObjectEvent) -> None:
        handler = self._handlers.get(event.kind)
        if handler is None:
            self._problem(event.kind, object_name(event.obj), f"unknown kind {event.kind!r}; skipped")
            return
        name = object_key(event.kind, event.obj)
        key = self._key(event.kind, event.obj)
        if event.type is EventType.DELETED:
            self._raw[event.kind].pop(key, None)
            self.problems.pop((event.kind, name), None)
            self.warnings.pop((event.kind, name), None)
            handler(key, None)
            return
        self.problems.pop((event.kind, name), None)
        self._warn_namespace(event.kind, name, event.obj)
        try:
            handler(key, event.obj)
        except ConversionError as error:
            # The last good version, if any, stays in force: a bound pod whose update cannot be
            # read still holds its CPUs and devices. (Topology objects never get here: a rejected
            # one leaves its node without usable topology, see _topology_record.)
            self._problem(error.kind, error.name, error.message)
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
            "PodDisruptionBudget": self._on_pdb,
            **{kind: self._dra_handler(kind) for kind in DRA_KINDS},
        }

    def _dra_handler(self, kind: str) -> Callable[[str, Mapping[str, Any] | None], None]:
        def handle(key: str, obj: Mapping[str, Any] | None) -> None:
            self._dra_dirty(self.dra.apply(kind, key, obj))

        return handle

    @staticmethod
    def _key(kind: str, obj: Mapping[str, Any]) -> str:
        if kind == "Pod":
            metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
            if isinstance(metadata, Mapping) and metadata.get("uid"):
                return str(metadata["uid"])
        return object_key(kind, obj)

    def _warn_namespace(self, kind: str, name: str, obj: Mapping[str, Any]) -> None:
        """A cluster-scoped object carrying metadata.namespace (as some upstream examples do) is
        read under its name alone, so it still matches its node; the namespace is reported."""
        metadata = obj.get("metadata") if isinstance(obj, Mapping) else None
        namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
        if kind not in CLUSTER_SCOPED_KINDS or not namespace:
            self.warnings.pop((kind, name), None)
            return
        message = f"metadata.namespace {str(namespace)!r} ignored: {kind} is cluster-scoped"
        if self.warnings.get((kind, name)) != message:
            log.warning("object read with a warning", kind=kind, object=name, warning=message)
        self.warnings[(kind, name)] = message

    def _problem(self, kind: str, name: str, message: str) -> None:
        self.problems[(kind, name)] = message
        log.warning("object skipped", kind=kind, object=name, problem=message)
        if self._on_problem is not None:
            self._on_problem(kind, name, message)

    def _on_pod(self, key: str, obj: Mapping[str, Any] | None) -> None:
        # Converted before the old version is dropped, so a bad update keeps the last good one.
        task = pod_to_task(obj) if obj is not None else None
        self.dra.set_pod(key, obj)
        old = self._tasks.pop(key, None)
        if old is not None:
            self._task_uid_by_key.pop(old.key, None)
        if task is None:
            self._assumed.pop(key, None)
            self._task_order.pop(key, None)
            self._job_of.pop(key, None)
            self._reindex(key)
            return
        try:
            task.allocation = self._bound_allocation(key, task)
        except ConversionError as error:
            self._problem(error.kind, error.name, f"{error.message}; its CPUs and devices are not tracked")
        self._tasks[key] = task
        self._task_order[key] = next(self._task_sequence)
        self._job_of[key] = pod_job_id(task.namespace, task.name, task.annotations)
        self._task_uid_by_key[task.key] = key
        if task.node_name:
            # The API server confirmed the binding (or someone else placed it): no longer assumed.
            self._assumed.pop(key, None)
        self._reindex(key)

    def _bound_allocation(self, uid: str, task: TaskInfo) -> PodAllocation | None:
        """bound_pod_allocation; for a pod this scheduler bound with the allocation text it wrote,
        the allocation it was written from (the text reads back to an equal one), so the binding
        this scheduler made is not parsed again and the ledger holds the session's own object."""
        assumed = self._assumed.get(uid)
        if assumed is not None and assumed.allocation is not None and task.node_name == assumed.node_name:
            text = task.annotations.get(ALLOCATION_ANNOTATION)
            if text is not None and text == assumed.allocation.json_text:
                return assumed.allocation
        return bound_pod_allocation(task)

    def _on_node(self, key: str, obj: Mapping[str, Any] | None) -> None:
        self._dirty.add(key)
        if obj is None:
            self._nodes.pop(key, None)
            self._fingerprint_checks.pop(key, None)
        else:
            self._nodes[key] = node_to_node_info(obj)
        self._check_capacity(key)

    def _on_pod_group(self, key: str, obj: Mapping[str, Any] | None) -> None:
        if obj is None:
            self._pod_groups.pop(key, None)
            return
        self._pod_groups[key] = podgroup_to_job(obj)

    def _on_queue(self, key: str, obj: Mapping[str, Any] | None) -> None:
        if obj is None:
            self._queues.pop(key, None)
            self._check_queue_tree()
            return
        queue, problems = queue_from_object(obj)
        self._queues[key] = queue
        if problems:
            # The queue is used, each unreadable field at its default: said on the Queue by name.
            message = "; ".join(problems)
            self.warnings[("Queue", queue.name)] = message
            log.warning("object read with defaults", kind="Queue", object=queue.name, problem=message)
            if self._on_problem is not None:
                self._on_problem("Queue", queue.name, message)
        # This event reset the queue's warnings to its own fields': what its place in the tree
        # says is added back (it is not said again unless it changes).
        said = self._queue_tree_said.get(queue.name)
        if said:
            own = self.warnings.get(("Queue", queue.name))
            self.warnings[("Queue", queue.name)] = f"{own}; {said}" if own else said
        self._check_queue_tree()

    def _check_queue_tree(self) -> None:
        """A spec.parent naming a missing queue, or parents in a cycle: said on each Queue (beside
        what its own fields say) when it changes; the queue is used under the root meanwhile."""
        found: dict[str, list[str]] = {}
        for problem in resolve_parents(self._queues)[1]:
            found.setdefault(problem.queue, []).append(problem.message)
        for name in sorted(set(found) | set(self._queue_tree_said)):
            message = "; ".join(found.get(name, []))
            if self._queue_tree_said.get(name, "") == message:
                continue
            said = self._queue_tree_said.pop(name, "")
            own = self.warnings.get(("Queue", name), "").replace(said, "").strip("; ")
            combined = "; ".join(part for part in (own, message) if part)
            if combined:
                self.warnings[("Queue", name)] = combined
            else:
                self.warnings.pop(("Queue", name), None)
            if message:
                self._queue_tree_said[name] = message
                log.warning("queue tree problem", kind="Queue", object=name, problem=message)
                if self._on_problem is not None:
                    self._on_problem("Queue", name, message)

    def _on_priority_class(self, key: str, obj: Mapping[str, Any] | None) -> None:
        if obj is None:
            self._priority_classes.pop(key, None)
            return
        name, value = priority_class_value(obj)
        self._priority_classes[name] = value

    def _on_pdb(self, key: str, obj: Mapping[str, Any] | None) -> None:
        if obj is None:
            self._disruption_budgets.pop(key, None)
            return
        budget, problems = pdb_from_object(obj)
        self._disruption_budgets[key] = budget
        if problems:
            # The budget is used, each unreadable field on its safe side: said on it by name.
            message = "; ".join(problems)
            self.warnings[("PodDisruptionBudget", budget.key)] = message
            log.warning("object read with defaults", kind="PodDisruptionBudget", object=budget.key, problem=message)
            if self._on_problem is not None:
                self._on_problem("PodDisruptionBudget", budget.key, message)

    def _on_numatopology(self, key: str, obj: Mapping[str, Any] | None) -> None:
        self._dirty.add(key)
        if obj is None:
            self._numatopologies.pop(key, None)
        else:
            self._numatopologies[key] = self._topology_record("Numatopology", key, obj)
        self._check_capacity(key)

    def _on_nrt(self, key: str, obj: Mapping[str, Any] | None) -> None:
        self._dirty.add(key)
        if obj is None:
            self._nrts.pop(key, None)
        else:
            self._nrts[key] = self._topology_record("NodeResourceTopology", key, obj)
        self._check_capacity(key)

    def _topology_record(self, kind: str, key: str, obj: Mapping[str, Any]) -> _TopologyRecord:
        """A topology that does not convert leaves its node without usable topology (the
        numa-aware plugin's unknown-topology argument decides what may still go there)."""

        def warn(message: str) -> None:
            self._problem(kind, key, message)

        try:
            if kind == "Numatopology":
                topology = self._machines.shared(numatopology_to_topology(obj, warn))
                return _TopologyRecord(kind, topology, "", pod_allocation_report(obj, topology, warn))
            topology = self._machines.shared(nrt_to_topology(obj, warn))
            return _TopologyRecord(kind, topology, "", nrt_pod_allocation_report(obj, topology, warn))
        except ConversionError as error:
            self._problem(kind, key, error.message)
            return _TopologyRecord(kind, None, f"{kind} {key}: {error.message}")

    def _check_capacity(self, node_name: str) -> None:
        """Reject (for as long as it lasts) a topology that contradicts its Node's capacity."""
        record = self._topology_for(node_name)
        node = self._nodes.get(node_name)
        message = ""
        if record is not None and record.topology is not None and node is not None:
            message = capacity_mismatch(record.topology, node)
        previous = self._rejections.pop(node_name, "")
        if not message:
            for kind in ("Numatopology", "NodeResourceTopology"):
                if previous and self.problems.get((kind, node_name)) == previous:
                    del self.problems[(kind, node_name)]
            return
        assert record is not None
        self._rejections[node_name] = message
        if message != previous or self.problems.get((record.kind, node_name)) != message:
            self._problem(record.kind, node_name, message)

    # ---- assumptions --------------------------------------------------------------------------

    def assume(self, task_uid: str, node_name: str, allocation: PodAllocation | None) -> None:
        self._assumed[task_uid] = _Assumption(node_name, allocation)
        self._reindex(task_uid)
        if allocation is not None and self.dra.in_use_anywhere:
            devices: dict[str, list[str]] = {}
            for container in allocation.containers:
                for resource, ids in container.devices.items():
                    devices.setdefault(resource, []).extend(ids)
            self._dra_dirty(self.dra.assume(task_uid, claim_allocations(devices, node_name)))

    def forget(self, task_uid: str) -> None:
        self._dra_dirty(self.dra.forget(task_uid))
        if self._assumed.pop(task_uid, None) is not None:
            self._reindex(task_uid)

    def _dra_dirty(self, affected: set[str] | None) -> None:
        self._dirty.update(self._nodes if affected is None else affected)

    def pod_object(self, task_uid: str) -> Mapping[str, Any] | None:
        return self._raw["Pod"].get(task_uid)

    def task_uid(self, namespace: str, name: str) -> str | None:
        return self._task_uid_by_key.get(f"{namespace}/{name}")

    # ---- snapshot -----------------------------------------------------------------------------

    def _is_ours(self, task: TaskInfo) -> bool:
        return task.scheduler_name in self.scheduler_names

    def _topology_for(self, node_name: str) -> _TopologyRecord | None:
        """The node's Numatopology, else its NodeResourceTopology; a usable one before a broken one."""
        numatopology = self._numatopologies.get(node_name)
        nrt = self._nrts.get(node_name)
        if numatopology is not None and (numatopology.topology is not None or nrt is None):
            return numatopology
        return nrt if nrt is not None and (nrt.topology is not None or numatopology is None) else numatopology

    def _usable_topology(self, node_name: str) -> tuple[_TopologyRecord | None, NumaTopology | None, str]:
        """The record, the topology the scheduler may use, and why there is none ("" = missing)."""
        record = self._topology_for(node_name)
        if record is None:
            return None, None, ""
        rejection = self._rejections.get(node_name)
        if rejection is not None:
            return record, None, f"{record.kind} {node_name}: {rejection}"
        return record, record.topology, record.error

    def topology_source(self, node_name: str) -> str:
        """The kind of the object the node's topology is read from (Numatopology or
        NodeResourceTopology), "" when it has none."""
        record = self._topology_for(node_name)
        return record.kind if record is not None else ""

    def nodes_without_topology(self) -> dict[str, str]:
        """Nodes the numa-aware plugin cannot align on: "missing", or "rejected: why"."""
        result: dict[str, str] = {}
        for name in sorted(self._nodes):
            _, topology, error = self._usable_topology(name)
            if topology is None:
                result[name] = f"rejected: {error}" if error else "missing"
        return result

    # ---- incremental accounting -------------------------------------------------------------

    def _host_name(self, uid: str) -> str:
        """The node a task is accounted on: its spec.nodeName, else the node it is assumed on."""
        stored = self._tasks.get(uid)
        if stored is None:
            return ""
        if stored.node_name:
            return stored.node_name
        assumption = self._assumed.get(uid)
        return assumption.node_name if assumption is not None else ""

    def _reindex(self, uid: str) -> None:
        """The task (or its assumption) changed: file it under its node now, and mark the node it
        was on and the node it is on dirty (the same one when it only changed in place)."""
        old = self._host_of.pop(uid, "")
        if old:
            held = self._uids_by_node.get(old)
            if held is not None:
                held.discard(uid)
                if not held:
                    del self._uids_by_node[old]
            self._dirty.add(old)
        new = self._host_name(uid)
        if new:
            self._host_of[uid] = new
            self._uids_by_node.setdefault(new, set()).add(uid)
            self._dirty.add(new)

    def _reports_on(self, node_name: str) -> ReportedAllocations | None:
        """What the node's usable topology source reports as assigned to pods, if it has one."""
        if node_name not in self._nodes:
            return None
        record, topology, _ = self._usable_topology(node_name)
        return record.reported if record is not None and topology is not None else None

    def _placed_copy(self, uid: str, stored: TaskInfo) -> tuple[TaskInfo, bool]:
        """A copy of the task as the cluster has it now: on the node it is assumed on (binding,
        with the decided allocation) until the API server confirms; with the allocation its node
        reports, which wins over our annotation. And whether that report accounts for the pod."""
        task = _session_copy(stored)
        assumption = self._assumed.get(uid)
        if assumption is not None and not task.node_name:
            task.node_name = assumption.node_name
            task.status = TaskStatus.BINDING
            task.allocation = assumption.allocation
        accounted = False
        if task.node_name:
            reports = self._reports_on(task.node_name)
            if reports is not None:
                reported = reports.for_pod(uid, task.key)
                if reported is not None:
                    task.allocation = reported
                accounted = reports.accounts_for(uid, task.key)
        return task, accounted

    def _account_node(self, base: NodeInfo) -> NodeInfo:
        """The node with its topology and every task on it accounted, built from its Node alone.
        O(tasks on the node)."""
        node = base.clone()
        _, topology, error = self._usable_topology(node.name)
        node.set_topology(topology, error)
        node.dra = self.dra.node_view(node.name, node.labels) if self.dra.in_use_anywhere else None
        if node.dra is not None:
            node.touch()
        held: list[_Candidate] = []
        uids = sorted(self._uids_by_node.get(node.name, ()), key=self._task_order.__getitem__)
        for uid in uids:
            stored = self._tasks[uid]
            if stored.status in _FINISHED and not self._is_ours(stored):
                continue
            task, accounted = self._placed_copy(uid, stored)
            if task.status in _FINISHED:
                continue
            node.add_task(task)
            if topology is not None and (task.qos is QosClass.GUARANTEED or task.init_resreq.scalars):
                holdings = pinned_holdings(task, topology)
                if holdings:
                    held.append(_Candidate(node, task, holdings, accounted))
        if held:
            self._mark_unknown_holders(node, held)
        return node

    def offer_session_nodes(self, nodes: Mapping[str, NodeInfo]) -> None:
        """The nodes of a finished session's snapshot: those it changed are compared, at the next
        snapshot, with what the cache rebuilds (the session's binds assumed), and one found in the
        same state keeps the session's generation. A session places a pod on a node and the
        cache then accounts the same pod there; without this, every answer the session derived
        from that node state (predicates, scores, admissions) would be computed again."""
        for name, node in nodes.items():
            accounted = self._accounted.get(name)
            if accounted is not None and node.generation != accounted.generation:
                self._offered[name] = node

    def _bring_nodes_up_to_date(self) -> None:
        for name in self._dirty:
            base = self._nodes.get(name)
            if base is None:
                self._accounted.pop(name, None)
                continue
            rebuilt = self._account_node(base)
            offered = self._offered.get(name)
            if offered is not None and rebuilt.same_state(offered):
                # Equal states, one name: the generation names the state (api/node.py).
                rebuilt.generation = offered.generation
                rebuilt.numa_generation = offered.numa_generation
            self._accounted[name] = rebuilt
        self._dirty.clear()
        self._offered.clear()

    def snapshot(self) -> ClusterSnapshot:
        """A copy the session may change freely: nodes with their tasks accounted, jobs, queues.

        Nodes are copies of the accounted nodes (same generation), holding copies of their tasks;
        a job's task placed on a node is the very object in that node's tasks, so a session that
        moves a task changes what both see."""
        self._bring_nodes_up_to_date()
        snapshot = ClusterSnapshot(
            queues={name: attrs.evolve(queue) for name, queue in self._queues.items()},
            priority_classes=dict(self._priority_classes),
            disruption_budgets=dict(self._disruption_budgets),
        )
        if "default" not in snapshot.queues:
            snapshot.queues["default"] = QueueInfo("default", implicit=True)
        placed: dict[str, TaskInfo] = {}
        for name in self._nodes:
            accounted = self._accounted[name]
            node = accounted.clone()
            # The clone keeps the generation: its tasks are equal copies, so nothing derived from
            # the node changes; they are copies so that the session's changes stay in the session.
            node.tasks = {uid: _session_copy(task) for uid, task in accounted.tasks.items()}
            placed.update(node.tasks)
            snapshot.nodes[name] = node
        for group_key, group in self._pod_groups.items():
            snapshot.jobs[group_key] = attrs.evolve(group, tasks={})
        for uid, stored in self._tasks.items():
            if not self._is_ours(stored):
                # Others' pods only take their node's resources (accounted above).
                continue
            task = placed.get(uid)
            if task is None:
                task, _ = self._placed_copy(uid, stored)
            task.claims = self.dra.pod_claims(uid, task.namespace, task.name)
            self._add_to_job(snapshot, task, *self._job_of[uid])
        return snapshot

    def _mark_unknown_holders(self, node: NodeInfo, held: list[_Candidate]) -> None:
        """Pods holding pinned CPUs or devices whose ids no source gives, and that the node's
        report does not account for, become the node's unknown holders (docs/topology.md)."""
        topology = node.topology
        assert topology is not None

        def states(resource: str) -> bool:
            if resource == "cpu":
                return topology.available_cpus is not None
            return resource in topology.available_devices

        if topology.pods_fingerprint and self._fingerprint_matches(node, topology.pods_fingerprint, held):
            # The published availability reflects exactly the pods we see there.
            held = [attrs.evolve(candidate, accounted=True) for candidate in held]
        for candidate in held:
            unknown = unknown_part(candidate.holdings, candidate.task.allocation)
            if candidate.accounted:
                # A report accounts for a pod's holdings only of the resources whose availability it
                # states: our exporter lists a pod it saw in the CPU checkpoint even when it could
                # not see the pod's devices (and leaves those devices out of numares).
                unknown = {resource: count for resource, count in unknown.items() if not states(resource)}
            if unknown:
                node.set_unknown_holder(candidate.task.uid, UnknownHolder(candidate.task.key, unknown))

    def _fingerprint_matches(self, node: NodeInfo, published: str, held: list[_Candidate]) -> bool:
        """Whether the published pods fingerprint is that of the pods on the node: all of them
        (method "all") or those with exclusive resources (method "with-exclusive-resources")."""
        pods = frozenset((task.namespace, task.name) for task in node.tasks.values())
        checked = self._fingerprint_checks.get(node.name)
        if checked is not None and checked[0] == pods and checked[1] == published:
            return checked[2]
        exclusive = frozenset((c.task.namespace, c.task.name) for c in held)
        matches = published in (pods_fingerprint(pods), pods_fingerprint(exclusive))
        self._fingerprint_checks[node.name] = (pods, published, matches)
        return matches

    @staticmethod
    def _add_to_job(snapshot: ClusterSnapshot, task: TaskInfo, job_id: str, has_group: bool) -> None:
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
