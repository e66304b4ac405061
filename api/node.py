"""A node's accounting: allocatable, idle, used, releasing and pipelined resources, its tasks, and
the CPUs, devices and per-NUMA memory already assigned on it.

The reading rule for what is free (docs/topology.md): an id is available only if it exists in the
node's topology, is healthy, lies in what the topology source states is available
(NumaTopology.available_cpus / available_devices, when stated), and no pod holds it according to
our ledger (NumaUsage: decision annotations, overridden by the node's reported allocations).
Pods that hold pinned CPUs or devices whose ids no source gives are "unknown holders": their
counts are kept apart (NodeInfo.unknown_holders), since they could sit on any id that looks free.

Freshness: every change to a node (a task added or removed, its NUMA ledger, unknown holders,
topology) gives it a new `generation`, a number no other node state has had. Whatever is derived
from a node (a predicate's answer, a score, an admission) is valid while the generation is the one
it was derived at; the snapshot keeps the cache's generations, so this holds across cycles.
"""

from __future__ import annotations

import itertools
import math
import operator
from collections.abc import Mapping
from typing import TYPE_CHECKING

import attrs

from numasched.api.allocation import PodAllocation
from numasched.api.idset import IdSet
from numasched.api.resource import Resource
from numasched.api.task import QosClass, TaskInfo, TaskStatus, pod_whole_cpus
from numasched.api.topology import CpuManagerPolicy, NumaTopology

if TYPE_CHECKING:
    # Types only: api.dra, which the claims module reads, imports api.task.
    from numasched.api.dra_claims import NodeDra

# The source of node generations: one counter for every NodeInfo, so two node states never share
# a number (a session's copy and the cache's node may both change after the snapshot). Only
# next_generation reads it; it holds no state anyone depends on but uniqueness.
_GENERATIONS = itertools.count(1)


def next_generation() -> int:
    return next(_GENERATIONS)


# A task that holds its resources on the node, whichever step of binding it is at: the node is
# the same to everything derived from it (the statement's commit moves Allocated to Binding
# without touching the node; Volcano's AllocatedStatus groups the same four).
HOLDING_STATUSES = frozenset({TaskStatus.ALLOCATED, TaskStatus.BINDING, TaskStatus.BOUND, TaskStatus.RUNNING})
# Every TaskInfo field but its status, as one tuple.
_task_fields_but_status = operator.attrgetter(
    *(field.name for field in attrs.fields(TaskInfo) if field.name != "status")
)


def _same_task(first: TaskInfo, second: TaskInfo) -> bool:
    """Equal tasks, the status compared only as holding or not where both hold (HOLDING_STATUSES)."""
    if first.status is not second.status and not (
        first.status in HOLDING_STATUSES and second.status in HOLDING_STATUSES
    ):
        return False
    return _task_fields_but_status(first) == _task_fields_but_status(second)


@attrs.frozen(slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = ""


@attrs.define(slots=True)
class NumaUsage:
    """What the tasks on a node hold of its topology: exclusive CPUs, device ids, NUMA memory."""

    cpus: IdSet = attrs.field(factory=IdSet)
    devices: dict[str, frozenset[str]] = attrs.field(factory=dict)
    memory: dict[str, dict[int, int]] = attrs.field(factory=dict)

    def add(self, allocation: PodAllocation) -> None:
        self.cpus = self.cpus | allocation.cpus()
        for container in allocation.containers:
            for resource, ids in container.devices.items():
                self.devices[resource] = self.devices.get(resource, frozenset()) | frozenset(ids)
            for resource, per_numa in container.memory.items():
                used = self.memory.setdefault(resource, {})
                for numa, size in per_numa.items():
                    used[numa] = used.get(numa, 0) + size

    def remove(self, allocation: PodAllocation) -> None:
        self.cpus = self.cpus - allocation.cpus()
        for container in allocation.containers:
            for resource, ids in container.devices.items():
                self.devices[resource] = self.devices.get(resource, frozenset()) - frozenset(ids)
            for resource, per_numa in container.memory.items():
                used = self.memory.setdefault(resource, {})
                for numa, size in per_numa.items():
                    used[numa] = max(0, used.get(numa, 0) - size)

    def clone(self) -> NumaUsage:
        return NumaUsage(
            self.cpus,
            dict(self.devices),
            {resource: dict(per_numa) for resource, per_numa in self.memory.items()},
        )


def exclusive_cpus(task: TaskInfo) -> int:
    """CPUs a static CPU manager pins for the pod at most: Guaranteed QoS, containers with a whole
    CPU count; the larger of its init phase (sidecars plus the largest init container) and its
    steady state (app containers plus sidecars)."""
    if task.qos is not QosClass.GUARANTEED:
        return 0
    return pod_whole_cpus(task.containers)


def pinned_holdings(task: TaskInfo, topology: NumaTopology) -> dict[str, int]:
    """What a pod on this node holds by id, per resource: exclusive CPUs ("cpu") where the CPU
    manager is static, and whole devices of every resource the topology lists."""
    holdings: dict[str, int] = {}
    if topology.policies.cpu_manager_policy is CpuManagerPolicy.STATIC:
        cpus = exclusive_cpus(task)
        if cpus:
            holdings["cpu"] = cpus
    for resource in topology.devices:
        amount = task.init_resreq.scalars.get(resource, 0.0)
        if amount > 0:
            holdings[resource] = math.ceil(amount / 1000 - 1e-9)
    return holdings


def unknown_part(holdings: Mapping[str, int], allocation: PodAllocation | None) -> dict[str, int]:
    """Of what a pod holds, how much no known allocation names: per resource, the holding minus
    the ids its allocation gives (nothing is known without an allocation)."""
    unknown: dict[str, int] = {}
    for resource, count in holdings.items():
        if allocation is None:
            known = 0
        elif resource == "cpu":
            known = len(allocation.cpus())
        else:
            known = len(allocation.devices(resource))
        if count > known:
            unknown[resource] = count - known
    return unknown


@attrs.frozen(slots=True)
class UnknownHolder:
    """A pod on the node that holds pinned CPUs or devices whose ids no source reports.

    holdings: per resource ("cpu" or a device resource name), how many ids it holds that nobody
    can name; they may be any of the ids that look free.
    """

    pod: str  # namespace/name, for messages
    holdings: Mapping[str, int]


@attrs.frozen(slots=True)
class NumaStep:
    """A node's last NUMA ledger change, when it was one allocation added and nothing else: the
    state numbered `after` (numa_generation) is the state numbered `before` with `added` held.
    A reader that kept what it derived from `before` (free resources) can derive `after` from it
    and `added` instead of reading every task of the node again."""

    before: int
    after: int
    added: PodAllocation


@attrs.define(slots=True)
class NodeInfo:
    name: str
    allocatable: Resource = attrs.field(factory=Resource)
    capacity: Resource = attrs.field(factory=Resource)
    idle: Resource = attrs.field(factory=Resource)
    used: Resource = attrs.field(factory=Resource)
    releasing: Resource = attrs.field(factory=Resource)
    pipelined: Resource = attrs.field(factory=Resource)
    max_pods: int = 110
    labels: dict[str, str] = attrs.field(factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    tasks: dict[str, TaskInfo] = attrs.field(factory=dict)
    topology: NumaTopology | None = None
    # Why the topology object could not be used; the node then has no NUMA awareness.
    topology_error: str = ""
    numa_usage: NumaUsage = attrs.field(factory=NumaUsage)
    # By task uid; a holder counts only while its task is on the node (tasks), so an eviction or a
    # roll back that removes and re-adds the task keeps it.
    unknown_holders: dict[str, UnknownHolder] = attrs.field(factory=dict)
    # This node state's number (next_generation); changed by every method that changes the node.
    # Code that changes a field directly must call touch().
    generation: int = attrs.field(factory=next_generation)
    # The number of what NUMA admission reads of the node (free_resources: the topology, the NUMA
    # ledger, unknown holders, DRA); it stays when only tasks that hold no ids come or go, which
    # changes the generation alone.
    numa_generation: int = attrs.field(factory=next_generation)
    # Where touch() reports the node (the session's touch log, a list it reads): readers of many
    # nodes' generations then read only the nodes reported since, not every node. Not copied by
    # clone.
    touch_log: list[NodeInfo] | None = attrs.field(default=None, eq=False, repr=False)
    # The DRA devices the node's ResourceSlices offer and those allocated to claims (None: none).
    dra: NodeDra | None = None
    # How numa_generation was reached, when by one allocation added (replace_allocation); None
    # after any other change. Not copied by clone.
    numa_step: NumaStep | None = attrs.field(default=None, eq=False, repr=False)

    def same_state(self, other: NodeInfo) -> bool:
        """Whether the two nodes are in one state: every field equal but those that only number or
        report it (_NOT_STATE), the topology and DRA view the very same objects, the tasks equal
        but for the step of binding they are at (_same_task); so whatever was derived from one
        holds for the other. A field added to NodeInfo takes part unless named in _NOT_STATE."""
        for name in _STATE_FIELDS:
            mine, theirs = getattr(self, name), getattr(other, name)
            if name in _SAME_OBJECTS:
                if mine is not theirs:
                    return False
            elif name == "tasks":
                if mine.keys() != theirs.keys() or not all(_same_task(task, theirs[uid]) for uid, task in mine.items()):
                    return False
            elif mine != theirs:
                return False
        return True

    def touch(self) -> None:
        """Mark the node changed: what was derived from its previous state is stale."""
        self.numa_generation = next_generation()
        self.numa_step = None
        self._touch_tasks()

    def _touch_tasks(self) -> None:
        """Mark the node changed in what it holds but not in its NUMA ledger (numa_generation)."""
        self.generation = next_generation()
        log = self.touch_log
        # A node changed twice in a row is listed once (a placement adds the task, then its ids):
        # readers of the log read its last entry again each time (NodeIndex.generations).
        if log is not None and (not log or log[-1] is not self):
            log.append(self)

    def _touched_by(self, task: TaskInfo) -> None:
        """A task came or went: the NUMA ledger's number changes too unless the task holds no ids
        (no allocation in the ledger, not an unknown holder), which free_resources cannot see."""
        if task.allocation is None and task.uid not in self.unknown_holders:
            self._touch_tasks()
        else:
            self.touch()

    @classmethod
    def create(cls, name: str, allocatable: Resource, capacity: Resource | None = None) -> NodeInfo:
        return cls(
            name=name,
            allocatable=allocatable.clone(),
            capacity=(capacity or allocatable).clone(),
            idle=allocatable.clone(),
        )

    def future_idle(self) -> Resource:
        """What will be free once releasing tasks are gone and pipelined ones have arrived."""
        return self.idle.clone().add(self.releasing).sub(self.pipelined)

    def free_cpus(self) -> IdSet:
        """CPUs the static CPU manager could still hand out exclusively: not reserved, stated
        available by the source when it says, and held by no pod of our ledger."""
        topology = self.topology
        if topology is None:
            return IdSet()
        cpus = topology.allocatable_cpus
        if topology.available_cpus is not None:
            cpus = cpus & topology.available_cpus
        return cpus - self.numa_usage.cpus

    def free_devices(self, resource: str) -> tuple[str, ...]:
        """Healthy device ids of one resource that the source states available (when it says)
        and no pod of our ledger holds, in the topology's order."""
        topology = self.topology
        if topology is None or resource not in topology.devices:
            return ()
        used = self.numa_usage.devices.get(resource, frozenset())
        available = topology.available_devices.get(resource)
        return tuple(
            device.id
            for device in topology.devices[resource].devices
            if device.healthy and device.id not in used and (available is None or device.id in available)
        )

    def set_unknown_holder(self, task_uid: str, holder: UnknownHolder | None) -> None:
        """Record (or, with None, forget) what a task holds whose ids nobody knows."""
        if holder is None or not any(holder.holdings.values()):
            if self.unknown_holders.pop(task_uid, None) is not None:
                self.touch()
            return
        self.unknown_holders[task_uid] = holder
        self.touch()

    def set_topology(self, topology: NumaTopology | None, error: str) -> None:
        """Use this topology (or none, and why) for the node."""
        if topology is not self.topology or error != self.topology_error:
            self.topology = topology
            self.topology_error = error
            self.touch()

    def replace_allocation(self, held: PodAllocation | None, decided: PodAllocation | None) -> None:
        """A task on the node now holds `decided` (its allocation) instead of `held` in the NUMA
        ledger."""
        if held is decided:
            return
        before = self.numa_generation
        if held is not None:
            self.numa_usage.remove(held)
        if decided is not None:
            self.numa_usage.add(decided)
        self.touch()
        if held is None and decided is not None:
            self.numa_step = NumaStep(before, self.numa_generation, decided)

    def unknown_holdings(self) -> dict[str, tuple[int, tuple[str, ...]]]:
        """Per resource: how many ids are held by pods whose ids are unknown, and those pods."""
        result: dict[str, tuple[int, tuple[str, ...]]] = {}
        for uid, holder in self.unknown_holders.items():
            if uid not in self.tasks:
                continue
            for resource, count in holder.holdings.items():
                if count <= 0:
                    continue
                total, pods = result.get(resource, (0, ()))
                result[resource] = (total + count, (*pods, holder.pod))
        return result

    def add_task(self, task: TaskInfo) -> None:
        """Account a task on this node (Volcano's NodeInfo.AddTask)."""
        if task.uid in self.tasks:
            raise ValueError(f"task {task.key} is already on node {self.name}")
        if task.status is TaskStatus.RELEASING:
            self.releasing.add(task.resreq)
            self.idle.sub(task.resreq)
        elif task.status is TaskStatus.PIPELINED:
            self.pipelined.add(task.resreq)
        else:
            self.idle.sub(task.resreq)
        self.used.add(task.resreq)
        if task.allocation is not None:
            self.numa_usage.add(task.allocation)
        self.tasks[task.uid] = task
        self._touched_by(task)

    def remove_task(self, task: TaskInfo) -> None:
        stored = self.tasks.pop(task.uid, None)
        if stored is None:
            return
        if stored.status is TaskStatus.RELEASING:
            self.releasing.sub(stored.resreq)
            self.idle.add(stored.resreq)
        elif stored.status is TaskStatus.PIPELINED:
            self.pipelined.sub(stored.resreq)
        else:
            self.idle.add(stored.resreq)
        self.used.sub(stored.resreq)
        if stored.allocation is not None:
            self.numa_usage.remove(stored.allocation)
        self._touched_by(stored)

    def update_task(self, task: TaskInfo) -> None:
        self.remove_task(task)
        self.add_task(task)

    def pod_count(self) -> int:
        return len(self.tasks)

    def clone(self) -> NodeInfo:
        return NodeInfo(
            name=self.name,
            allocatable=self.allocatable.clone(),
            capacity=self.capacity.clone(),
            idle=self.idle.clone(),
            used=self.used.clone(),
            releasing=self.releasing.clone(),
            pipelined=self.pipelined.clone(),
            max_pods=self.max_pods,
            labels=self.labels,
            taints=self.taints,
            unschedulable=self.unschedulable,
            ready=self.ready,
            tasks=dict(self.tasks),
            topology=self.topology,
            topology_error=self.topology_error,
            numa_usage=self.numa_usage.clone(),
            unknown_holders=dict(self.unknown_holders),
            generation=self.generation,
            numa_generation=self.numa_generation,
            dra=self.dra,
        )


# NodeInfo fields that number its state or report it, not part of it (same_state).
_NOT_STATE = frozenset({"generation", "numa_generation", "touch_log", "numa_step"})
# Fields compared by identity: what is derived from them is kept per object.
_SAME_OBJECTS = frozenset({"topology", "dra"})
# The fields same_state compares, the tasks (the costly part) last.
_STATE_FIELDS = tuple(
    sorted(
        (field.name for field in attrs.fields(NodeInfo) if field.name not in _NOT_STATE),
        key=lambda name: name == "tasks",
    )
)
