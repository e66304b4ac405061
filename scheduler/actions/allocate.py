"""allocate: place the pending tasks that ask for resources, job by job, gang-aware (Volcano).

Queues as Volcano takes them (each turn, the first queue by queue order that is not overused
gives its next job in job order; queues in name order when no plugin orders them), each job's
pending tasks in task order. A task goes to the best node that passes the resource check and the
predicates; the job's placements are bound together once the job is ready, kept when it is
pipelined, rolled back otherwise.

On a big cluster a task does not need every feasible node to get a good one: as Volcano and
kube-scheduler do, the predicate scan stops once enough nodes have passed, and the next task's scan
starts where this one stopped, so every node gets its turn. How many is enough is configured under
`configurations` for this action (minimumFeasibleNodes, minimumPercentageNodesToFind,
percentageNodesToFind). A scan that stops early has found candidates; a task that found none was
checked against every node, so its "0/N nodes are available" message counts them all.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, ItemsView, Iterator, KeysView, Mapping, Sequence, ValuesView
from typing import Any

import attrs
import numpy as np
import structlog

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.snapshot import QueueInfo
from numasched.api.task import TaskInfo
from numasched.scheduler.actions import queue_points
from numasched.scheduler.actions.enqueue import QUEUE_OPEN, is_pending
from numasched.scheduler.framework.equivalence import (
    Bools,
    Candidates,
    ClassAnswers,
    EquivalenceMemo,
    Floats,
    Ints,
    NodeIndex,
    Objects,
)
from numasched.scheduler.framework.session import Session
from numasched.scheduler.framework.statement import JobOutcome, Statement, settle_job
from numasched.scheduler.framework.status import Status, StatusCode

_log = structlog.get_logger(__name__)

ACTION_NAME = "allocate"

MINIMUM_FEASIBLE_NODES = "minimumFeasibleNodes"
MINIMUM_PERCENTAGE_NODES_TO_FIND = "minimumPercentageNodesToFind"
PERCENTAGE_NODES_TO_FIND = "percentageNodesToFind"

# Volcano's scheduler flag defaults (minimum-feasible-nodes, minimum-percentage-nodes-to-find,
# percentage-nodes-to-find; 0 is adaptive).
DEFAULT_MINIMUM_FEASIBLE_NODES = 100
DEFAULT_MINIMUM_PERCENTAGE_NODES_TO_FIND = 5
DEFAULT_PERCENTAGE_NODES_TO_FIND = 0
# The adaptive percentage: 50% of a small cluster, one point less per 125 nodes (kube-scheduler's).
_ADAPTIVE_BASELINE_PERCENTAGE = 50
_ADAPTIVE_NODES_PER_POINT = 125


@attrs.frozen(slots=True)
class SamplingOptions:
    """How many feasible nodes a task's predicate scan looks for before it stops."""

    minimum_feasible_nodes: int = DEFAULT_MINIMUM_FEASIBLE_NODES
    minimum_percentage: int = DEFAULT_MINIMUM_PERCENTAGE_NODES_TO_FIND
    # 0: adaptive to the cluster size; 100: every node.
    percentage: int = DEFAULT_PERCENTAGE_NODES_TO_FIND

    def nodes_to_find(self, total_nodes: int) -> int:
        """Feasible nodes to find among total_nodes; total_nodes means scan them all."""
        if total_nodes <= self.minimum_feasible_nodes or self.percentage >= 100:
            return total_nodes
        percentage = self.percentage
        if percentage <= 0:
            percentage = max(
                _ADAPTIVE_BASELINE_PERCENTAGE - total_nodes // _ADAPTIVE_NODES_PER_POINT, self.minimum_percentage
            )
        return min(total_nodes, max(total_nodes * percentage // 100, self.minimum_feasible_nodes))


def _integer_argument(
    arguments: Mapping[str, Any], key: str, default: int, lowest: int, highest: int | None
) -> tuple[int, str]:
    """The value of one knob, or the default and why the given value cannot be used."""
    if key not in arguments:
        return default, ""
    value = arguments[key]
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.strip().lstrip("+-").isdigit():
        number = int(value.strip())
    bounds = f"at least {lowest}" if highest is None else f"from {lowest} to {highest}"
    if number is None:
        return default, f"{key}: expected a whole number {bounds}, got {value!r}; using {default}"
    if number < lowest or (highest is not None and number > highest):
        return default, f"{key}: {number} is out of range, expected {bounds}; using {default}"
    return number, ""


def sampling_options(arguments: Mapping[str, Any]) -> tuple[SamplingOptions, list[str]]:
    """The allocate action's sampling knobs from its `configurations` arguments, and a message for
    each value that cannot be used (that knob keeps its default; the others still apply)."""
    minimum_nodes, first = _integer_argument(arguments, MINIMUM_FEASIBLE_NODES, DEFAULT_MINIMUM_FEASIBLE_NODES, 1, None)
    minimum_percentage, second = _integer_argument(
        arguments, MINIMUM_PERCENTAGE_NODES_TO_FIND, DEFAULT_MINIMUM_PERCENTAGE_NODES_TO_FIND, 0, 100
    )
    percentage, third = _integer_argument(arguments, PERCENTAGE_NODES_TO_FIND, DEFAULT_PERCENTAGE_NODES_TO_FIND, 0, 100)
    problems = [problem for problem in (first, second, third) if problem]
    known = (MINIMUM_FEASIBLE_NODES, MINIMUM_PERCENTAGE_NODES_TO_FIND, PERCENTAGE_NODES_TO_FIND)
    problems.extend(
        f"unknown argument {key!r} (known: {', '.join(known)}); ignored" for key in arguments if key not in known
    )
    return SamplingOptions(minimum_nodes, minimum_percentage, percentage), problems


def _failures_on(
    ssn: Session, task: TaskInfo, node: NodeInfo, check_resources: bool, insufficient: dict[str, Status]
) -> tuple[Status, ...] | None:
    """Why the node cannot take the task (the action's resource check, then the plugins'
    predicates), or None when it can."""
    if check_resources:
        missing = task.init_resreq.insufficient_after(node.idle, node.releasing, node.pipelined)
        if missing:
            statuses = []
            for name in missing:
                status = insufficient.get(name)
                if status is None:
                    status = insufficient[name] = Status.unschedulable(f"Insufficient {name}", ACTION_NAME)
                statuses.append(status)
            return tuple(statuses)
    status = ssn.predicate(task, node)
    return None if status.passed else (status,)


def _answers(ssn: Session, task: TaskInfo, check_resources: bool) -> tuple[Hashable | None, ClassAnswers]:
    """The memo's answers for the task's class (and kind of scan), or answers for this scan only
    when there is no memo or no class."""
    class_key = ssn.equivalence_class(task)
    memo = ssn.memo
    if memo is None or class_key is None:
        return None, ClassAnswers()
    return (check_resources, class_key), memo.answers((check_resources, class_key))


def feasible_nodes(
    ssn: Session,
    task: TaskInfo,
    nodes: Sequence[NodeInfo],
    *,
    check_resources: bool,
    nodes_to_find: int | None = None,
    first_fit: bool = False,
) -> Candidates:
    """Nodes that pass, in scan order; why each other node failed is recorded on the session.

    With first_fit the scan goes in the nodes' order and stops at the first node that passes
    (backfill's walk), leaving the scan offset alone.

    With nodes_to_find below len(nodes) the scan starts at the session's scan offset, stops once
    that many nodes have passed, and moves the offset past the nodes it visited. A scan that
    finds fewer has visited every node.

    Answers come from the session's equivalence memo where the task's class has one for the
    node's generation (framework/equivalence.py); they are the answers the checks would give. So
    the scan is done on arrays: only nodes without an answer for their generation are asked, in
    scan order, and only until the nodes known to pass before them are enough.
    """
    index = ssn.node_index(nodes)
    memo_key, answers = _answers(ssn, task, check_resources)
    total = len(nodes)
    slots = index.slots
    answers.fit(index.slot_bound)
    generations = index.generations()
    if memo_key is not None and _still_fits_nowhere(ssn, task, index, generations, check_resources, memo_key, answers):
        return Candidates(())
    sampled = not first_fit and nodes_to_find is not None and nodes_to_find < total
    start = ssn.node_scan_offset % total if sampled and total else 0
    wanted = 1 if first_fit else nodes_to_find if sampled and nodes_to_find is not None else total
    # Everything below is by position in `nodes`; the scan visits positions from `start` round.
    if index.in_slot_order:
        known = answers.predicate_generation[:total] == generations
        passes = known & answers.passed[:total]
    else:
        known = answers.predicate_generation[slots] == generations
        passes = known & answers.passed[slots]
    stale = np.flatnonzero(~known)
    if start and len(stale):
        wrap = int(np.searchsorted(stale, start))
        stale = np.concatenate((stale[wrap:], stale[:wrap]))
    known_passes_before = _passes_before(passes, stale, start)
    insufficient: dict[str, Status] = {}
    asked_passes = 0
    # Failures of this scan the memo does not keep (they name the pod, or a plugin raised).
    unshared: dict[int, tuple[Status, ...]] = {}
    fault_at: int | None = None
    # The answers to keep, written to the memo's arrays at once after the loop.
    kept_at: list[int] = []
    kept_generation: list[int] = []
    kept_failures: list[tuple[Status, ...] | None] = []
    for position, before in zip(stale.tolist(), known_passes_before.tolist(), strict=True):
        if before + asked_passes >= wanted:
            break
        node = nodes[position]
        failed = _failures_on(ssn, task, node, check_resources, insufficient)
        if _shareable(ssn, task, failed):
            kept_at.append(position)
            kept_generation.append(node.generation)
            kept_failures.append(failed)
        elif failed is not None:
            unshared[position] = failed
        if failed is None:
            passes[position] = True
            asked_passes += 1
            continue
        if failed[0].code is StatusCode.ERROR and ssn.fault_of(task) is not None:
            # A plugin raised for this task: it fails this cycle, no need to try the others.
            fault_at = position
            break
    if kept_at:
        _keep_answers(answers, slots[kept_at], kept_generation, kept_failures)
    if fault_at is not None:
        visited = (fault_at - start) % total + 1
    else:
        in_scan_order = np.concatenate((passes[start:], passes[:start])) if start else passes
        found = int(np.searchsorted(np.cumsum(in_scan_order), wanted))
        visited = found + 1 if found < total else total
    if sampled:
        ssn.node_scan_offset = (start + visited) % total
    scanned = np.arange(start, start + visited, dtype=np.int64)
    if start + visited > total:
        scanned %= total
    seen = passes[scanned]
    failing = scanned[~seen]
    failures: Mapping[str, Sequence[Status]] = {}
    if len(failing):
        reasons = answers.failures[failing if index.in_slot_order else slots[failing]]
        for place, position in enumerate(failing.tolist()) if unshared else ():
            if position in unshared:
                reasons[place] = unshared[position]
        failures = ScanFailures(index.names[failing], reasons)
        ssn.record_fit_errors(task, failures)
    positions = scanned[seen]
    candidates = Candidates(index.node_objects[positions].tolist(), index, positions, generations[positions])
    if memo_key is not None and not candidates and visited == total and not unshared:
        ssn.failed_scans[memo_key] = _FailedScan(index, generations, failures)
    return candidates


class ScanFailures(Mapping[str, Sequence[Status]]):
    """Why each failing node of a scan failed, by node name: the scan's arrays, made a dict only
    when read (most pods are placed, and then nobody reads them)."""

    __slots__ = ("_by_name", "_names", "_reasons")

    def __init__(self, names: Objects, reasons: Objects) -> None:
        self._names = names
        self._reasons = reasons
        self._by_name: dict[str, Sequence[Status]] | None = None

    def _read(self) -> dict[str, Sequence[Status]]:
        if self._by_name is None:
            self._by_name = dict(zip(self._names.tolist(), self._reasons.tolist(), strict=True))
        return self._by_name

    def __getitem__(self, name: str) -> Sequence[Status]:
        return self._read()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._names)

    # The dict's own views: a reader going through them is not called back per node.
    def keys(self) -> KeysView[str]:
        return self._read().keys()

    def items(self) -> ItemsView[str, Sequence[Status]]:
        return self._read().items()

    def values(self) -> ValuesView[Sequence[Status]]:
        return self._read().values()


def _keep_answers(
    answers: ClassAnswers, slots: Ints, generations: list[int], failures: list[tuple[Status, ...] | None]
) -> None:
    """Record answers in the class's arrays: the node generation each holds for, whether the node
    passed, and why not."""
    answers.predicate_generation[slots] = generations
    answers.passed[slots] = [failed is None for failed in failures]
    # One by one: a list of tuples given to numpy at once could be read as a 2-D array.
    reasons = np.empty(len(failures), dtype=object)
    for place, failed in enumerate(failures):
        reasons[place] = failed
    answers.failures[slots] = reasons


def _passes_before(passes: Bools, stale: Ints, start: int) -> Ints:
    """For each stale position (in scan order from `start`), how many known passes the scan meets
    before it: those from `start` up to it, plus, past the wrap, those from `start` to the end."""
    if not len(stale):
        return stale
    inclusive: Ints = np.cumsum(passes, dtype=np.int64)
    before_start = int(inclusive[start - 1]) if start else 0
    before: Ints = inclusive[stale] - passes[stale].astype(np.int64) - before_start
    if start:
        before[stale < start] += int(inclusive[-1])
    return before


class _FailedScan:
    """A scan of every node that found none for a pod class: the nodes as they were then (their
    generations) and why each failed."""

    __slots__ = ("failures", "generations", "index")

    def __init__(self, index: NodeIndex, generations: Ints, failures: Mapping[str, Sequence[Status]]):
        self.index = index
        self.generations = generations
        self.failures = failures


def _still_fits_nowhere(
    ssn: Session,
    task: TaskInfo,
    index: NodeIndex,
    generations: Ints,
    check_resources: bool,
    key: Hashable,
    answers: ClassAnswers,
) -> bool:
    """Whether a pod of a class that fitted on no node still fits on none: only the nodes changed
    since are asked again. When it holds, the failures are recorded as a full scan records them
    (a scan that finds nothing visits every node and leaves the scan offset where it was)."""
    failed = ssn.failed_scans.get(key)
    if failed is None or failed.index is not index:
        return False
    changed = np.flatnonzero(generations != failed.generations)
    failures = failed.failures
    if len(changed):
        updated = dict(failures)
        insufficient: dict[str, Status] = {}
        nodes = index.nodes
        for position in changed.tolist():
            node = nodes[position]
            slot = index.slots[position]
            if answers.predicate_generation[slot] == node.generation:
                now = answers.failures[slot]
            else:
                now = _failures_on(ssn, task, node, check_resources, insufficient)
                if ssn.fault_of(task) is not None:
                    return False
                if not _shareable(ssn, task, now):
                    return False
                answers.predicate_generation[slot] = node.generation
                answers.passed[slot] = now is None
                answers.failures[slot] = now
            if now is None:
                # It fits there now: the scan decides where.
                return False
            updated[node.name] = now
        failures = updated
        ssn.failed_scans[key] = _FailedScan(index, generations, updated)
    ssn.record_fit_errors(task, failures)
    return True


def _shareable(ssn: Session, task: TaskInfo, failed: Sequence[Status] | None) -> bool:
    """Whether an answer may serve the other pods of the task's class: not when a plugin raised
    (the fault is this task's), nor when a reason names this pod."""
    if failed is None:
        return True
    if ssn.fault_of(task) is not None:
        return False
    key = task.key
    return not any(key in status.reason for status in failed)


def choose_node(ssn: Session, task: TaskInfo, candidates: Sequence[NodeInfo]) -> NodeInfo:
    """A best-node plugin's choice, else the highest total score; ties go to the smallest name
    so the same cluster always gets the same placement. (After a scoring plugin raised the
    caller finds the fault on the session and places nothing.)"""
    if not isinstance(candidates, Candidates):
        candidates = Candidates(candidates)
    assert candidates, "choose_node needs at least one candidate"
    scores = _node_order_scores(ssn, task, candidates) + ssn.batch_node_order(task, candidates)
    if ssn.has_best_node_fns():
        # Only best-node plugins read the nodes grouped by score.
        by_score: dict[float, list[NodeInfo]] = {}
        for node, score in zip(candidates, scores.tolist(), strict=True):
            by_score.setdefault(score, []).append(node)
        chosen = ssn.best_node(task, by_score)
        if chosen is not None:
            return chosen
    best = np.flatnonzero(scores == scores.max())
    if candidates.node_index is not None:
        # The index is in name order: the smallest position among the best is the smallest name.
        position = candidates.chosen_at = int(best[np.argmin(candidates.positions[best])])
        return candidates[position]
    return min((candidates[i] for i in best.tolist()), key=lambda node: node.name)


def _node_order_scores(ssn: Session, task: TaskInfo, candidates: Candidates) -> Floats:
    """The node-order scores of the candidates: from the memo where it holds one for the node's
    generation, else asked (and kept)."""
    class_key = ssn.equivalence_class(task)
    memo = ssn.memo
    slots = candidates.slots()
    if memo is None or class_key is None or slots is None:
        return np.fromiter((ssn.node_order(task, node) for node in candidates), dtype=np.float64, count=len(candidates))
    answers = memo.answers((True, class_key))
    scores = answers.score[slots]
    for position in np.flatnonzero(answers.score_generation[slots] != candidates.generations).tolist():
        node = candidates[position]
        score = scores[position] = ssn.node_order(task, node)
        if ssn.fault_of(task) is None:
            slot = slots[position]
            answers.score[slot] = score
            answers.score_generation[slot] = node.generation
    return scores


def schedulable_pending(ssn: Session, job: JobInfo, *, best_effort: bool) -> list[TaskInfo]:
    """The job's pending tasks of the kind, in task order, but those held back this session
    (backing off after plugin errors): they get why, and are not tried."""
    tasks = []
    for task in job.pending_tasks():
        if task.best_effort is not best_effort:
            continue
        held = ssn.held_back.get(task.uid)
        if held is not None:
            task.fit_error = held
            continue
        tasks.append(task)
    return ssn.sorted_tasks(tasks)


def _mark_pending(job: JobInfo, message: str) -> None:
    for task in job.pending_tasks():
        if not task.fit_error:
            task.fit_error = message


def _gang_message(job: JobInfo, placed: int, failures: list[TaskInfo]) -> str:
    message = f"pod group {job.key} is not ready: {placed} of {job.min_available} required tasks could be placed"
    if failures:
        message += f"; {failures[0].key}: {failures[0].fit_error}"
    return message


class AllocateAction:
    name = ACTION_NAME

    def __init__(self) -> None:
        # Predicate and score answers per equivalence class, kept across sessions of one
        # configuration (node generations say which still hold).
        self.memo = EquivalenceMemo()
        # The last arguments read and what they gave, so a bad value is reported once per change
        # of the configuration rather than every session.
        self._read: tuple[dict[str, Any], SamplingOptions] | None = None

    def sampling(self, ssn: Session) -> SamplingOptions:
        arguments = ssn.config.configurations.get(ACTION_NAME, {})
        if self._read is not None and self._read[0] == arguments:
            return self._read[1]
        options, problems = sampling_options(arguments)
        for problem in problems:
            _log.warning("bad allocate argument in configurations", action=ACTION_NAME, problem=problem)
        self._read = (dict(arguments), options)
        return options

    def execute(self, ssn: Session) -> None:
        self.memo.bind(ssn.config)
        ssn.memo = self.memo
        nodes = sorted(ssn.nodes.values(), key=lambda node: node.name)
        nodes_to_find = self.sampling(ssn).nodes_to_find(len(nodes))
        by_queue: dict[str, list[JobInfo]] = {}
        for job in ssn.jobs.values():
            if any(not task.best_effort for task in job.pending_tasks()):
                by_queue.setdefault(job.queue, []).append(job)
        # Volcano's order: each turn the first queue by queue order (sorted again, as shares
        # change with every job placed) that is not overused gives its next job in job order.
        waiting = {name: deque(ssn.sorted_jobs(jobs)) for name, jobs in sorted(by_queue.items())}
        queues = {name: ssn.queues.get(name) or QueueInfo(name) for name in waiting}
        ordering = queue_points.policies(ssn, queue_points.POINT_QUEUE_ORDER)
        judging = queue_points.policies(ssn, queue_points.POINT_OVERUSED)
        while waiting:
            if len(waiting) == 1:
                queue = queues[next(iter(waiting))]
            else:
                queue = queue_points.sorted_queues(ssn, [queues[name] for name in waiting], ordering)[0]
            if queue_points.overused(ssn, queue, judging):
                for job in waiting.pop(queue.name):
                    _mark_pending(job, f"queue {queue.name} is overused: it holds more than it deserves")
                continue
            job = waiting[queue.name].popleft()
            if not waiting[queue.name]:
                del waiting[queue.name]
            if ssn.should_stop():
                # Shutting down or no longer leading: decide nothing more; what was decided
                # for the jobs before this one stands.
                _log.info("allocate stopped before deciding every job", job=job.key)
                return
            if queue.state != QUEUE_OPEN:
                _mark_pending(job, f"queue {queue.name} is {queue.state}")
                continue
            if is_pending(job):
                _mark_pending(job, f"pod group {job.key} is not admitted yet (phase Pending)")
                continue
            verdict = ssn.job_valid(job)
            if verdict is not None:
                _mark_pending(job, verdict.message or verdict.reason)
                continue
            self._allocate_job(ssn, queue, job, nodes, nodes_to_find)

    def _allocate_job(
        self, ssn: Session, queue: QueueInfo, job: JobInfo, nodes: list[NodeInfo], nodes_to_find: int
    ) -> None:
        pending = schedulable_pending(ssn, job, best_effort=False)
        best_effort_pending = sum(1 for task in job.pending_tasks() if task.best_effort)
        statement = Statement(ssn)
        failures: list[TaskInfo] = []
        for index, task in enumerate(pending):
            if ssn.should_stop():
                # Mid-job: the job's placements so far are rolled back, none is bound.
                _log.info("allocate stopped inside a job; its placements are rolled back", job=job.key)
                statement.discard()
                return
            if not ssn.allocatable(queue, task):
                fault = ssn.fault_of(task)
                task.fit_error = fault.message if fault else f"queue {queue.name} cannot take this task now"
                failures.append(task)
                continue
            pre = ssn.pre_predicate(task)
            if not pre.passed:
                task.fit_error = pre.reason or f"rejected by {pre.plugin}"
                failures.append(task)
            else:
                candidates = feasible_nodes(ssn, task, nodes, check_resources=True, nodes_to_find=nodes_to_find)
                if candidates and ssn.fault_of(task) is None:
                    node = choose_node(ssn, task, candidates)
                    if ssn.fault_of(task) is None:
                        if task.init_resreq.fits_in(node.idle):
                            held = statement.allocate(task, node)
                        else:
                            held = statement.pipeline(task, node)
                        if held:
                            continue
                fault = ssn.fault_of(task)
                task.fit_error = fault.message if fault is not None else ssn.fit_error_message(task)
                failures.append(task)
            # Keep going only while the gang can still be met by the tasks left to try.
            remaining = len(pending) - index - 1 + best_effort_pending
            if job.ready_task_num() + job.waiting_task_num() + remaining < job.min_available:
                break
        placed = job.ready_task_num() + job.waiting_task_num()
        outcome = settle_job(ssn, job, statement)
        if outcome is JobOutcome.KEPT:
            for task in pending:
                if task.node_name and not task.fit_error:
                    task.fit_error = f"pod group {job.key} is pipelined: waiting for resources being released"
        _mark_pending(job, _gang_message(job, placed, failures))
        _log.debug("job allocated", job=job.key, outcome=outcome.value, placed=placed, failed=len(failures))
