"""preempt and gangpreempt: a starving job takes room from lower jobs of its own queue (Volcano).

Volcano's flow: queues in queue order; in each, the starving jobs (placed + pipelined below
minAvailable under gang, else any task unplaced) in job order; each pending task of the job in
task order tries the nodes; on a node the candidates (Running or Bound tasks of other jobs of the
same queue, not marked `volcano.sh/preemptable: "false"`) go through the plugins' preemptable
vote, the victims are evicted in the statement and the preemptor is pipelined there. The job's
statements are committed only when the job is then pipelined (gang: all or nothing); otherwise
every eviction is rolled back.

Where numasched differs, on purpose: the victims on a node are the smallest set, in Volcano's
victim order (lowest job, then lowest task first), whose removal lets the preemptor pass the
session's predicates on a copy of the node -- the numa-aware predicate there is the kubelet
admission the allocate action uses, so pods whose CPUs or devices sit on the wrong NUMA node are
never evicted for nothing. Among nodes, the one needing the fewest victims wins (then the name).
Tasks already releasing count as gone. The search is exhaustive by set size within a budget of
predicate calls per node (VICTIM_SEARCH_BUDGET); past it, the first sufficient prefix of the
victim order is pruned until every victim left is necessary.

After the jobs of a queue, preempt (not gangpreempt, as in Volcano) lets the tasks of each job
that was starving at the start preempt lower-priority tasks of that same job (Volcano's
"preemption between tasks within a job"): each pending task, in task order, with candidates the
job's own evictable tasks, chosen as above; its evictions are committed at once when it is
pipelined, and the job's turn ends at the first task that finds no room. The priority plugin's
vote lets a task go only when its own priority is below the preemptor's.

gangpreempt (Volcano v1.15) evicts victims by bundles: a victim job's tasks beyond its
minAvailable go one by one, but taking one more takes the whole gang (every one of its running
tasks, on any node), so no victim job is left running below its minimum.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Sequence

import attrs
import structlog

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import QueueInfo
from numasched.api.task import TaskInfo, TaskStatus
from numasched.scheduler.actions import queue_points
from numasched.scheduler.actions.enqueue import QUEUE_OPEN, is_pending
from numasched.scheduler.framework.session import Session
from numasched.scheduler.framework.statement import Statement

_log = structlog.get_logger(__name__)

PREEMPT = "preempt"
GANG_PREEMPT = "gangpreempt"
# Volcano's PreemptableStatus: only tasks that hold their node may be evicted.
EVICTABLE_STATUSES = frozenset({TaskStatus.RUNNING, TaskStatus.BOUND})
PREEMPTABLE_ANNOTATION = "volcano.sh/preemptable"
# Predicate calls on node copies one victim search may spend before it settles for a pruned set.
VICTIM_SEARCH_BUDGET = 256

VictimVote = Callable[[TaskInfo, Sequence[TaskInfo]], list[TaskInfo]]
CandidateFilter = Callable[[TaskInfo, TaskInfo], bool]


# Go's strconv.ParseBool spellings of true (any other value, "false" or garbage, is false).
_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})


def marked_preemptable(task: TaskInfo) -> bool:
    """Volcano's GetPodPreemptable: the pod's volcano.sh/preemptable annotation, else its label of
    that name, else preemptable; a value Go's ParseBool does not read means not preemptable."""
    value = task.annotations.get(PREEMPTABLE_ANNOTATION)
    if value is None:
        value = task.labels.get(PREEMPTABLE_ANNOTATION)
    if value is None:
        return True
    return value in _GO_TRUE


def evictable(task: TaskInfo) -> bool:
    return task.status in EVICTABLE_STATUSES and marked_preemptable(task)


def job_starving(ssn: Session, job: JobInfo) -> bool:
    """Volcano's JobStarving: under gang, placed + pipelined below minAvailable; without gang,
    any task not yet placed or pipelined."""
    occupied = job.ready_task_num() + job.waiting_task_num()
    if "gang" in ssn.plugins:
        return occupied < job.min_available
    return occupied < len(job.tasks)


def victim_order(ssn: Session, preemptor: TaskInfo | None = None) -> Callable[[TaskInfo, TaskInfo], int]:
    """Volcano's victim queue (BuildVictimsPriorityQueue): tasks of jobs in different queues by
    the victim queue order for the preemptor's queue (queue_points.victim_queue_order); then the
    lowest job first (job order reversed), then within a job the lowest task first (task order
    reversed)."""
    preemptor_job = ssn.jobs.get(preemptor.job_id) if preemptor is not None else None

    def compare(first: TaskInfo, second: TaskInfo) -> int:
        if first.job_id != second.job_id:
            first_job, second_job = ssn.jobs.get(first.job_id), ssn.jobs.get(second.job_id)
            if first_job is not None and second_job is not None:
                if preemptor_job is not None and first_job.queue != second_job.queue:
                    verdict = queue_points.victim_queue_order(
                        ssn, ssn.queue_of(first_job), ssn.queue_of(second_job), ssn.queue_of(preemptor_job)
                    )
                    if verdict != 0:
                        return verdict
                verdict = -ssn.job_order(first_job, second_job)
                if verdict != 0:
                    return verdict
        return -ssn.task_order(first, second)

    return compare


@attrs.frozen(slots=True)
class VictimUnit:
    """Tasks evicted together: one task, or a victim gang taken whole."""

    tasks: tuple[TaskInfo, ...]


@attrs.frozen(slots=True)
class Choice:
    node: NodeInfo
    units: tuple[VictimUnit, ...]

    @property
    def victims(self) -> list[TaskInfo]:
        return [task for unit in self.units for task in unit.tasks]


def units_for(
    ssn: Session, ordered: Sequence[TaskInfo], *, gang: bool, vote: VictimVote, evictor: TaskInfo
) -> list[VictimUnit]:
    """The victims as eviction units, in victim order. Without gang each task is a unit; with
    gang a job's tasks beyond its minAvailable are units of one and the rest of the job one unit
    holding every evictable task of the job (kept only when the plugins let all of them go)."""
    if not gang:
        return [VictimUnit((task,)) for task in ordered]
    units: list[VictimUnit] = []
    taken: dict[str, int] = {}
    whole_done: set[str] = set()
    for task in ordered:
        job = ssn.jobs.get(task.job_id)
        if job is None:
            continue
        spare = job.ready_task_num() - job.min_available
        used = taken.get(job.uid, 0)
        if used < spare:
            taken[job.uid] = used + 1
            units.append(VictimUnit((task,)))
            continue
        if job.uid in whole_done:
            continue
        whole_done.add(job.uid)
        singles = {unit.tasks[0].uid for unit in units if unit.tasks[0].job_id == job.uid}
        rest = [t for t in job.tasks.values() if evictable(t) and t.uid not in singles]
        allowed = {t.uid for t in vote(evictor, rest)}
        if rest and all(t.uid in allowed for t in rest):
            units.append(VictimUnit(tuple(sorted(rest, key=lambda t: t.uid))))
    return units


def evicted_count(units: Iterable[VictimUnit]) -> int:
    return sum(len(unit.tasks) for unit in units)


class VictimSearch:
    """Whether the preemptor fits a copy of one node once some victims are gone."""

    def __init__(self, ssn: Session, preemptor: TaskInfo, node: NodeInfo) -> None:
        self.ssn = ssn
        self.preemptor = preemptor
        self.node = node
        self.calls = 0
        # Tasks already on their way out count as gone.
        self._releasing = [task for task in node.tasks.values() if task.status is TaskStatus.RELEASING]

    def fits(self, units: Iterable[VictimUnit]) -> bool:
        self.calls += 1
        copy = self.node.clone()
        for task in self._releasing:
            copy.remove_task(task)
        for unit in units:
            for task in unit.tasks:
                if task.node_name == self.node.name:
                    copy.remove_task(task)
        if self.preemptor.init_resreq.insufficient_after(copy.idle, Resource(), copy.pipelined):
            return False
        return self.ssn.predicate(self.preemptor, copy).passed

    def smallest(self, units: Sequence[VictimUnit]) -> tuple[VictimUnit, ...] | None:
        """The sufficient set evicting the fewest tasks (the earliest in victim order among
        equals), None when even all of them do not make room."""
        if self.fits(()):
            return ()
        prefix: list[VictimUnit] = []
        for unit in units:
            prefix.append(unit)
            if self.fits(prefix):
                break
        else:
            return None
        best: tuple[VictimUnit, ...] = tuple(prefix)
        best_tasks = evicted_count(best)
        for size in range(1, len(units) + 1):
            # Every unit evicts at least one task: a bigger set cannot evict fewer.
            if size >= best_tasks:
                break
            for combination in itertools.combinations(units, size):
                if evicted_count(combination) >= best_tasks:
                    continue
                if self.calls >= VICTIM_SEARCH_BUDGET:
                    return self._pruned(list(best))
                if self.fits(combination):
                    best, best_tasks = combination, evicted_count(combination)
        return best

    def _pruned(self, sufficient: list[VictimUnit]) -> tuple[VictimUnit, ...]:
        """Drop, highest in the order first, every unit the others do without."""
        kept = list(sufficient)
        for unit in reversed(sufficient):
            trial = [other for other in kept if other is not unit]
            if self.fits(trial):
                kept = trial
        return tuple(kept)


def choose_victims(
    ssn: Session,
    preemptor: TaskInfo,
    nodes: Sequence[NodeInfo],
    candidate: Callable[[TaskInfo], bool],
    vote: VictimVote,
    *,
    gang: bool,
) -> Choice | None:
    """The node needing the fewest victims (then the first by name), and those victims."""
    # A node with room already (pods terminating there, or room a rolled-back gang left) needs
    # no victim: the best choice.
    for node in nodes:
        if could_fit(preemptor, node, ()) and VictimSearch(ssn, preemptor, node).fits(()):
            return Choice(node, ())
    order = functools.cmp_to_key(victim_order(ssn, preemptor))
    best: Choice | None = None
    for node in nodes:
        candidates = [task for task in node.tasks.values() if candidate(task)]
        # The bound first with every candidate, then with those the plugins let go.
        if not candidates or not could_fit(preemptor, node, candidates):
            continue
        allowed = vote(preemptor, candidates)
        if not allowed or not could_fit(preemptor, node, allowed):
            continue
        units = units_for(ssn, sorted(allowed, key=order), gang=gang, vote=vote, evictor=preemptor)
        found = VictimSearch(ssn, preemptor, node).smallest(units)
        if not found:
            # None: no room even with every victim gone; (): fits without one, seen above.
            continue
        choice = Choice(node, found)
        if best is None or len(choice.victims) < len(best.victims):
            best = choice
        if len(best.victims) <= 1:
            # No node needs none (checked above): one victim cannot be beaten.
            break
    return best


def could_fit(preemptor: TaskInfo, node: NodeInfo, allowed: Sequence[TaskInfo]) -> bool:
    """A cheap bound before any node copy: the preemptor's request within what the node would
    have free with every allowed victim and every releasing pod gone."""
    if not allowed:
        return not preemptor.init_resreq.insufficient_after(node.idle, node.releasing, node.pipelined)
    freed = Resource().add(node.releasing)
    for task in allowed:
        freed.add(task.resreq)
    return not preemptor.init_resreq.insufficient_after(node.idle, freed, node.pipelined)


def preemptor_jobs(ssn: Session) -> dict[str, list[JobInfo]]:
    """Starving, admitted, valid jobs with pending tasks, by queue."""
    by_queue: dict[str, list[JobInfo]] = {}
    for job in ssn.jobs.values():
        if is_pending(job) or not job.pending_tasks() or not job_starving(ssn, job):
            continue
        if ssn.queue_of(job).state != QUEUE_OPEN or ssn.job_valid(job) is not None:
            continue
        by_queue.setdefault(job.queue, []).append(job)
    return by_queue


def pending_preemptors(ssn: Session, job: JobInfo) -> list[TaskInfo]:
    return ssn.sorted_tasks(
        task for task in job.pending_tasks() if task.uid not in ssn.held_back and not task.best_effort
    )


def place_with_evictions(
    ssn: Session,
    queue: QueueInfo,
    preemptor: TaskInfo,
    choice: Choice,
    reason: str,
    *,
    check_queue: bool,
) -> Statement | None:
    """Evict the victims and pipeline the preemptor in a statement of its own; None (rolled
    back) when the queue still cannot take it or a plugin's handler refused."""
    statement = Statement(ssn)
    evicted: set[str] = set()
    for victim in choice.victims:
        if victim.uid in evicted or victim.status not in EVICTABLE_STATUSES:
            continue
        evicted.add(victim.uid)
        statement.evict(victim, reason)
    if check_queue and not ssn.allocatable(queue, preemptor):
        statement.discard()
        return None
    if not statement.pipeline(preemptor, choice.node):
        statement.discard()
        return None
    return statement


def settle(ssn: Session, job: JobInfo, statements: list[Statement]) -> bool:
    """Commit every statement of the job when it is pipelined now, else roll them all back."""
    if statements and ssn.job_pipelined(job):
        for statement in statements:
            statement.commit()
        return True
    for statement in reversed(statements):
        statement.discard()
    return False


class PreemptAction:
    """Volcano's preempt between jobs of one queue (gang=False) or gangpreempt (gang=True)."""

    def __init__(self, name: str = PREEMPT, *, gang: bool = False) -> None:
        self.name = name
        self.gang = gang

    def execute(self, ssn: Session) -> None:
        nodes = sorted(ssn.nodes.values(), key=lambda node: node.name)
        by_queue = preemptor_jobs(ssn)
        queues = queue_points.sorted_queues(ssn, (ssn.queues.get(name) or QueueInfo(name) for name in by_queue))
        for queue in queues:
            for job in ssn.sorted_jobs(by_queue[queue.name]):
                if ssn.should_stop():
                    return
                self._preempt_for(ssn, queue, job, nodes)
            if not self.gang:
                for job in by_queue[queue.name]:
                    if ssn.should_stop():
                        return
                    preempt_within_job(ssn, queue, job, nodes, self.name)

    def _preempt_for(self, ssn: Session, queue: QueueInfo, job: JobInfo, nodes: list[NodeInfo]) -> None:
        statements: list[Statement] = []

        def candidate(task: TaskInfo) -> bool:
            victim_job = ssn.jobs.get(task.job_id)
            return (
                evictable(task) and task.job_id != job.uid and victim_job is not None and victim_job.queue == job.queue
            )

        for preemptor in pending_preemptors(ssn, job):
            if not job_starving(ssn, job):
                break
            if not ssn.pre_predicate(preemptor).passed:
                continue
            choice = choose_victims(ssn, preemptor, nodes, candidate, ssn.preemptable, gang=self.gang)
            if choice is None:
                continue
            reason = f"preempted by {preemptor.key} ({self.name})"
            statement = place_with_evictions(ssn, queue, preemptor, choice, reason, check_queue=True)
            if statement is not None:
                statements.append(statement)
        if settle(ssn, job, statements):
            _log.info("preemption committed", action=self.name, job=job.key, placements=len(statements))


def preempt_within_job(ssn: Session, queue: QueueInfo, job: JobInfo, nodes: list[NodeInfo], action: str) -> None:
    """Volcano's preemption between tasks within a job: each pending task, in task order, may
    evict the job's own lower tasks; committed per task, and the first task that finds no room
    ends the job's turn."""

    def candidate(task: TaskInfo) -> bool:
        return evictable(task) and task.job_id == job.uid

    for preemptor in pending_preemptors(ssn, job):
        if not ssn.pre_predicate(preemptor).passed:
            break
        choice = choose_victims(ssn, preemptor, nodes, candidate, ssn.preemptable, gang=False)
        if choice is None:
            break
        reason = f"preempted by {preemptor.key} of the same job ({action})"
        statement = place_with_evictions(ssn, queue, preemptor, choice, reason, check_queue=True)
        if statement is None:
            break
        statement.commit()
        _log.info("preemption within a job committed", action=action, job=job.key, preemptor=preemptor.key)
