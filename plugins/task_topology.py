"""task-topology: affinity and anti-affinity between the tasks of one job (Volcano's task-topology).

A job names its task roles (a pod's `volcano.sh/task-spec` annotation, else label) in three
annotations:

    volcano.sh/task-topology-affinity: "ps,worker;ps,chief"   # groups, ';'-separated, that like
                                                               # to share a node ("ps" alone:
                                                               # ps pods like each other)
    volcano.sh/task-topology-anti-affinity: "ps;worker,chief" # groups that avoid sharing one
    volcano.sh/task-topology-task-order: "ps,worker,chief"    # which roles to place first

At session open the job's tasks that have a topology are packed into buckets: a bucket gathers
tasks that like each other and no task that one of them avoids (bound tasks found on one node form
one bucket). Task order: tasks in a bucket before tasks in none, a bigger bucket first, an older
bucket first, then the annotation's role order and the strength of the role's topology. Node
order: a node scores by the bucket's tasks already placed there, minus the avoided tasks placed
there this session, plus the bucket's tasks still to place, less one for each that would not fit
next to the others; times `task-topology.weight` (default 1), scaled to 0-100 by the largest
bucket of the job.

Where the annotations are read: Volcano reads the PodGroup's annotations; numasched's JobInfo does
not carry a PodGroup's annotations, so they are read from the job's pods (every pod that carries
one must carry the same text). An annotation naming a role the job does not have, or naming one
twice in a group, is logged once (naming the job and the annotation) and the plugin then abstains
for that job, as Volcano skips it.

The node score depends on where the job's other tasks went, so this plugin declares no
equivalence key: a configuration naming it runs without the engine's memo.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import structlog

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.task import TaskInfo, TaskStatus
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import Event, EventHandler, Session

_log = structlog.get_logger(__name__)

PLUGIN_NAME = "task-topology"
WEIGHT_ARGUMENT = "task-topology.weight"
AFFINITY_ANNOTATION = "volcano.sh/task-topology-affinity"
ANTI_AFFINITY_ANNOTATION = "volcano.sh/task-topology-anti-affinity"
TASK_ORDER_ANNOTATION = "volcano.sh/task-topology-task-order"
TOPOLOGY_ANNOTATIONS = (AFFINITY_ANNOTATION, ANTI_AFFINITY_ANNOTATION, TASK_ORDER_ANNOTATION)
TASK_SPEC_KEY = "volcano.sh/task-spec"
MAX_NODE_SCORE = 100.0

# How strongly a role is tied to the others, for the task order (Volcano's affinityPriority).
SELF_ANTI_AFFINITY = 4
INTER_AFFINITY = 3
SELF_AFFINITY = 2
INTER_ANTI_AFFINITY = 1


class TopologyError(ValueError):
    """A topology annotation that names a role the job does not have, or one role twice."""


class TaskTopology:
    """The three annotations, split: groups of roles (affinity, anti-affinity) and a role order."""

    __slots__ = ("affinity", "anti_affinity", "task_order")

    def __init__(
        self,
        affinity: list[list[str]] | None = None,
        anti_affinity: list[list[str]] | None = None,
        task_order: list[str] | None = None,
    ) -> None:
        self.affinity = affinity
        self.anti_affinity = anti_affinity
        self.task_order = task_order

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TaskTopology):
            return NotImplemented
        return (self.affinity, self.anti_affinity, self.task_order) == (
            other.affinity,
            other.anti_affinity,
            other.task_order,
        )

    def __repr__(self) -> str:
        return f"TaskTopology({self.affinity!r}, {self.anti_affinity!r}, {self.task_order!r})"


def task_role(task: TaskInfo) -> str:
    """The role of a task in its job: the pod's volcano.sh/task-spec annotation, else label."""
    return task.annotations.get(TASK_SPEC_KEY) or task.labels.get(TASK_SPEC_KEY) or ""


def check_groups(job: JobInfo, groups: Sequence[Sequence[str]]) -> None:
    """Every non-empty name is a role of the job and appears once in its group (empty names, from
    stray separators, are ignored, as Volcano does)."""
    roles = {task_role(task) for task in job.tasks.values()}
    for group in groups:
        seen: set[str] = set()
        for name in group:
            if not name:
                continue
            if name not in roles:
                raise TopologyError(f"task {name} do not exist in job <{job.namespace}/{job.name}>")
            if name in seen:
                raise TopologyError(f"task {name} is duplicate in job <{job.namespace}/{job.name}>")
            seen.add(name)


def split_groups(job: JobInfo, text: str) -> list[list[str]]:
    groups = [part.split(",") for part in text.split(";")]
    check_groups(job, groups)
    return groups


def read_topology(job: JobInfo, annotations: Mapping[str, str]) -> TaskTopology | None:
    """The job's topology from its annotations; None when it has none of the three.

    Raises TopologyError naming the annotation at fault."""
    if not any(key in annotations for key in TOPOLOGY_ANNOTATIONS):
        return None
    topology = TaskTopology()
    for key in TOPOLOGY_ANNOTATIONS:
        if key not in annotations:
            continue
        try:
            if key == TASK_ORDER_ANNOTATION:
                order = annotations[key].split(",")
                check_groups(job, [order])
                topology.task_order = order
            elif key == AFFINITY_ANNOTATION:
                topology.affinity = split_groups(job, annotations[key])
            else:
                topology.anti_affinity = split_groups(job, annotations[key])
        except TopologyError as error:
            raise TopologyError(f"annotation {key}: {error}") from None
    return topology


def job_topology_annotations(job: JobInfo) -> dict[str, str]:
    """The topology annotations of the job: its PodGroup's, as Volcano reads them, when it carries
    any; else those the job's pods carry (a PodGroup written without them). Raises TopologyError
    when two pods carry different text for one annotation (there is no telling which is meant)."""
    from_group = {key: job.annotations[key] for key in TOPOLOGY_ANNOTATIONS if key in job.annotations}
    if from_group:
        return from_group
    found: dict[str, str] = {}
    for task in sorted(job.tasks.values(), key=lambda each: each.uid):
        for key in TOPOLOGY_ANNOTATIONS:
            value = task.annotations.get(key)
            if value is None:
                continue
            if found.setdefault(key, value) != value:
                raise TopologyError(f"annotation {key}: the job's pods disagree ({found[key]!r}, {value!r})")
    return found


def request_score(request: Resource) -> float:
    """Volcano's bucket weight: 1 millicpu, 1 MiB and 1 milli-unit of a device count the same."""
    return request.milli_cpu + request.memory / 1024 / 1024 + sum(request.scalars.values())


class Bucket:
    """Tasks of one job that should share a node."""

    __slots__ = ("bound_count", "index", "on_node", "req_score", "request", "role_counts", "tasks")

    def __init__(self, index: int) -> None:
        self.index = index
        # Pending tasks of the bucket by uid, in the order they joined.
        self.tasks: dict[str, TaskInfo] = {}
        self.role_counts: dict[str, int] = {}
        self.req_score = 0.0
        self.request = Resource()
        self.bound_count = 0
        # Node name -> how many of the bucket's tasks are placed there.
        self.on_node: dict[str, int] = {}

    def add(self, role: str, task: TaskInfo) -> None:
        self.role_counts[role] = self.role_counts.get(role, 0) + 1
        if task.node_name:
            self.on_node[task.node_name] = self.on_node.get(task.node_name, 0) + 1
            self.bound_count += 1
            return
        self.tasks[task.uid] = task
        self.req_score += request_score(task.resreq)
        self.request.add(task.resreq)

    def bind(self, task: TaskInfo, node_name: str) -> None:
        self.on_node[node_name] = self.on_node.get(node_name, 0) + 1
        self.bound_count += 1
        self.tasks.pop(task.uid, None)
        self.req_score -= request_score(task.resreq)
        self.request.sub(task.resreq)

    def unbind(self, task: TaskInfo, node_name: str) -> None:
        """Undo bind (a discarded placement); Volcano has no such event."""
        left = self.on_node.get(node_name, 0) - 1
        if left > 0:
            self.on_node[node_name] = left
        else:
            self.on_node.pop(node_name, None)
        self.bound_count -= 1
        self.tasks[task.uid] = task
        self.req_score += request_score(task.resreq)
        self.request.add(task.resreq)


def _link(table: dict[str, set[str]], first: str, second: str) -> None:
    table.setdefault(first, set()).add(second)
    table.setdefault(second, set()).add(first)


class JobManager:
    """One job's topology and buckets for one session."""

    def __init__(self, job_uid: str, topology: TaskTopology) -> None:
        self.job_uid = job_uid
        self.buckets: list[Bucket] = []
        # Task uid -> its bucket index; tasks without a bucket are absent.
        self.bucket_of: dict[str, int] = {}
        self.role_of: dict[str, str] = {}
        self.role_priority: dict[str, int] = {}
        self.role_order: dict[str, int] = {}
        self.inter_affinity: dict[str, set[str]] = {}
        self.self_affinity: set[str] = set()
        self.inter_anti_affinity: dict[str, set[str]] = {}
        self.self_anti_affinity: set[str] = set()
        self.bucket_max_size = 0
        # Node name -> role -> tasks placed there this session.
        self.roles_on_node: dict[str, dict[str, int]] = {}
        # Task uid -> node, for the placements of this session (what a deallocate may undo).
        self.placed: dict[str, str] = {}
        # Tasks already on a node at session open: an undone eviction re-announces them.
        self.bound_at_open: set[str] = set()
        self._apply(topology)

    def _mark(self, role: str, priority: int) -> None:
        if priority > self.role_priority.get(role, 0):
            self.role_priority[role] = priority

    def _apply(self, topology: TaskTopology) -> None:
        for group in topology.affinity or ():
            if len(group) == 1:
                self.self_affinity.add(group[0])
                self._mark(group[0], SELF_AFFINITY)
                continue
            for index, role in enumerate(group):
                for other in group[:index]:
                    _link(self.inter_affinity, role, other)
                self._mark(role, INTER_AFFINITY)
        for group in topology.anti_affinity or ():
            if len(group) == 1:
                self.self_anti_affinity.add(group[0])
                self._mark(group[0], SELF_ANTI_AFFINITY)
                continue
            for index, role in enumerate(group):
                for other in group[:index]:
                    _link(self.inter_anti_affinity, role, other)
                self._mark(role, INTER_ANTI_AFFINITY)
        order = topology.task_order or []
        for index, role in enumerate(order):
            self.role_order[role] = len(order) - index

    def affinity_with(self, role: str, role_counts: Mapping[str, int], *, only_anti: bool) -> int:
        """+1 for each task liked, -1 for each avoided, among `role_counts` (role -> tasks)."""
        total = 0
        if not role:
            return total
        for other, count in role_counts.items():
            same = other == role
            if not only_anti:
                likes = role in self.self_affinity if same else other in self.inter_affinity.get(role, ())
                if likes:
                    total += count
            avoids = role in self.self_anti_affinity if same else other in self.inter_anti_affinity.get(role, ())
            if avoids:
                total -= count
        return total

    def role_rank(self, role: str) -> tuple[int, int]:
        """Higher goes first: the annotation's order, then how strongly the role is tied."""
        return self.role_order.get(role, 0), self.role_priority.get(role, 0)

    def build_buckets(self, tasks: Iterable[TaskInfo]) -> None:
        members: list[TaskInfo] = []
        for task in tasks:
            if task.node_name:
                self.bound_at_open.add(task.uid)
            role = task_role(task)
            if role and role in self.role_priority:
                self.role_of[task.uid] = role
                members.append(task)
        # Bound tasks first (by node), then by role rank, then by name (Volcano's TaskOrder).
        bound = sorted((task for task in members if task.node_name), key=lambda task: (task.node_name, task.name))
        pending = sorted(
            (task for task in members if not task.node_name),
            key=lambda task: (tuple(-rank for rank in self.role_rank(self.role_of[task.uid])), task.name),
        )
        bucket_on_node: dict[str, Bucket] = {}
        for task in bound + pending:
            role = self.role_of[task.uid]
            chosen: Bucket | None = None
            best = -(2**31)
            if task.node_name:
                best = 0
                chosen = bucket_on_node.get(task.node_name)
            else:
                for bucket in self.buckets:
                    affinity = self.affinity_with(role, bucket.role_counts, only_anti=False)
                    # The best liked bucket; between equals, the lighter one.
                    if affinity > best:
                        best, chosen = affinity, bucket
                    elif affinity == best and chosen is not None and bucket.req_score < chosen.req_score:
                        chosen = bucket
            if best < 0 or chosen is None:
                chosen = Bucket(len(self.buckets))
                self.buckets.append(chosen)
                if task.node_name:
                    bucket_on_node[task.node_name] = chosen
            self.bucket_of[task.uid] = chosen.index
            chosen.add(role, task)
            self.bucket_max_size = max(self.bucket_max_size, len(chosen.tasks) + chosen.bound_count)

    def bucket(self, task: TaskInfo) -> Bucket | None:
        index = self.bucket_of.get(task.uid)
        return None if index is None else self.buckets[index]

    def same_job_order(self, first: TaskInfo, second: TaskInfo) -> int:
        """<0 when `first` goes first, for two tasks of this job."""
        first_bucket, second_bucket = self.bucket(first), self.bucket(second)
        if (first_bucket is None) != (second_bucket is None):
            return -1 if first_bucket is not None else 1
        if first_bucket is None or second_bucket is None:
            return 0
        if len(first_bucket.tasks) != len(second_bucket.tasks):
            return -1 if len(first_bucket.tasks) > len(second_bucket.tasks) else 1
        if first_bucket.index != second_bucket.index:
            return -1 if first_bucket.index < second_bucket.index else 1
        first_rank = self.role_rank(self.role_of.get(first.uid, ""))
        second_rank = self.role_rank(self.role_of.get(second.uid, ""))
        if first_rank == second_rank:
            return 0
        return -1 if first_rank > second_rank else 1

    def bucket_score(self, task: TaskInfo, node: NodeInfo) -> int:
        """Volcano's calcBucketScore: the bucket's pull towards this node, in tasks."""
        room = node.idle.clone().add(node.releasing)
        if task.resreq.insufficient(room):
            return 0
        bucket = self.bucket(task)
        if bucket is None:
            return 0
        score = bucket.on_node.get(node.name, 0)
        roles_here = self.roles_on_node.get(node.name)
        if roles_here:
            repulsion = self.affinity_with(task_role(task), roles_here, only_anti=True)
            if repulsion < 0:
                score += repulsion
        score += len(bucket.tasks)
        if bucket.request.fits_in(room):
            return score
        # The rest of the bucket does not fit here: one point less per task left out, until the
        # remainder fits.
        remains = bucket.request.clone()
        for uid, other in bucket.tasks.items():
            if uid == task.uid:
                continue
            remains.sub(other.resreq)
            score -= 1
            if remains.fits_in(room):
                break
        return score

    def on_allocate(self, task: TaskInfo, node_name: str) -> None:
        if task.uid in self.placed or task.uid in self.bound_at_open:
            return
        self.placed[task.uid] = node_name
        role = task_role(task)
        if role:
            here = self.roles_on_node.setdefault(node_name, {})
            here[role] = here.get(role, 0) + 1
        bucket = self.bucket(task)
        if bucket is not None:
            bucket.bind(task, node_name)

    def on_deallocate(self, task: TaskInfo) -> None:
        node_name = self.placed.pop(task.uid, None)
        if node_name is None:
            return
        role = task_role(task)
        here = self.roles_on_node.get(node_name)
        if role and here is not None:
            here[role] -= 1
            if here[role] <= 0:
                del here[role]
        bucket = self.bucket(task)
        if bucket is not None:
            bucket.unbind(task, node_name)


class TaskTopologyPlugin:
    name = PLUGIN_NAME

    def __init__(self, arguments: Arguments, reported: set[tuple[str, str]] | None = None) -> None:
        self.weight = arguments.get_int(WEIGHT_ARGUMENT, 1)
        self.managers: dict[str, JobManager] = {}
        # (job uid, message) already logged; shared across sessions by the builder.
        self._reported = reported if reported is not None else set()

    def _report(self, job: JobInfo, error: TopologyError) -> None:
        mark = (job.uid, str(error))
        if mark in self._reported:
            return
        self._reported.add(mark)
        _log.warning(
            "task-topology ignores the job: bad topology annotation",
            job=job.key,
            podgroup=job.key if job.has_pod_group else "",
            error=str(error),
        )

    def build_managers(self, jobs: Mapping[str, JobInfo]) -> None:
        for uid, job in jobs.items():
            if not any(task.status is TaskStatus.PENDING for task in job.tasks.values()):
                continue
            try:
                topology = read_topology(job, job_topology_annotations(job))
            except TopologyError as error:
                self._report(job, error)
                continue
            if topology is None:
                continue
            manager = JobManager(uid, topology)
            manager.build_buckets(job.tasks.values())
            self.managers[uid] = manager
        # Forget reports about jobs that are gone, so the record stays as small as the cluster.
        live = {mark for mark in self._reported if mark[0] in jobs}
        self._reported.intersection_update(live)

    def task_order(self, first: TaskInfo, second: TaskInfo) -> int:
        first_manager = self.managers.get(first.job_id)
        second_manager = self.managers.get(second.job_id)
        if first_manager is None or second_manager is None:
            return 0
        first_in = first_manager.bucket(first) is not None
        second_in = second_manager.bucket(second) is not None
        if first_in != second_in:
            return -1 if first_in else 1
        # Ordering between jobs is the job order's business.
        if first.job_id != second.job_id:
            return 0
        return first_manager.same_job_order(first, second)

    def node_order(self, task: TaskInfo, node: NodeInfo) -> float:
        manager = self.managers.get(task.job_id)
        if manager is None:
            return 0.0
        score = float(manager.bucket_score(task, node) * self.weight)
        if manager.bucket_max_size:
            score = score * MAX_NODE_SCORE / manager.bucket_max_size
        return score

    def _allocated(self, event: Event) -> None:
        manager = self.managers.get(event.task.job_id)
        if manager is not None:
            manager.on_allocate(event.task, event.node.name)

    def _deallocated(self, event: Event) -> None:
        manager = self.managers.get(event.task.job_id)
        if manager is not None:
            manager.on_deallocate(event.task)

    def on_session_open(self, ssn: Session) -> None:
        self.build_managers(ssn.jobs)
        ssn.add_task_order_fn(self.name, self.task_order)
        ssn.add_node_order_fn(self.name, self.node_order)
        ssn.add_event_handler(EventHandler(allocate=self._allocated, deallocate=self._deallocated))

    def on_session_close(self, ssn: Session) -> None:
        self.managers = {}


class TaskTopologyBuilder:
    """Builds the plugin every session; remembers which bad annotations were already logged."""

    def __init__(self) -> None:
        self._reported: set[tuple[str, str]] = set()

    def __call__(self, arguments: Arguments) -> TaskTopologyPlugin:
        return TaskTopologyPlugin(arguments, self._reported)
