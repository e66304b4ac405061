"""One scheduling session: the plugins' extension functions over a snapshot, walked by tier.

Volcano's rules: tiers are walked in order and each plugin's enable* flag gates each point; a
point a plugin did not register is skipped. How the answers combine differs per point and is
spelled out on each evaluation method.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import attrs
import numpy as np
import structlog

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.snapshot import ClusterSnapshot, QueueInfo
from numasched.api.task import TaskInfo, TaskStatus
from numasched.conf.model import SchedulerConfig
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.cycle_state import CycleState
from numasched.scheduler.framework.equivalence import (
    CandidateParts,
    Candidates,
    EquivalenceMemo,
    Floats,
    Ints,
    NodeIndex,
    NodeSlots,
    Objects,
    PartAnswers,
    resource_key,
)
from numasched.scheduler.framework.plugin import DeclaresEquivalence, Plugin
from numasched.scheduler.framework.status import (
    SUCCESS,
    PluginFault,
    Status,
    ValidateResult,
    describe_exception,
    fit_error_summary,
)

if TYPE_CHECKING:
    from numasched.cache.binder import BindRequest
    from numasched.scheduler.framework.registry import Registry
    from numasched.scheduler.framework.statement import Eviction, Statement

_log = structlog.get_logger(__name__)

# Extension point names, as Volcano's configuration and the plugin error metric spell them.
POINT_PRE_PREDICATE = "prePredicate"
POINT_PREDICATE = "predicate"
POINT_NODE_ORDER = "nodeOrder"
POINT_BATCH_NODE_ORDER = "batchNodeOrder"
POINT_BEST_NODE = "bestNode"
POINT_JOB_ORDER = "jobOrder"
POINT_TASK_ORDER = "taskOrder"
POINT_JOB_READY = "jobReady"
POINT_JOB_PIPELINED = "jobPipelined"
POINT_JOB_VALID = "jobValid"
POINT_JOB_ENQUEUEABLE = "jobEnqueueable"
POINT_ALLOCATABLE = "allocatable"
POINT_PREEMPTABLE = "preemptable"
POINT_RECLAIMABLE = "reclaimable"
POINT_ALLOCATE_EVENT = "allocateEvent"
POINT_DEALLOCATE_EVENT = "deallocateEvent"
POINT_SESSION_OPEN = "onSessionOpen"
POINT_SESSION_CLOSE = "onSessionClose"
POINT_EQUIVALENCE = "equivalenceKey"

PredicateFn = Callable[[TaskInfo, NodeInfo], Status]
PrePredicateFn = Callable[[TaskInfo], Status]
NodeOrderFn = Callable[[TaskInfo, NodeInfo], float]
# Scores by node name, or an array of scores in the nodes' order.
BatchNodeOrderFn = Callable[[TaskInfo, list[NodeInfo]], "dict[str, float] | Floats"]
# A batch score split in two: what it needs of each node (memoised like a node-order score, per
# pod class and node generation) and the scores it makes of those parts over the candidates.
ScorePartFn = Callable[[TaskInfo, NodeInfo], object]
CombineFn = Callable[[TaskInfo, Sequence[NodeInfo], Mapping[str, object]], dict[str, float]]
BestNodeFn = Callable[[TaskInfo, dict[float, list[NodeInfo]]], NodeInfo | None]
JobOrderFn = Callable[[JobInfo, JobInfo], int]
TaskOrderFn = Callable[[TaskInfo, TaskInfo], int]
JobReadyFn = Callable[[JobInfo], bool]
# Votes: 1 permits, -1 rejects, 0 abstains.
JobVoteFn = Callable[[JobInfo], int]
JobValidFn = Callable[[JobInfo], ValidateResult | None]
AllocatableFn = Callable[[QueueInfo, TaskInfo], bool]
# Given the task that wants room and the candidates, the candidates this plugin lets go, and a vote
# (0 abstains) as in Volcano's preemptable / reclaimable functions.
EvictableFn = Callable[[TaskInfo, Sequence[TaskInfo]], tuple[list[TaskInfo], int]]

_Fn = TypeVar("_Fn")

PERMIT = 1
ABSTAIN = 0
REJECT = -1

# Extension points whose answers have no enable* flag in Volcano.
_UNGATED = "always"


@attrs.frozen(slots=True)
class Event:
    task: TaskInfo
    node: NodeInfo


@attrs.frozen(slots=True)
class EventHandler:
    allocate: Callable[[Event], None] | None = None
    deallocate: Callable[[Event], None] | None = None


# The same combination as arrays over the candidates: the parts, the number the plugin reads of
# each (PartNumberFn, kept with the part) and the scores in the candidates' order.
PartNumberFn = Callable[[object], float]
CombineNumbersFn = Callable[[TaskInfo, Candidates, CandidateParts, Floats], Floats]


class ScoreParts:
    """A batch node-order function made of a per-node part and a combination (add_score_parts)."""

    __slots__ = ("combine", "combine_numbers", "number", "part")

    def __init__(
        self,
        part: ScorePartFn,
        combine: CombineFn,
        number: PartNumberFn | None = None,
        combine_numbers: CombineNumbersFn | None = None,
    ) -> None:
        self.part = part
        self.combine = combine
        self.number = number
        self.combine_numbers = combine_numbers if number is not None else None

    def __call__(self, task: TaskInfo, nodes: list[NodeInfo]) -> dict[str, float]:
        return self.combine(task, nodes, {node.name: self.part(task, node) for node in nodes})


@attrs.frozen(slots=True)
class JobUpdate:
    """A PodGroup phase or condition the session wants written back."""

    job: JobInfo
    phase: str
    message: str = ""


class PluginBuildError(RuntimeError):
    """A plugin that could not be built from its configuration."""


class PluginOpenError(RuntimeError):
    """A plugin raised while opening the session: its functions may be half registered and its
    state half built, so no decision of this session could be trusted; the cycle is dropped."""

    def __init__(self, fault: PluginFault) -> None:
        super().__init__(fault.message)
        self.fault = fault


def _never_stop() -> bool:
    return False


def _compare_by_creation(first: TaskInfo | JobInfo, second: TaskInfo | JobInfo) -> int:
    if first.creation_timestamp != second.creation_timestamp:
        return -1 if first.creation_timestamp < second.creation_timestamp else 1
    if first.uid != second.uid:
        return -1 if first.uid < second.uid else 1
    return 0


# Up to this many stale nodes, the parts are written to the table one by one: numpy's fancy
# indexing costs more than that many scalar writes (most pods find a node or two changed).
_FEW_STALE = 16


def _keep_parts(
    table: PartAnswers, fn: ScoreParts, task: TaskInfo, candidates: Candidates, stale: Ints, at: Ints
) -> None:
    """The plugin's parts (and numbers) of the stale candidates, asked node by node and kept in
    the table at their slots `at`, each with the generation it holds for. A part the plugin
    raised on is not kept (a part kept before it holds for its own node's generation)."""
    part, number = fn.part, fn.number
    stale_nodes = [candidates[position] for position in stale.tolist()]
    if len(stale_nodes) <= _FEW_STALE:
        parts, numbers, generation = table.parts, table.numbers, table.generation
        for slot, node in zip(at.tolist(), stale_nodes, strict=True):
            value = part(task, node)
            if number is not None:
                numbers[slot] = number(value)
            parts[slot] = value
            generation[slot] = node.generation
        return
    values = [part(task, node) for node in stale_nodes]
    table.parts[at] = np.fromiter(values, dtype=object, count=len(values))
    if number is not None:
        table.numbers[at] = np.fromiter(map(number, values), dtype=np.float64, count=len(values))
    table.generation[at] = [node.generation for node in stale_nodes]


class Session:
    def __init__(
        self,
        snapshot: ClusterSnapshot,
        config: SchedulerConfig,
        registry: Registry,
        *,
        should_stop: Callable[[], bool] = _never_stop,
        held_back: Mapping[str, str] | None = None,
    ) -> None:
        self.snapshot = snapshot
        self.config = config
        self.registry = registry
        self.nodes: dict[str, NodeInfo] = snapshot.nodes
        self.jobs: dict[str, JobInfo] = snapshot.jobs
        self.queues: dict[str, QueueInfo] = snapshot.queues
        self.plugins: dict[str, Plugin] = {}

        self._predicate_fns: dict[str, PredicateFn] = {}
        self._pre_predicate_fns: dict[str, PrePredicateFn] = {}
        self._node_order_fns: dict[str, NodeOrderFn] = {}
        self._batch_node_order_fns: dict[str, BatchNodeOrderFn] = {}
        self._best_node_fns: dict[str, BestNodeFn] = {}
        self._job_order_fns: dict[str, JobOrderFn] = {}
        self._task_order_fns: dict[str, TaskOrderFn] = {}
        self._job_ready_fns: dict[str, JobReadyFn] = {}
        self._job_pipelined_fns: dict[str, JobVoteFn] = {}
        self._job_valid_fns: dict[str, JobValidFn] = {}
        self._job_enqueueable_fns: dict[str, JobVoteFn] = {}
        self._allocatable_fns: dict[str, AllocatableFn] = {}
        self._preemptable_fns: dict[str, EvictableFn] = {}
        self._reclaimable_fns: dict[str, EvictableFn] = {}
        self.event_handlers: list[EventHandler] = []
        # The plugin that registered each event handler (same index), to name it in a fault.
        self.event_handler_plugins: list[str] = []
        # The plugin whose on_session_open is running, so registrations know their owner.
        self._opening = ""

        # Asked between jobs and between tasks: once it says yes, actions decide nothing more.
        self.should_stop = should_stop
        # Task uid -> why it sits this session out (backing off after plugin errors).
        self.held_back: Mapping[str, str] = held_back or {}
        # Plugin exceptions of this session: every distinct (plugin, point, subject) once.
        self.plugin_faults: dict[tuple[str, str, str], PluginFault] = {}
        # The first fault per task uid and per job uid: that task (or every task of that job)
        # fails this session with it.
        self.task_faults: dict[str, PluginFault] = {}
        self.job_faults: dict[str, PluginFault] = {}

        # task uid -> why the task did not fit, per node, as each scan recorded it (fit_errors).
        self._fit_error_records: dict[str, list[Mapping[str, Sequence[Status]]]] = {}
        # Where the next sampled predicate scan starts, as an index into the action's node order:
        # each scan goes on where the previous one stopped, so every node gets its turn.
        self.node_scan_offset = 0
        self.bind_requests: list[BindRequest] = []
        self.evictions: list[Eviction] = []
        # Statements of pipelined jobs: neither bound nor rolled back (Volcano keeps them).
        self.kept_statements: dict[str, list[Statement]] = {}
        self.job_updates: dict[str, JobUpdate] = {}
        # The memo of predicate and score answers per equivalence class (set by the allocate
        # action, which keeps it across sessions); None: every answer is computed.
        self.memo: EquivalenceMemo | None = None
        # Per pod class (and kind of scan), its last scan of every node if it found none; the
        # allocate action asks only the nodes changed since (actions/allocate.py).
        self.failed_scans: dict[Hashable, Any] = {}
        # Per task uid, its equivalence class this session (None: not memoised).
        self._classes: dict[str, Hashable | None] = {}
        # Plugins that answer per node and declare what of a pod they read; None until asked.
        self._equivalence_plugins: list[tuple[str, DeclaresEquivalence]] | None = None
        self._cycle_state = CycleState("")
        self._tiers_cache: dict[str, list[list[str]]] = {}
        # id of an action's node list -> its index (NodeIndex keeps the list alive).
        self._node_indexes: dict[int, NodeIndex] = {}
        # Every change to a node of this session, in order (NodeInfo.touch_log): node indexes read
        # only the nodes changed since they last looked. None when another session still reports
        # on these nodes; indexes then read every node.
        self._touch_log: list[NodeInfo] | None = self._own_touch_log(snapshot.nodes.values())
        # (point, id of the registration dict) -> its functions in tier order; cleared on registration.
        self._ordered_cache: dict[tuple[str, int], list[tuple[str, Any]]] = {}

    @staticmethod
    def _own_touch_log(nodes: Iterable[NodeInfo]) -> list[NodeInfo] | None:
        log: list[NodeInfo] = []
        owned: list[NodeInfo] = []
        for node in nodes:
            if node.touch_log is not None:
                # Another session's log: leave it and read generations node by node.
                for taken in owned:
                    taken.touch_log = None
                return None
            node.touch_log = log
            owned.append(node)
        return log

    # -- lifecycle -----------------------------------------------------------------------------

    def open(self) -> None:
        """Build every configured plugin and let it register its functions (tier order)."""
        for task in self.pending_tasks():
            task.fit_error = ""
        for tier in self.config.tiers:
            for option in tier.plugins:
                if option.name in self.plugins:
                    _log.warning("plugin configured twice, the first one is used", plugin=option.name)
                    continue
                builder = self.registry.plugin(option.name)
                try:
                    plugin = builder(Arguments(option.arguments, plugin=option.name))
                except (TypeError, ValueError, KeyError) as error:
                    raise PluginBuildError(f"plugin {option.name}: cannot be built: {error}") from error
                self.plugins[option.name] = plugin
                self._opening = option.name
                try:
                    plugin.on_session_open(self)
                except Exception as error:
                    raise PluginOpenError(self.record_fault(option.name, POINT_SESSION_OPEN, error)) from error
                finally:
                    self._opening = ""

    def close(self) -> None:
        """Let every plugin close; one that raises is recorded and the others still close."""
        for name, plugin in self.plugins.items():
            try:
                plugin.on_session_close(self)
            except Exception as error:
                self.record_fault(name, POINT_SESSION_CLOSE, error)

    def release(self) -> None:
        """Drop the plugins and what they registered once the session's results are read: plugins
        hold the session (and so the snapshot) and the session holds their functions, a cycle that
        only the collector's rare full collections would free, keeping each cycle's copy of the
        cluster alive meanwhile."""
        self.plugins.clear()
        for registered in (
            self._predicate_fns,
            self._pre_predicate_fns,
            self._node_order_fns,
            self._batch_node_order_fns,
            self._best_node_fns,
            self._job_order_fns,
            self._task_order_fns,
            self._job_ready_fns,
            self._job_pipelined_fns,
            self._job_valid_fns,
            self._job_enqueueable_fns,
            self._allocatable_fns,
            self._preemptable_fns,
            self._reclaimable_fns,
        ):
            registered.clear()
        self.event_handlers.clear()
        self._ordered_cache.clear()
        self._node_indexes.clear()
        if self._touch_log is not None:
            for node in self.nodes.values():
                if node.touch_log is self._touch_log:
                    node.touch_log = None
            self._touch_log = None
        self.kept_statements.clear()
        self.failed_scans.clear()
        self._cycle_state = CycleState("")
        self.memo = None

    def cycle_state(self, task: TaskInfo) -> CycleState:
        """The per-pod state of the task being decided: one per task, fresh for each new task."""
        state = self._cycle_state
        if state.task_uid != task.uid:
            state = self._cycle_state = CycleState(task.uid)
        return state

    def equivalence_class(self, task: TaskInfo) -> Hashable | None:
        """The task's class for the memo: every per-node plugin's key; None when there is no memo,
        when a plugin answering per node declares no key, or when one raised computing it."""
        if self.memo is None:
            return None
        uid = task.uid
        if uid in self._classes:
            return self._classes[uid]
        plugins = self._declaring_plugins()
        key: Hashable | None = None
        if plugins is not None:
            name = ""
            try:
                # The allocate action's own resource check reads the request.
                parts: list[Hashable] = [resource_key(task.init_resreq)]
                for name, plugin in plugins:  # noqa: B007 - named in the fault
                    part = plugin.equivalence_key(task)
                    # Hashed here, so a key that cannot be is this plugin's fault.
                    hash(part)
                    parts.append(part)
                key = self.memo.class_key(tuple(parts))
            except Exception as error:
                self.record_fault(name, POINT_EQUIVALENCE, error, task=task)
                key = None
        self._classes[uid] = key
        return key

    def forget_equivalence_class(self, task_uid: str) -> None:
        """Compute the task's class afresh when next asked: a plugin whose key reads something
        that changed during the session (numa-affinity-group: where the pod's group peers are)."""
        self._classes.pop(task_uid, None)

    def _declaring_plugins(self) -> list[tuple[str, DeclaresEquivalence]] | None:
        if self._equivalence_plugins is None:
            answering = set(self._predicate_fns) | set(self._node_order_fns)
            answering |= {name for name, fn in self._batch_node_order_fns.items() if isinstance(fn, ScoreParts)}
            declaring: list[tuple[str, DeclaresEquivalence]] = []
            for name in sorted(answering):
                plugin = self.plugins.get(name)
                if not isinstance(plugin, DeclaresEquivalence):
                    _log.debug("no equivalence memo this session: a plugin declares no key", plugin=name)
                    self._equivalence_plugins = []
                    self.memo = None
                    return None
                declaring.append((name, plugin))
            self._equivalence_plugins = declaring
        return self._equivalence_plugins if self.memo is not None else None

    def pending_tasks(self) -> list[TaskInfo]:
        return [task for job in self.jobs.values() for task in job.tasks.values() if task.status is TaskStatus.PENDING]

    # -- tiers -----------------------------------------------------------------------------------

    def _tiers(self, point: str) -> list[list[str]]:
        """Plugin names per tier whose flag for `point` is on."""
        cached = self._tiers_cache.get(point)
        if cached is None:
            cached = [
                [option.name for option in tier.plugins if point == _UNGATED or option.is_enabled(point)]
                for tier in self.config.tiers
            ]
            self._tiers_cache[point] = cached
        return cached

    def _in_order(self, point: str, fns: dict[str, _Fn]) -> list[tuple[str, _Fn]]:
        """The registered functions for `point`, tier by tier; built once per registration state,
        since the hot paths (predicate, node order) ask for it per node."""
        key = (point, id(fns))
        cached = self._ordered_cache.get(key)
        if cached is None:
            cached = [(name, fns[name]) for names in self._tiers(point) for name in names if name in fns]
            self._ordered_cache[key] = cached
        return cached

    # -- registration ----------------------------------------------------------------------------

    def add_predicate_fn(self, name: str, fn: PredicateFn) -> None:
        self._predicate_fns[name] = fn
        self._ordered_cache.clear()

    def add_pre_predicate_fn(self, name: str, fn: PrePredicateFn) -> None:
        self._pre_predicate_fns[name] = fn
        self._ordered_cache.clear()

    def add_node_order_fn(self, name: str, fn: NodeOrderFn) -> None:
        self._node_order_fns[name] = fn
        self._ordered_cache.clear()

    def add_batch_node_order_fn(self, name: str, fn: BatchNodeOrderFn) -> None:
        self._batch_node_order_fns[name] = fn
        self._ordered_cache.clear()

    def add_score_parts(
        self,
        name: str,
        part: ScorePartFn,
        combine: CombineFn,
        *,
        number: PartNumberFn | None = None,
        combine_numbers: CombineNumbersFn | None = None,
    ) -> None:
        """A batch node-order function whose per-node parts the engine may memoise: part(task,
        node) must depend only on the node's state and on what the plugin's equivalence_key reads
        of the pod; combine(task, candidates, parts by node name) gives the scores.

        With number and combine_numbers the engine keeps number(part) beside each part and asks
        combine_numbers(task, candidates, parts, numbers) for the scores as an array in the
        candidates' order; it must give what combine gives."""
        self._batch_node_order_fns[name] = ScoreParts(part, combine, number, combine_numbers)
        self._ordered_cache.clear()

    def add_best_node_fn(self, name: str, fn: BestNodeFn) -> None:
        self._best_node_fns[name] = fn
        self._ordered_cache.clear()

    def add_job_order_fn(self, name: str, fn: JobOrderFn) -> None:
        self._job_order_fns[name] = fn
        self._ordered_cache.clear()

    def add_task_order_fn(self, name: str, fn: TaskOrderFn) -> None:
        self._task_order_fns[name] = fn
        self._ordered_cache.clear()

    def add_job_ready_fn(self, name: str, fn: JobReadyFn) -> None:
        self._job_ready_fns[name] = fn
        self._ordered_cache.clear()

    def add_job_pipelined_fn(self, name: str, fn: JobVoteFn) -> None:
        self._job_pipelined_fns[name] = fn
        self._ordered_cache.clear()

    def add_job_valid_fn(self, name: str, fn: JobValidFn) -> None:
        self._job_valid_fns[name] = fn
        self._ordered_cache.clear()

    def add_job_enqueueable_fn(self, name: str, fn: JobVoteFn) -> None:
        self._job_enqueueable_fns[name] = fn
        self._ordered_cache.clear()

    def add_allocatable_fn(self, name: str, fn: AllocatableFn) -> None:
        self._allocatable_fns[name] = fn
        self._ordered_cache.clear()

    def add_preemptable_fn(self, name: str, fn: EvictableFn) -> None:
        self._preemptable_fns[name] = fn
        self._ordered_cache.clear()

    def add_reclaimable_fn(self, name: str, fn: EvictableFn) -> None:
        self._reclaimable_fns[name] = fn
        self._ordered_cache.clear()

    def add_event_handler(self, handler: EventHandler) -> None:
        self.event_handlers.append(handler)
        self.event_handler_plugins.append(self._opening)

    # -- faults ----------------------------------------------------------------------------------

    def record_fault(
        self,
        plugin: str,
        point: str,
        error: BaseException,
        *,
        task: TaskInfo | None = None,
        job: JobInfo | None = None,
    ) -> PluginFault:
        """Note that `plugin` raised at `point` about a task or a job (or neither, for an order
        between two); the first fault of a task or job is the one it fails with."""
        subject = task.key if task is not None else job.key if job is not None else ""
        key = (plugin, point, subject)
        fault = self.plugin_faults.get(key)
        if fault is None:
            fault = PluginFault(plugin, point, describe_exception(error), subject)
            self.plugin_faults[key] = fault
            _log.warning(
                "plugin raised; its task fails this cycle, the others go on",
                plugin=plugin,
                extension_point=point,
                subject=subject or None,
                error=fault.error,
                exc_info=error,
            )
        if task is not None:
            self.task_faults.setdefault(task.uid, fault)
        if job is not None:
            self.job_faults.setdefault(job.uid, fault)
        return fault

    def fault_of(self, task: TaskInfo) -> PluginFault | None:
        """The plugin fault this task fails with this session, its own or its job's."""
        if not self.task_faults and not self.job_faults:
            return None
        return self.task_faults.get(task.uid) or self.job_faults.get(task.job_id)

    def event_handler_plugin(self, index: int) -> str:
        plugins = self.event_handler_plugins
        return plugins[index] if 0 <= index < len(plugins) else ""

    # -- evaluation ------------------------------------------------------------------------------

    # Every dispatch below holds its loop in one try: a plugin that raises fails the task (or
    # job) it was asked about with a PluginFault and an answer that places nothing, and the
    # session goes on. No wrapper per call: the hot paths pay nothing until something raises.

    def pre_predicate(self, task: TaskInfo) -> Status:
        """AND over the plugins (gated by the predicate flag); the first failure is returned."""
        name = ""
        try:
            for name, fn in self._in_order("predicate", self._pre_predicate_fns):
                status = fn(task)
                if not status.passed:
                    return status if status.plugin else attrs.evolve(status, plugin=name)
        except Exception as error:
            return self.record_fault(name, POINT_PRE_PREDICATE, error, task=task).status()
        return SUCCESS

    def predicate(self, task: TaskInfo, node: NodeInfo) -> Status:
        """AND over the plugins; the first failure is returned, named by its plugin. A plugin
        that raises fails the task (an Error status, and a fault the caller stops on)."""
        name = ""
        try:
            for name, fn in self._in_order("predicate", self._predicate_fns):
                status = fn(task, node)
                if not status.passed:
                    return status if status.plugin else attrs.evolve(status, plugin=name)
        except Exception as error:
            return self.record_fault(name, POINT_PREDICATE, error, task=task).status()
        return SUCCESS

    def node_order(self, task: TaskInfo, node: NodeInfo) -> float:
        """The sum of the plugins' scores; 0 after a plugin raised (the task fails anyway)."""
        total = 0.0
        name = ""
        try:
            for name, fn in self._in_order("nodeOrder", self._node_order_fns):  # noqa: B007 - named in the fault
                total += fn(task, node)
        except Exception as error:
            self.record_fault(name, POINT_NODE_ORDER, error, task=task)
            return 0.0
        return total

    def batch_node_order(self, task: TaskInfo, nodes: Sequence[NodeInfo]) -> Floats:
        """Per candidate (in their order), the sum of the plugins' batch scores."""
        candidates = nodes if isinstance(nodes, Candidates) else Candidates(nodes)
        totals: Floats = np.zeros(len(candidates), dtype=np.float64)
        name = ""
        try:
            for name, fn in self._in_order("nodeOrder", self._batch_node_order_fns):
                if isinstance(fn, ScoreParts):
                    scores = self._memoised_parts(name, fn, task, candidates)
                else:
                    given = fn(task, candidates)
                    if isinstance(given, np.ndarray):
                        scores = given
                    else:
                        scores = np.fromiter(
                            (given.get(node.name, 0.0) for node in candidates), dtype=np.float64, count=len(candidates)
                        )
                totals = totals + scores
        except Exception as error:
            self.record_fault(name, POINT_BATCH_NODE_ORDER, error, task=task)
            return np.zeros(len(candidates), dtype=np.float64)
        return totals

    def _memoised_parts(self, name: str, fn: ScoreParts, task: TaskInfo, candidates: Candidates) -> Floats:
        """The plugin's scores of the candidates from its parts, memoised per pod class and node
        generation where the session has a memo."""
        class_key = self.equivalence_class(task)
        memo = self.memo
        slots = candidates.slots()
        if memo is None or class_key is None or slots is None:
            parts: Objects = np.empty(len(candidates), dtype=object)
            for position, node in enumerate(candidates):
                parts[position] = fn.part(task, node)
            number = fn.number
            numbers: Floats = (
                np.fromiter((number(part) for part in parts), dtype=np.float64, count=len(parts))
                if number is not None
                else np.zeros(len(parts), dtype=np.float64)
            )
        else:
            table = memo.parts(("parts", name, class_key))
            stale = np.flatnonzero(table.generation[slots] != candidates.generations)
            if len(stale):
                _keep_parts(table, fn, task, candidates, stale, slots[stale])
            if fn.combine_numbers is not None:
                # The parts stay in the table until the plugin reads one.
                return fn.combine_numbers(task, candidates, CandidateParts(table.parts, slots), table.numbers[slots])
            parts, numbers = table.parts[slots], table.numbers[slots]
        if fn.combine_numbers is not None:
            return fn.combine_numbers(task, candidates, CandidateParts(parts), numbers)
        by_name = fn.combine(task, candidates, {node.name: parts[i] for i, node in enumerate(candidates)})
        return np.fromiter(
            (by_name.get(node.name, 0.0) for node in candidates), dtype=np.float64, count=len(candidates)
        )

    def node_index(self, nodes: Sequence[NodeInfo]) -> NodeIndex:
        """The index of an action's node order (slots in the memo; kept for the session)."""
        found = self._node_indexes.get(id(nodes))
        if found is not None and found.nodes is nodes:
            return found
        slots = self.memo.slots if self.memo is not None else NodeSlots()
        log = self._touch_log
        if log is not None and any(node.touch_log is not log for node in nodes):
            # A node not of this session's snapshot does not report here.
            log = None
        index = self._node_indexes[id(nodes)] = NodeIndex(nodes, slots, log)
        return index

    def has_best_node_fns(self) -> bool:
        return bool(self._in_order("bestNode", self._best_node_fns))

    def best_node(self, task: TaskInfo, scores: dict[float, list[NodeInfo]]) -> NodeInfo | None:
        """The first plugin, in tier order, that names a node decides."""
        name = ""
        try:
            for name, fn in self._in_order("bestNode", self._best_node_fns):  # noqa: B007 - named in the fault
                node = fn(task, scores)
                if node is not None:
                    return node
        except Exception as error:
            self.record_fault(name, POINT_BEST_NODE, error, task=task)
        return None

    def job_order(self, first: JobInfo, second: JobInfo) -> int:
        """<0 when `first` goes first. The first plugin with an opinion decides; then creation
        time, then uid. A plugin that raises has no opinion (the order stays total)."""
        name = ""
        try:
            for name, fn in self._in_order("jobOrder", self._job_order_fns):  # noqa: B007 - named in the fault
                verdict = fn(first, second)
                if verdict != 0:
                    return verdict
        except Exception as error:
            self.record_fault(name, POINT_JOB_ORDER, error)
        return _compare_by_creation(first, second)

    def task_order(self, first: TaskInfo, second: TaskInfo) -> int:
        name = ""
        try:
            for name, fn in self._in_order("taskOrder", self._task_order_fns):  # noqa: B007 - named in the fault
                verdict = fn(first, second)
                if verdict != 0:
                    return verdict
        except Exception as error:
            self.record_fault(name, POINT_TASK_ORDER, error)
        return _compare_by_creation(first, second)

    def sorted_jobs(self, jobs: Iterable[JobInfo]) -> list[JobInfo]:
        listed = list(jobs)
        for job in listed:
            job.ready_while_sorting = job.ready_task_num()
        try:
            return sorted(listed, key=functools.cmp_to_key(self.job_order))
        finally:
            for job in listed:
                job.ready_while_sorting = None

    def sorted_tasks(self, tasks: Iterable[TaskInfo]) -> list[TaskInfo]:
        return sorted(tasks, key=functools.cmp_to_key(self.task_order))

    def job_ready(self, job: JobInfo) -> bool:
        """Every plugin must agree; with none, a job is ready. A plugin that raises says no."""
        name = ""
        try:
            for name, fn in self._in_order("jobReady", self._job_ready_fns):  # noqa: B007 - named in the fault
                if not fn(job):
                    return False
        except Exception as error:
            self.record_fault(name, POINT_JOB_READY, error, job=job)
            return False
        return True

    def _vote(self, point: str, fault_point: str, fns: dict[str, JobVoteFn], job: JobInfo) -> bool:
        """Volcano's tiered vote: a reject anywhere in a tier loses; a permit in a tier with no
        reject wins; a tier of abstentions passes to the next; all abstain -> yes. A plugin that
        raises rejects."""
        name = ""
        try:
            for names in self._tiers(point):
                permitted = False
                for name in names:
                    fn = fns.get(name)
                    if fn is None:
                        continue
                    vote = fn(job)
                    if vote < 0:
                        return False
                    if vote > 0:
                        permitted = True
                if permitted:
                    return True
        except Exception as error:
            self.record_fault(name, fault_point, error, job=job)
            return False
        return True

    def job_pipelined(self, job: JobInfo) -> bool:
        return self._vote("jobPipelined", POINT_JOB_PIPELINED, self._job_pipelined_fns, job)

    def job_enqueueable(self, job: JobInfo) -> bool:
        return self._vote("jobEnqueued", POINT_JOB_ENQUEUEABLE, self._job_enqueueable_fns, job)

    def job_valid(self, job: JobInfo) -> ValidateResult | None:
        """The first failing result, or None when every plugin passes the job. A plugin that
        raises fails it."""
        name = ""
        try:
            for name, fn in self._in_order(_UNGATED, self._job_valid_fns):  # noqa: B007 - named in the fault
                result = fn(job)
                if result is not None and not result.passed:
                    return result
        except Exception as error:
            fault = self.record_fault(name, POINT_JOB_VALID, error, job=job)
            return ValidateResult(False, "PluginError", fault.message)
        return None

    def allocatable(self, queue: QueueInfo, task: TaskInfo) -> bool:
        """Every plugin must let the queue take the task. A plugin that raises says no."""
        name = ""
        try:
            for name, fn in self._in_order("allocatable", self._allocatable_fns):  # noqa: B007 - named in the fault
                if not fn(queue, task):
                    return False
        except Exception as error:
            self.record_fault(name, POINT_ALLOCATABLE, error, task=task)
            return False
        return True

    def _evictable(
        self, point: str, fns: dict[str, EvictableFn], evictor: TaskInfo, evictees: Sequence[TaskInfo]
    ) -> list[TaskInfo]:
        """Volcano's victim selection: within a tier the plugins' victims intersect; the first tier
        where a plugin voted decides. An empty answer is a veto that ends the walk: newer Volcano
        lets a later tier decide again, which would let a lower tier pick the very pods that
        conformance protects. A plugin that raises vetoes."""
        name = ""
        try:
            for names in self._tiers(point):
                victims: list[TaskInfo] | None = None
                for name in names:
                    fn = fns.get(name)
                    if fn is None:
                        continue
                    candidates, vote = fn(evictor, evictees)
                    if vote == 0:
                        continue
                    if not candidates:
                        victims = []
                        break
                    if victims is None:
                        victims = list(candidates)
                    else:
                        allowed = {task.uid for task in candidates}
                        victims = [task for task in victims if task.uid in allowed]
                if victims is not None:
                    return victims
        except Exception as error:
            self.record_fault(name, point, error, task=evictor)
        return []

    def preemptable(self, evictor: TaskInfo, evictees: Sequence[TaskInfo]) -> list[TaskInfo]:
        return self._evictable("preemptable", self._preemptable_fns, evictor, evictees)

    def reclaimable(self, evictor: TaskInfo, evictees: Sequence[TaskInfo]) -> list[TaskInfo]:
        return self._evictable("reclaimable", self._reclaimable_fns, evictor, evictees)

    # -- bookkeeping -----------------------------------------------------------------------------

    def record_fit_errors(self, task: TaskInfo, per_node: Mapping[str, Sequence[Status]]) -> None:
        """Why the task did not fit on each of these nodes (adds to what is already recorded).
        The mapping and its sequences are kept as given and must not change afterwards (memoised
        answers are shared); they are read only when someone asks (fit_errors_of), which for a
        pod that is placed is nobody."""
        self._fit_error_records.setdefault(task.uid, []).append(per_node)

    def fit_errors_of(self, task_uid: str) -> dict[str, Sequence[Status]]:
        """Per node, why the task did not fit there: every recorded reason, in the order recorded."""
        records = self._fit_error_records.get(task_uid)
        if not records:
            return {}
        merged = dict(records[0].items())
        for per_node in records[1:]:
            for node_name, statuses in per_node.items():
                known = merged.get(node_name)
                merged[node_name] = statuses if known is None else (*known, *statuses)
        # Kept merged, so a second read does not merge again.
        records[:] = [merged]
        return dict(merged)

    @property
    def fit_errors(self) -> dict[str, dict[str, Sequence[Status]]]:
        """fit_errors_of for every task with a recorded reason."""
        return {uid: self.fit_errors_of(uid) for uid in self._fit_error_records}

    def fit_error_message(self, task: TaskInfo) -> str:
        return fit_error_summary(len(self.nodes), self.fit_errors_of(task.uid))

    def queue_of(self, job: JobInfo) -> QueueInfo:
        """The job's queue; a queue with no Queue object is an open one of that name."""
        return self.queues.get(job.queue) or QueueInfo(job.queue)

    def set_job_status(self, job: JobInfo, phase: str, message: str = "") -> None:
        self.job_updates[job.uid] = JobUpdate(job, phase, message)
