"""numa-affinity-group: pods that talk to each other share a node and a NUMA node.

Pods carrying `numasched.io/numa-affinity-group: <name>` (a name scoped to their namespace) form a
group; `numasched.io/numa-affinity: required | preferred` (default required) says how hard the
pod holds to it. Peers are the group's pods already on a node: bound, assumed, or allocated
earlier in this session; where they are is read from the node's tasks and their numa-aware
decisions (PodAllocation NUMA nodes), so the group holds within one cycle and across cycles.

required: once a peer is placed, the pod may only go to the node holding most of its peers (the
anchor; ties go to the smallest name), and only where its pinned CPUs, devices and memory land
within the NUMA nodes the peers pin there and on one that every pinned peer holds (so any two
pods of the group share a NUMA node). Otherwise it waits, with a reason naming the group, the
anchor and its NUMA nodes, and where the pod would have gone. It never splits from the group.
preferred: nodes holding peers score higher (weight x 100 x the share of the peers there).

Which NUMA nodes a pod lands on is the kubelet's choice where the kubelet pins (its narrowest
hint, lowest NUMA nodes first), and numa-aware reproduces that choice: the group checks it, it
cannot steer it (restriction.py). A preferred pod on its peers' node therefore shares their NUMA
node when the kubelet's choice is there.

Gangs: in a job with minAvailable above 1, the group's pending pods of the job are a unit: the
first one placed goes only to a node whose idle resources hold the whole unit and where the
others, placed after it one by one as the kubelet would place them, all stay with it; if no node
can, the first pod fails everywhere with that reason and the gang waits.

A bad annotation value fails the pod on every node with a message naming the annotation; a mode
annotation without a group annotation is a bad value too.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING

import attrs

from numasched.api.numamask import NumaMask
from numasched.api.resource import Resource
from numasched.api.task import TaskInfo, TaskStatus
from numasched.plugins.numaaware.restriction import NodeRestriction, NumaRestriction
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.status import SUCCESS, Status, StatusCode

if TYPE_CHECKING:
    from numasched.api.node import NodeInfo
    from numasched.scheduler.framework.session import Event, Session

PLUGIN_NAME = "numa-affinity-group"
GROUP_ANNOTATION = "numasched.io/numa-affinity-group"
MODE_ANNOTATION = "numasched.io/numa-affinity"
ARG_WEIGHT = "weight"
MAX_NODE_SCORE = 100
# Group names are free text, but bounded and printable so that messages stay readable.
MAX_GROUP_NAME = 253

# Statuses of a pod that holds a place on its node (a releasing pod is leaving it).
_PLACED = frozenset(
    {TaskStatus.ALLOCATED, TaskStatus.PIPELINED, TaskStatus.BINDING, TaskStatus.BOUND, TaskStatus.RUNNING}
)


class AffinityMode(enum.StrEnum):
    REQUIRED = "required"
    PREFERRED = "preferred"


class GroupAnnotationError(ValueError):
    """A group or mode annotation that cannot be read; the message names the annotation."""


@attrs.frozen(slots=True)
class Membership:
    """The group a pod belongs to: `namespace/name`, and how hard it holds to it."""

    group: str
    mode: AffinityMode

    @property
    def label(self) -> str:
        return f"numa affinity group {self.group} ({self.mode.value})"


def read_membership(task: TaskInfo) -> Membership | None:
    """The pod's group, None when it names none. Raises GroupAnnotationError on a bad value."""
    annotations = task.annotations
    raw_group = annotations.get(GROUP_ANNOTATION)
    raw_mode = annotations.get(MODE_ANNOTATION)
    if raw_group is None:
        if raw_mode is not None:
            raise GroupAnnotationError(
                f"annotation {MODE_ANNOTATION} is set ({raw_mode!r:.60}) but {GROUP_ANNOTATION} is not: "
                "name the group the pod belongs to, or drop the mode"
            )
        return None
    name = raw_group.strip()
    if not name:
        raise GroupAnnotationError(f"annotation {GROUP_ANNOTATION}: expected a group name, got an empty value")
    if len(name) > MAX_GROUP_NAME or not name.isprintable():
        raise GroupAnnotationError(
            f"annotation {GROUP_ANNOTATION}: expected a printable name of at most {MAX_GROUP_NAME} characters, "
            f"got {name!r:.80}"
        )
    mode = AffinityMode.REQUIRED
    if raw_mode is not None:
        try:
            mode = AffinityMode(raw_mode.strip().lower())
        except ValueError:
            choices = " or ".join(choice.value for choice in AffinityMode)
            raise GroupAnnotationError(
                f"annotation {MODE_ANNOTATION}: expected {choices}, got {raw_mode!r:.60}"
            ) from None
    return Membership(f"{task.namespace}/{name}", mode)


def membership_or_none(task: TaskInfo) -> Membership | None:
    """The pod's group, or None also when its annotations are bad (for pods already placed)."""
    try:
        return read_membership(task)
    except GroupAnnotationError:
        return None


@attrs.frozen(slots=True)
class NodePeers:
    """The group's placed pods on one node and the NUMA nodes their pinned resources hold."""

    count: int
    # Every NUMA node one of them pins something on.
    numa: NumaMask
    # The NUMA nodes all of those that pin something hold (empty when none pins, or they share none).
    core: NumaMask


def peers_by_node(members: Mapping[str, TaskInfo]) -> dict[str, NodePeers]:
    """Where the group's placed pods are, per node name."""
    counts: dict[str, int] = {}
    masks: dict[str, NumaMask] = {}
    cores: dict[str, NumaMask] = {}
    for task in members.values():
        if task.status not in _PLACED or not task.node_name:
            continue
        node_name = task.node_name
        counts[node_name] = counts.get(node_name, 0) + 1
        numa = task.allocation.numa() if task.allocation is not None else NumaMask()
        if numa.is_empty():
            continue
        masks[node_name] = masks.get(node_name, NumaMask()) | numa
        core = cores.get(node_name)
        cores[node_name] = numa if core is None else core & numa
    return {
        node_name: NodePeers(count, masks.get(node_name, NumaMask()), cores.get(node_name, NumaMask()))
        for node_name, count in counts.items()
    }


def anchor_of(peers: Mapping[str, NodePeers]) -> str:
    """The node a required pod must join: the one with most peers, ties to the smallest name;
    "" when no peer is placed."""
    if not peers:
        return ""
    return min(peers, key=lambda node_name: (-peers[node_name].count, node_name))


def preferred_score(peers: Mapping[str, NodePeers], node_name: str, weight: int) -> float:
    """weight x 100 x the share of the group's placed pods on this node."""
    total = sum(entry.count for entry in peers.values())
    here = peers.get(node_name)
    if not total or here is None:
        return 0.0
    return weight * MAX_NODE_SCORE * here.count / total


@attrs.frozen(slots=True, eq=False)
class _View:
    """What the plugin reads for one pod at one version of the group index."""

    version: int
    membership: Membership
    peers: Mapping[str, NodePeers]
    anchor: str
    # The group's other pending pods of the pod's job when it is a gang (placed after it).
    companions: tuple[TaskInfo, ...]
    # The pod's and its companions' requests together.
    demand: Resource


_VIEW_KEY = "numa-affinity-group/view"


class NumaAffinityGroupPlugin:
    def __init__(self, arguments: Arguments) -> None:
        self.weight = arguments.get_int(ARG_WEIGHT, 1)
        if self.weight < 0:
            raise arguments.invalid(ARG_WEIGHT, f"expected a non-negative integer, got {self.weight}")
        self._session: Session | None = None
        # Group -> its pods in this session (any status), by uid.
        self._members: dict[str, dict[str, TaskInfo]] = {}
        # Moves on every placement or removal of a group's pod in this session.
        self._version = 0
        self._peers: dict[str, tuple[int, dict[str, NodePeers]]] = {}

    @property
    def name(self) -> str:
        return PLUGIN_NAME

    def on_session_open(self, ssn: Session) -> None:
        from numasched.scheduler.framework.session import EventHandler

        self._session = ssn
        for job in ssn.jobs.values():
            for task in job.tasks.values():
                if GROUP_ANNOTATION not in task.annotations:
                    continue
                membership = membership_or_none(task)
                if membership is not None:
                    self._members.setdefault(membership.group, {})[task.uid] = task
        ssn.add_pre_predicate_fn(PLUGIN_NAME, self.pre_predicate)
        ssn.add_predicate_fn(PLUGIN_NAME, self.predicate)
        ssn.add_node_order_fn(PLUGIN_NAME, self.node_order)
        ssn.add_event_handler(EventHandler(allocate=self.on_change, deallocate=self.on_change))

    def on_session_close(self, ssn: Session) -> None:
        self._session = None
        self._members.clear()
        self._peers.clear()

    def equivalence_key(self, task: TaskInfo) -> Hashable:
        """The group, the mode, where the peers are and the gang's pending companions: pods of
        one group are equivalent only while their peers stay where they were (a peer's placement
        also moves its node's generation, but the verdict on every other node changes too)."""
        if GROUP_ANNOTATION not in task.annotations and MODE_ANNOTATION not in task.annotations:
            return None
        try:
            view = self._view(task)
        except GroupAnnotationError as error:
            return ("bad", str(error))
        if view is None:
            return None
        peers = tuple(sorted((name, entry.count, entry.numa.bits) for name, entry in view.peers.items()))
        return (view.membership, peers, tuple(companion.uid for companion in view.companions))

    # -- the pod's view --------------------------------------------------------------------------

    def _group_peers(self, group: str) -> dict[str, NodePeers]:
        cached = self._peers.get(group)
        if cached is not None and cached[0] == self._version:
            return cached[1]
        peers = peers_by_node(self._members.get(group, {}))
        self._peers[group] = (self._version, peers)
        return peers

    def _view(self, task: TaskInfo) -> _View | None:
        """The pod's group view (None: in no group); raises GroupAnnotationError. Kept in the
        pod's CycleState for as long as no group pod moves."""
        ssn = self._session
        state = ssn.cycle_state(task) if ssn is not None else None
        if state is not None:
            known: _View | None = state.get(_VIEW_KEY)
            if known is not None and known.version == self._version:
                return known
        membership = read_membership(task)
        if membership is None:
            return None
        peers = self._group_peers(membership.group)
        companions = self._companions(task, membership)
        demand = task.init_resreq.clone()
        for companion in companions:
            demand.add(companion.init_resreq)
        view = _View(self._version, membership, peers, anchor_of(peers), companions, demand)
        if state is not None:
            state.write(_VIEW_KEY, view)
        return view

    def _companions(self, task: TaskInfo, membership: Membership) -> tuple[TaskInfo, ...]:
        ssn = self._session
        job = ssn.jobs.get(task.job_id) if ssn is not None else None
        if ssn is None or job is None or job.min_available <= 1:
            return ()
        pending = [
            member
            for member in self._members.get(membership.group, {}).values()
            if member.job_id == task.job_id
            and member.uid != task.uid
            and member.status is TaskStatus.PENDING
            and not member.best_effort
        ]
        return tuple(ssn.sorted_tasks(pending))

    # -- extension points --------------------------------------------------------------------------

    def pre_predicate(self, task: TaskInfo) -> Status:
        """A bad annotation rules out every node: said once, naming the annotation."""
        try:
            self._view(task)
        except GroupAnnotationError as error:
            return Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, f"pod {task.key}: {error}", PLUGIN_NAME)
        return SUCCESS

    def predicate(self, task: TaskInfo, node: NodeInfo) -> Status:
        if GROUP_ANNOTATION not in task.annotations and MODE_ANNOTATION not in task.annotations:
            return SUCCESS
        try:
            view = self._view(task)
        except GroupAnnotationError as error:
            return Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, f"pod {task.key}: {error}", PLUGIN_NAME)
        if view is None or view.membership.mode is not AffinityMode.REQUIRED:
            return SUCCESS
        membership = view.membership
        if view.anchor and node.name != view.anchor:
            held = view.peers[view.anchor].numa
            where = f"NUMA node(s) {held.format()}" if not held.is_empty() else "no pinned NUMA node"
            return Status(
                StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE,
                f"{membership.label}: its placed pods are on node {view.anchor} ({where}); "
                "the pod may only join them there",
                PLUGIN_NAME,
            )
        if view.companions:
            missing = view.demand.insufficient_after(node.idle, node.releasing, node.pipelined)
            if missing:
                return Status.unschedulable(
                    f"{membership.label}: the pod and its {len(view.companions)} pending group peer(s) of the same "
                    f"job need {view.demand.describe()} on one node; Insufficient {', '.join(missing)}",
                    PLUGIN_NAME,
                )
        return SUCCESS

    def node_order(self, task: TaskInfo, node: NodeInfo) -> float:
        if GROUP_ANNOTATION not in task.annotations:
            return 0.0
        view = self._view(task)
        if view is None:
            return 0.0
        return preferred_score(view.peers, node.name, self.weight)

    def numa_restriction(self, task: TaskInfo) -> NodeRestriction | None:
        """For numa-aware (restriction.py): per node, the NUMA nodes a required pod must keep to."""
        if GROUP_ANNOTATION not in task.annotations:
            return None
        try:
            view = self._view(task)
        except GroupAnnotationError:
            # The predicates refuse the pod everywhere; numa-aware need not check it anywhere.
            return None
        if view is None or view.membership.mode is not AffinityMode.REQUIRED:
            return None

        def on_node(node: NodeInfo) -> NumaRestriction | None:
            view = self._view(task)
            return None if view is None else restriction_on(view, node.name)

        return on_node

    def on_change(self, event: Event) -> None:
        """A pod was placed, released or rolled back: if it is in a group, every view of that
        group is stale, and so is the equivalence class of its members."""
        task = event.task
        if GROUP_ANNOTATION not in task.annotations:
            return
        membership = membership_or_none(task)
        if membership is None:
            return
        self._version += 1
        members = self._members.setdefault(membership.group, {})
        members.setdefault(task.uid, task)
        ssn = self._session
        if ssn is not None:
            for uid in members:
                ssn.forget_equivalence_class(uid)


def restriction_on(view: _View, node_name: str) -> NumaRestriction | None:
    """What numa-aware must check of a required pod's placement on this node (None: nothing)."""
    if view.anchor and node_name != view.anchor:
        # The predicate refuses this node.
        return None
    here = view.peers.get(node_name)
    allowed = here.numa if here is not None else NumaMask()
    if allowed.is_empty() and not view.companions:
        return None
    core = here.core if here is not None else NumaMask()
    return NumaRestriction(allowed, view.companions, view.membership.label, core)


def build(arguments: Arguments) -> NumaAffinityGroupPlugin:
    return NumaAffinityGroupPlugin(arguments)
