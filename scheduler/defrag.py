"""`numasched defrag`: plans of pod moves that free aligned blocks of a requested shape.

A block of a shape (`8xnvidia.com/gpu`; `4xnvidia.com/gpu,32xcpu`) is room for one pod asking for
exactly that, admitted on a node the way the scheduler admits it: the allocate action's resource
check, then the session's predicates (numa-aware's kubelet admission among them, so the node's
topology manager policy decides what "aligned" means there: one NUMA node under single-numa-node,
the fewest NUMA nodes that could hold it under restricted, ...). A node's free blocks are counted
by placing such pods on a copy of the node one after another, each with the ids the numa-aware
plugin would give it, until the next one no longer fits.

A move evicts a pod from its node; the pod must fit elsewhere (the same checks on a copy of the
destination, where it is then accounted with the ids it would get). Moves are chosen per target
node: the search enumerates the sets of movable pods on the node, smallest first (up to
`max_moves_per_node` pods and `SEARCH_BUDGET` sets per node, like the preemption's victim search),
and keeps per set size the one that frees the most blocks there and whose pods all find a
destination; the blocks a destination loses by taking a pod count against the set. Greedy strategies then pick one
target's set after another until nothing more is freed or the move budget is spent; every prefix
of every strategy's sequence is a plan considered, and the plan returned frees the most blocks
(at most the blocks asked for), with the fewest moves among those (then: fewest moves per block).

Which pods may move: pods of this scheduler, running or bound, owned by a controller that will
recreate them (not a DaemonSet, whose pod comes back on the same node; not a bare pod, which an
eviction deletes), not a member of a gang (PodGroup minMember above 1), not system-critical, of
priority at most `max_priority`, and only as many of the pods a PodDisruptionBudget covers as it
allows disruptions.

Nothing here changes the cluster or the cache: the plan works on copies of the session's nodes.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from numasched.api.disruption_budget import DisruptionBudget, budgets_of, computed_disruptions_allowed
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.task import TaskInfo, TaskStatus
from numasched.cache.cache import Cache
from numasched.cache.convert_pod import pod_to_task
from numasched.conf.model import SchedulerConfig
from numasched.plugins.conformance import is_critical
from numasched.plugins.numaaware.admission import Placement
from numasched.plugins.priority import effective_priority
from numasched.scheduler.framework.registry import Registry
from numasched.scheduler.framework.session import Session
from numasched.scheduler.framework.status import Status

NUMA_AWARE = "numa-aware"
# Sets of pods tried per target node before the search settles for what it found.
SEARCH_BUDGET = 256
# Blocks counted per node at most (a node holds few pods of a shape worth defragmenting for).
MAX_BLOCKS_PER_NODE = 64
# Priority classes that never move, whatever --max-priority says (kube-system pods never move either).
CRITICAL_PRIORITY = 2_000_000_000
MOVABLE_STATUSES = frozenset({TaskStatus.RUNNING, TaskStatus.BOUND})
FINISHED_STATUSES = frozenset({TaskStatus.SUCCEEDED, TaskStatus.FAILED})
_SHAPE_ITEM = re.compile(r"^\s*([0-9][0-9.]*[A-Za-z]*)\s*x\s*([A-Za-z0-9./_-]+)\s*$")
_PROBE_NAME = "defrag-probe"
# The memory a block with CPUs and no memory asks for (so the probe is Guaranteed): next to nothing.
PROBE_MEMORY = "1Mi"


class ShapeError(ValueError):
    """A --shape that cannot be read."""


@attrs.frozen(slots=True)
class Shape:
    """What one block holds: (resource, quantity text) pairs, in the order given."""

    text: str
    amounts: tuple[tuple[str, str], ...]

    @property
    def resources(self) -> tuple[str, ...]:
        return tuple(resource for resource, _ in self.amounts)


def parse_shape(text: str) -> Shape:
    """`8xnvidia.com/gpu`, `4xnvidia.com/gpu,32xcpu,64Gixmemory`: COUNTxRESOURCE, comma-separated."""
    from numasched.api.quantity import parse_quantity

    amounts: list[tuple[str, str]] = []
    for part in text.split(","):
        found = _SHAPE_ITEM.match(part)
        if found is None:
            raise ShapeError(f"--shape {text!r}: {part.strip()!r} is not COUNTxRESOURCE (e.g. 8xnvidia.com/gpu)")
        quantity, resource = found.group(1), found.group(2)
        try:
            value = parse_quantity(quantity)
        except ValueError as error:
            raise ShapeError(f"--shape {text!r}: {quantity!r} is not a quantity ({error})") from None
        if value <= 0:
            raise ShapeError(f"--shape {text!r}: {resource} must be more than 0")
        if resource in dict(amounts):
            raise ShapeError(f"--shape {text!r}: {resource} is given twice")
        amounts.append((resource, quantity))
    return Shape(text, tuple(amounts))


def probe_object(shape: Shape, scheduler_name: str, namespace: str = "default") -> dict[str, Any]:
    """A pod asking for exactly one block, in one container, requests equal to limits. CPUs in a
    shape are pinned CPUs: the pod must be Guaranteed for the static CPU manager to pin them (and
    the topology manager to align them), which takes a memory limit too, so a shape with CPUs and
    no memory asks for PROBE_MEMORY."""
    amounts = dict(shape.amounts)
    if "cpu" in amounts and "memory" not in amounts:
        amounts["memory"] = PROBE_MEMORY
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": _PROBE_NAME, "namespace": namespace, "uid": f"{_PROBE_NAME}-{shape.text}"},
        "spec": {
            "schedulerName": scheduler_name,
            "containers": [{"name": "main", "resources": {"requests": amounts, "limits": dict(amounts)}}],
        },
        "status": {"phase": "Pending"},
    }


@attrs.frozen(slots=True)
class Move:
    """Evict pod from node; the plan predicts the scheduler places it on destination."""

    pod: str
    uid: str
    node: str
    destination: str
    # The requests of the pod in the shape's resources, for the table ("nvidia.com/gpu=2").
    holds: str = ""


@attrs.frozen(slots=True)
class Step:
    """Moves that free blocks on one target node, and what they cost elsewhere."""

    target: str
    moves: tuple[Move, ...]
    # Blocks freed on the target, and lost on the destinations.
    gained: int
    lost: int
    nodes_after: tuple[NodeInfo, ...] = attrs.field(eq=False, repr=False)
    budgets_used: tuple[str, ...] = ()
    # (name, generation) of the destination nodes as the step found them: the step holds while
    # they are unchanged.
    destinations_seen: tuple[tuple[str, int], ...] = ()

    @property
    def freed(self) -> int:
        return self.gained - self.lost


@attrs.frozen(slots=True)
class PlanOption:
    """One plan considered: a strategy's first `steps` steps."""

    strategy: str
    steps: int
    moves: int
    freed: int


@attrs.frozen(slots=True)
class Plan:
    shape: str
    strategy: str
    steps: tuple[Step, ...]
    blocks_before: int
    blocks_after: int
    stranded_before: Mapping[str, int]
    stranded_after: Mapping[str, int]
    considered: tuple[PlanOption, ...]
    # Pods that hold some of the shape's resources and may not move, counted by why.
    kept: Mapping[str, int]

    @property
    def moves(self) -> tuple[Move, ...]:
        return tuple(move for step in self.steps for move in step.moves)

    @property
    def freed(self) -> int:
        return self.blocks_after - self.blocks_before


@attrs.frozen(slots=True)
class DefragOptions:
    max_priority: int = 0
    max_moves: int = 16
    max_moves_per_node: int = 8
    # Stop once this many blocks are freed (None: as many as can be).
    wanted_blocks: int | None = None


def place_copy(ssn: Session, task: TaskInfo, node: NodeInfo, uid: str) -> bool:
    """Place a pending copy of task (as uid) on node, which is changed, when the scheduler's checks
    pass there: the allocate action's resource check, then the session's predicates; the copy
    holds the CPUs and devices numa-aware would give it."""
    if task.init_resreq.insufficient_after(node.idle, Resource(), node.pipelined):
        return False
    if not ssn.predicate(task, node).passed:
        return False
    allocation = None
    place = getattr(ssn.plugins.get(NUMA_AWARE), "place", None)
    if node.topology is not None and place is not None:
        outcome: Placement | Status = place(task, node)
        if isinstance(outcome, Status) or not outcome.admitted:
            return False
        allocation = outcome.allocation
    placed = task.clone()
    placed.uid = uid
    placed.node_name = node.name
    placed.status = TaskStatus.ALLOCATED
    placed.allocation = allocation
    node.add_task(placed)
    return True


def pending_copy(task: TaskInfo) -> TaskInfo:
    """The task as if it waited for a node again (what its replacement will be)."""
    pending = task.clone()
    pending.status = TaskStatus.PENDING
    pending.node_name = ""
    pending.allocation = None
    return pending


def disruptions_left(budgets: Sequence[DisruptionBudget], tasks: Iterable[TaskInfo]) -> dict[str, int]:
    """Per budget key, the disruptions it allows now: status.disruptionsAllowed when the object has
    a status (the figure the Eviction API enforces), else what the disruption controller would
    write from the pods it matches, those not finished expected and the running ones healthy (a
    bound pod is not ready yet)."""
    listed = list(tasks)
    left: dict[str, int] = {}
    for budget in budgets:
        if budget.disruptions_allowed is not None:
            left[budget.key] = budget.disruptions_allowed
            continue
        matched = [task for task in listed if budget.matches(task.namespace, task.labels)]
        expected = sum(1 for task in matched if task.status not in FINISHED_STATUSES)
        healthy = sum(1 for task in matched if task.status is TaskStatus.RUNNING)
        left[budget.key] = computed_disruptions_allowed(budget, expected, healthy)
    return left


class Planner:
    """One shape's block counts and move search on one open session."""

    def __init__(
        self,
        ssn: Session,
        shape: Shape,
        scheduler_name: str,
        budgets: Sequence[DisruptionBudget],
        pod_objects: Callable[[str], Mapping[str, Any] | None],
        options: DefragOptions,
    ) -> None:
        self.ssn = ssn
        self.shape = shape
        self.options = options
        self.probe = pod_to_task(probe_object(shape, scheduler_name))
        self.budgets = tuple(budgets)
        self._pod_objects = pod_objects
        self._blocks: dict[tuple[str, int], int] = {}
        # A target's steps by (its name, its generation, the budgets left): reused while the
        # destinations they name are unchanged (the strategies and their steps share them).
        self._steps: dict[tuple[str, int, tuple[tuple[str, int], ...]], list[Step]] = {}
        tasks = [task for node in ssn.nodes.values() for task in node.tasks.values()]
        self.budget_left = disruptions_left(self.budgets, {task.uid: task for task in tasks}.values())

    # -- placing on node copies -------------------------------------------------------------

    def place(self, task: TaskInfo, node: NodeInfo, uid: str) -> bool:
        return place_copy(self.ssn, task, node, uid)

    def admits(self, task: TaskInfo, node: NodeInfo) -> bool:
        """The scheduler's checks pass for the task on the node (nothing placed)."""
        if task.init_resreq.insufficient_after(node.idle, Resource(), node.pipelined):
            return False
        return self.ssn.predicate(task, node).passed

    def blocks(self, node: NodeInfo) -> int:
        """Free blocks of the shape on the node as it is (memoised per node state)."""
        key = (node.name, node.generation)
        found = self._blocks.get(key)
        if found is not None:
            return found
        copy = node.clone()
        count = 0
        while count < MAX_BLOCKS_PER_NODE and self.place(self.probe, copy, f"{self.probe.uid}#{count}"):
            count += 1
        self._blocks[key] = count
        return count

    def stranded(self, nodes: Mapping[str, NodeInfo]) -> dict[str, int]:
        """Per device resource of the shape: free devices no free block can use."""
        per_block = dict(self.probe.init_resreq.scalars)
        result: dict[str, int] = {}
        for resource in self.shape.resources:
            if resource not in per_block or resource in ("cpu", "memory", "pods"):
                continue
            unused = 0
            for node in nodes.values():
                if node.topology is not None and resource in node.topology.devices:
                    free = len(node.free_devices(resource))
                else:
                    free = int(node.idle.scalars.get(resource, 0.0) // 1000)
                unused += max(0, free - self.blocks(node) * int(per_block[resource] // 1000))
            result[resource] = unused
        return result

    # -- which pods may move ----------------------------------------------------------------

    def holds_shape(self, task: TaskInfo) -> bool:
        request = task.resreq
        for resource in self.shape.resources:
            if resource == "cpu" and request.milli_cpu > 0:
                return True
            if resource == "memory" and request.memory > 0:
                return True
            if request.scalars.get(resource, 0.0) > 0:
                return True
        return False

    def kept_because(self, task: TaskInfo) -> str:
        """Why the pod may not move ("" when it may, budgets aside)."""
        if task.status not in MOVABLE_STATUSES:
            return f"not running ({task.status.name.lower()})"
        job = self.ssn.jobs.get(task.job_id)
        if job is None or task.uid not in job.tasks:
            return "not scheduled by this scheduler"
        if is_critical(task):
            return "system-critical"
        priority = effective_priority(task, self.ssn.snapshot.priority_classes)
        if priority >= CRITICAL_PRIORITY:
            return "system-critical"
        if priority > self.options.max_priority:
            return "priority above --max-priority"
        if job.min_available > 1:
            return "gang member (minMember above 1)"
        obj = self._pod_objects(task.uid)
        if obj is not None:
            metadata = obj.get("metadata") or {}
            annotations = metadata.get("annotations") or {}
            if isinstance(annotations, Mapping) and "kubernetes.io/config.mirror" in annotations:
                return "static pod"
            references = metadata.get("ownerReferences")
            owners = [
                owner
                for owner in (references if isinstance(references, list) else [])
                if isinstance(owner, Mapping) and owner.get("controller") is True
            ]
            if not owners:
                return "no controller (an eviction would delete it)"
            if any(owner.get("kind") == "DaemonSet" for owner in owners):
                return "DaemonSet pod"
        else:
            return "no controller (an eviction would delete it)"
        return ""

    def movable_on(self, node: NodeInfo, moved: set[str]) -> list[TaskInfo]:
        found = [
            task
            for task in node.tasks.values()
            if task.uid not in moved and self.holds_shape(task) and not self.kept_because(task)
        ]
        return sorted(found, key=lambda task: (-_weight(task, self.shape), task.key))

    def kept(self, nodes: Mapping[str, NodeInfo]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for node in nodes.values():
            for task in node.tasks.values():
                if not self.holds_shape(task):
                    continue
                why = self.kept_because(task)
                if why:
                    counts[why] = counts.get(why, 0) + 1
        return dict(sorted(counts.items()))

    # -- the search ---------------------------------------------------------------------------

    def _relocate(
        self, tasks: Sequence[TaskInfo], target: str, nodes: Mapping[str, NodeInfo]
    ) -> tuple[list[Move], dict[str, NodeInfo], int] | None:
        """A destination for every task (not the target), each where it costs the fewest blocks,
        then where it leaves the least of the shape's resources free (best fit), then by name."""
        changed: dict[str, NodeInfo] = {}
        moves: list[Move] = []
        lost = 0
        for task in tasks:
            pending = pending_copy(task)
            request = _free_of(task.resreq, self.shape)
            # Best fit first: the node left with the least of the shape's resources free. The first
            # that admits the pod and loses no block there is the choice; ones that would lose
            # blocks are kept in case none loses nothing.
            order = sorted(
                (_free_of(changed.get(name, node).idle, self.shape) - request, name)
                for name, node in nodes.items()
                if name != target
            )
            chosen: tuple[tuple[int, float, str], NodeInfo] | None = None
            for free_after, name in order:
                current = changed.get(name, nodes[name])
                if not self.admits(pending, current):
                    continue
                trial = current.clone()
                if not self.place(pending, trial, task.uid):
                    continue
                cost = self.blocks(current) - self.blocks(trial) if self.blocks(current) else 0
                rank = (cost, free_after, name)
                if chosen is None or rank < chosen[0]:
                    chosen = (rank, trial)
                if cost == 0:
                    break
            if chosen is None:
                return None
            (cost, _, name), trial = chosen
            changed[name] = trial
            lost += cost
            moves.append(Move(task.key, task.uid, task.node_name, name, _holding(task, self.shape)))
        return moves, changed, lost

    def cached_steps(
        self, target: NodeInfo, nodes: Mapping[str, NodeInfo], moved: set[str], budget_left: Mapping[str, int]
    ) -> list[Step]:
        """steps_for, computed again only when the target, the budgets left or a destination a
        step relies on changed. (A node that changed elsewhere may now offer a better destination;
        the steps kept still hold, which is what the plan's promise rests on.)"""
        key = (target.name, target.generation, tuple(sorted(budget_left.items())))
        steps = self._steps.get(key)
        if steps is not None and all(
            name in nodes and nodes[name].generation == generation
            for step in steps
            for name, generation in step.destinations_seen
        ):
            return steps
        steps = self.steps_for(target, nodes, moved, budget_left)
        self._steps[key] = steps
        return steps

    def steps_for(
        self, target: NodeInfo, nodes: Mapping[str, NodeInfo], moved: set[str], budget_left: Mapping[str, int]
    ) -> list[Step]:
        """Per set size (1 to max_moves_per_node), the set of movable pods on target whose departure
        frees the most blocks there and whose pods all find a destination: the sets of a size are
        tried by blocks freed, most first, until one relocates. Sets are enumerated smallest first
        within SEARCH_BUDGET; a size that frees no more than a smaller one already does is skipped
        (more moves, no more blocks)."""
        candidates = self.movable_on(target, moved)[: max(0, self.options.max_moves_per_node) * 2]
        if not candidates:
            return []
        before = self.blocks(target)
        emptied = target.clone()
        for task in candidates:
            emptied.remove_task(task)
        if self.blocks(emptied) <= before:
            return []
        found: list[Step] = []
        best_gain = 0
        tried = 0
        for size in range(1, min(len(candidates), self.options.max_moves_per_node) + 1):
            gains: list[tuple[int, int, tuple[TaskInfo, ...], NodeInfo, list[str]]] = []
            for order, subset in enumerate(itertools.combinations(candidates, size)):
                if tried >= SEARCH_BUDGET:
                    break
                tried += 1
                used = [
                    budget.key for task in subset for budget in budgets_of(self.budgets, task.namespace, task.labels)
                ]
                if any(used.count(key) > budget_left.get(key, 0) for key in set(used)):
                    continue
                after = target.clone()
                for task in subset:
                    after.remove_task(task)
                gained = self.blocks(after) - before
                if gained > best_gain:
                    gains.append((gained, order, subset, after, used))
            for gained, _, subset, after, used in sorted(gains, key=lambda entry: (-entry[0], entry[1])):
                relocated = self._relocate(subset, target.name, nodes)
                if relocated is None:
                    continue
                moves, changed, lost = relocated
                if gained - lost <= 0:
                    continue
                seen = tuple((name, nodes[name].generation) for name in changed)
                found.append(
                    Step(target.name, tuple(moves), gained, lost, (after, *changed.values()), tuple(used), seen)
                )
                best_gain = max(best_gain, gained)
                break
            if tried >= SEARCH_BUDGET:
                break
        return found


def _weight(task: TaskInfo, shape: Shape) -> float:
    """How much of the shape's resources the pod holds, devices first (for the search order)."""
    request = task.resreq
    devices = sum(request.scalars.get(resource, 0.0) for resource in shape.resources)
    return devices * 1e6 + request.milli_cpu


def _free_of(idle: Resource, shape: Shape) -> float:
    """The shape's resources in an amount (idle, or a request), in one weighted number (best fit)."""
    total = 0.0
    for resource in shape.resources:
        if resource == "cpu":
            total += idle.milli_cpu
        elif resource == "memory":
            total += idle.memory / 2**20
        else:
            total += idle.scalars.get(resource, 0.0) * 1e3
    return total


def _holding(task: TaskInfo, shape: Shape) -> str:
    request = task.resreq
    parts: list[str] = []
    for resource in shape.resources:
        if resource == "cpu":
            amount = request.milli_cpu / 1000
        elif resource == "memory":
            amount = request.memory / 2**30
            if amount:
                parts.append(f"memory={amount:g}Gi")
            continue
        else:
            amount = request.scalars.get(resource, 0.0) / 1000
        if amount:
            parts.append(f"{resource}={amount:g}")
    return ",".join(parts)


Ranking = Callable[[Step], tuple[float | int | str, ...]]

# The greedy strategies: which step to take next. Every one is tried; their plans are compared.
STRATEGIES: dict[str, Ranking] = {
    "fewest-moves-per-block": lambda step: (len(step.moves) / step.freed, -step.freed, step.target),
    "fewest-moves": lambda step: (len(step.moves), -step.freed, step.target),
    "most-blocks": lambda step: (-step.freed, len(step.moves), step.target),
}


def greedy(planner: Planner, nodes: Mapping[str, NodeInfo], rank: Ranking) -> list[tuple[Step, dict[str, NodeInfo]]]:
    """Steps taken one after another, each the best by rank among every target's steps on the
    state the previous ones left; with the state after each."""
    state = dict(nodes)
    moved: set[str] = set()
    budget_left = dict(planner.budget_left)
    taken: list[tuple[Step, dict[str, NodeInfo]]] = []
    moves = freed = 0
    options = planner.options
    while moves < options.max_moves and (options.wanted_blocks is None or freed < options.wanted_blocks):
        steps = [
            step
            for name in sorted(state)
            for step in planner.cached_steps(state[name], state, moved, budget_left)
            if moves + len(step.moves) <= options.max_moves
        ]
        if not steps:
            break
        step = min(steps, key=rank)
        state = dict(state)
        for node in step.nodes_after:
            state[node.name] = node
        for move in step.moves:
            moved.add(move.uid)
        for key in step.budgets_used:
            budget_left[key] = budget_left.get(key, 0) - 1
        moves += len(step.moves)
        freed += step.freed
        taken.append((step, state))
    return taken


def _choice_key(option: PlanOption, wanted: int | None) -> tuple[int, int, float, int]:
    freed = option.freed if wanted is None else min(option.freed, wanted)
    per_block = option.moves / option.freed if option.freed > 0 else 0.0
    return (-freed, option.moves, per_block, list(STRATEGIES).index(option.strategy))


def plan_defrag(planner: Planner) -> Plan:
    """Every strategy's greedy sequence; every prefix of each is a plan considered. The plan that
    frees the most blocks (up to those wanted), with the fewest moves, wins."""
    nodes = dict(planner.ssn.nodes)
    before = sum(planner.blocks(node) for node in nodes.values())
    options: list[PlanOption] = [PlanOption("none", 0, 0, 0)]
    sequences: dict[str, list[tuple[Step, dict[str, NodeInfo]]]] = {}
    for name, rank in STRATEGIES.items():
        taken = greedy(planner, nodes, rank)
        sequences[name] = taken
        moves = freed = 0
        for index, (step, _) in enumerate(taken, start=1):
            moves += len(step.moves)
            freed += step.freed
            options.append(PlanOption(name, index, moves, freed))
    chosen = min(options[1:], key=lambda option: _choice_key(option, planner.options.wanted_blocks), default=None)
    if chosen is None or chosen.freed <= 0:
        steps: tuple[Step, ...] = ()
        final = nodes
        strategy = "none"
    else:
        taken = sequences[chosen.strategy][: chosen.steps]
        steps = tuple(step for step, _ in taken)
        final = taken[-1][1]
        strategy = chosen.strategy
    return Plan(
        shape=planner.shape.text,
        strategy=strategy,
        steps=steps,
        blocks_before=before,
        blocks_after=sum(planner.blocks(node) for node in final.values()),
        stranded_before=planner.stranded(nodes),
        stranded_after=planner.stranded(final),
        considered=tuple(options),
        kept=planner.kept(nodes),
    )


def defrag_in_cache(
    cache: Cache,
    config: SchedulerConfig,
    registry: Registry,
    shape: Shape,
    *,
    scheduler_name: str,
    budgets: Sequence[DisruptionBudget] = (),
    options: DefragOptions = DefragOptions(),
) -> Plan:
    """Open a session on a snapshot of the cache as a cycle does and plan for one shape."""
    ssn = Session(cache.snapshot(), config, registry)
    ssn.open()
    try:
        planner = Planner(ssn, shape, scheduler_name, budgets, cache.pod_object, options)
        return plan_defrag(planner)
    finally:
        ssn.close()


def plan_json(plans: Sequence[Plan]) -> dict[str, Any]:
    """The document `--output json|yaml` prints: one entry per shape."""
    return {
        "apiVersion": "numasched.io/v1alpha1",
        "kind": "DefragPlan",
        "plans": [
            {
                "shape": plan.shape,
                "strategy": plan.strategy,
                "blocksBefore": plan.blocks_before,
                "blocksAfter": plan.blocks_after,
                "blocksFreed": plan.freed,
                "strandedBefore": dict(plan.stranded_before),
                "strandedAfter": dict(plan.stranded_after),
                "moves": [
                    {
                        "step": index,
                        "pod": move.pod,
                        "uid": move.uid,
                        "from": move.node,
                        "to": move.destination,
                        "holds": move.holds,
                        "target": step.target,
                    }
                    for index, (step, move) in enumerate(
                        ((step, move) for step in plan.steps for move in step.moves), start=1
                    )
                ],
                "targets": [
                    {"node": step.target, "blocksFreed": step.gained, "blocksLostElsewhere": step.lost}
                    for step in plan.steps
                ],
                "considered": [
                    {"strategy": option.strategy, "steps": option.steps, "moves": option.moves, "freed": option.freed}
                    for option in plan.considered
                ],
                "kept": dict(plan.kept),
            }
            for plan in plans
        ],
    }
