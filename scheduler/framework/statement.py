"""A statement: a job's allocate / pipeline / evict operations, kept in the session's memory until
they are committed (bound) or discarded (rolled back) together, as Volcano's Statement."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

import attrs
import structlog

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.task import TaskInfo, TaskStatus
from numasched.cache.binder import BindRequest, binding_annotations
from numasched.scheduler.framework.session import POINT_ALLOCATE_EVENT, POINT_DEALLOCATE_EVENT, Event, Session
from numasched.scheduler.framework.status import PluginFault

__all__ = ["BindRequest", "CommittedBinds", "Eviction", "JobOutcome", "Statement", "settle_job"]

_log = structlog.get_logger(__name__)


class _Kind(enum.Enum):
    ALLOCATE = "allocate"
    PIPELINE = "pipeline"
    EVICT = "evict"


@attrs.frozen(slots=True)
class Eviction:
    task: TaskInfo
    node_name: str
    reason: str


@attrs.frozen(slots=True)
class _Operation:
    kind: _Kind
    task: TaskInfo
    node: NodeInfo
    # For an eviction: the status to restore on discard.
    previous_status: TaskStatus = TaskStatus.PENDING
    reason: str = ""


class Statement:
    def __init__(self, ssn: Session) -> None:
        self.ssn = ssn
        self._operations: list[_Operation] = []

    def __len__(self) -> int:
        return len(self._operations)

    def _fire_allocate(self, task: TaskInfo, node: NodeInfo) -> PluginFault | None:
        """Run every allocate handler; the fault of the first one that raises (the handlers
        after it are not run)."""
        handlers = self.ssn.event_handlers
        index = 0
        try:
            for index, handler in enumerate(handlers):  # noqa: B007 - read in the except
                if handler.allocate is not None:
                    handler.allocate(Event(task, node))
        except Exception as error:
            plugin = self.ssn.event_handler_plugin(index)
            return self.ssn.record_fault(plugin, POINT_ALLOCATE_EVENT, error, task=task)
        return None

    def _fire_deallocate(self, task: TaskInfo, node: NodeInfo) -> None:
        """Run every deallocate handler, even after one raised: each must drop what it holds."""
        for index, handler in enumerate(self.ssn.event_handlers):
            if handler.deallocate is None:
                continue
            try:
                handler.deallocate(Event(task, node))
            except Exception as error:
                self.ssn.record_fault(self.ssn.event_handler_plugin(index), POINT_DEALLOCATE_EVENT, error, task=task)

    def _place(self, task: TaskInfo, node: NodeInfo, status: TaskStatus, kind: _Kind) -> bool:
        """Place the task; False, with nothing placed, when an allocate handler raised (the
        fault is on the session)."""
        if task.status is not TaskStatus.PENDING:
            raise ValueError(f"task {task.key} is {task.status.value}, only a pending task can be placed")
        task.status = status
        task.node_name = node.name
        accounted = task.allocation
        node.add_task(task)
        job = self.ssn.jobs.get(task.job_id)
        if job is not None:
            job.add_task(task)
        self._operations.append(_Operation(kind, task, node))
        # Handlers run after the node holds the task (as in Volcano); the numa-aware plugin decides
        # task.allocation there, and the node's NUMA ledger must then hold that decision.
        fault = self._fire_allocate(task, node)
        if fault is not None:
            # Undo this placement alone, as a roll back would: every handler is told, so the
            # ones that ran before the faulty one (and that one) drop what they recorded; the
            # ledger holds only what add_task put there, so the task's allocation goes back to
            # that before the node lets it go.
            self._operations.pop()
            task.allocation = accounted
            node.remove_task(task)
            self._fire_deallocate(task, node)
            task.status = TaskStatus.PENDING
            task.node_name = ""
            return False
        node.replace_allocation(accounted, task.allocation)
        return True

    def allocate(self, task: TaskInfo, node: NodeInfo) -> bool:
        """Place a pending task on a node whose idle resources hold it. Predicates are not re-run:
        the caller has already checked them. False when a plugin's allocate handler raised: the
        task is then pending again, and the session holds the fault it fails with."""
        return self._place(task, node, TaskStatus.ALLOCATED, _Kind.ALLOCATE)

    def pipeline(self, task: TaskInfo, node: NodeInfo) -> bool:
        """Place a pending task on a node that will hold it once releasing tasks are gone (False
        as for allocate)."""
        return self._place(task, node, TaskStatus.PIPELINED, _Kind.PIPELINE)

    def evict(self, task: TaskInfo, reason: str) -> None:
        node = self.ssn.nodes.get(task.node_name)
        if node is None or task.uid not in node.tasks:
            raise ValueError(f"task {task.key} is not on a node of this session, it cannot be evicted")
        previous = task.status
        # remove_task reads the stored status, so it must go before the status changes.
        node.remove_task(task)
        task.status = TaskStatus.RELEASING
        node.add_task(task)
        self._operations.append(_Operation(_Kind.EVICT, task, node, previous, reason))
        self._fire_deallocate(task, node)

    def _undo(self, operation: _Operation) -> None:
        task, node = operation.task, operation.node
        if operation.kind is _Kind.EVICT:
            node.remove_task(task)
            task.status = operation.previous_status
            node.add_task(task)
            self._fire_allocate(task, node)
            return
        node.remove_task(task)
        self._fire_deallocate(task, node)
        task.status = TaskStatus.PENDING
        task.node_name = ""
        task.allocation = None

    def discard(self) -> None:
        """Roll back every operation, the last one first."""
        while self._operations:
            self._undo(self._operations.pop())

    def commit(self) -> list[BindRequest]:
        """Bind requests for the allocated tasks (now Binding); evictions are recorded on the
        session; pipelined tasks stay pipelined in the session."""
        requests: list[BindRequest] = []
        for operation in self._operations:
            task, node = operation.task, operation.node
            if operation.kind is _Kind.ALLOCATE:
                annotations = binding_annotations(task, node)
                requests.append(BindRequest(task, node.name, annotations))
                task.status = TaskStatus.BINDING
                if annotations:
                    # The pod as the API server will hold it once bound (a new dict: the session's
                    # copy of the task shares the cache's).
                    task.annotations = {**task.annotations, **annotations}
            elif operation.kind is _Kind.EVICT:
                self.ssn.evictions.append(Eviction(task, node.name, operation.reason))
        self._operations.clear()
        return requests


class CommittedBinds(list[BindRequest]):
    """A session's bind requests that also hands each job's requests, the moment the job is
    committed, to a consumer (the loop, which assumes and binds them while the session goes on
    deciding). Installed as the session's bind_requests; a plain list collects without streaming."""

    def __init__(self, on_commit: Callable[[Sequence[BindRequest]], None]) -> None:
        super().__init__()
        self._on_commit = on_commit

    def commit(self, requests: Sequence[BindRequest]) -> None:
        self.extend(requests)
        if requests:
            self._on_commit(requests)


def _hand_on(ssn: Session, requests: list[BindRequest]) -> None:
    """One job's committed requests: onto the session, and on to the binder when it streams."""
    if isinstance(ssn.bind_requests, CommittedBinds):
        ssn.bind_requests.commit(requests)
    else:
        ssn.bind_requests.extend(requests)


class JobOutcome(enum.Enum):
    COMMITTED = "committed"
    KEPT = "kept"
    DISCARDED = "discarded"


def settle_job(ssn: Session, job: JobInfo, statement: Statement) -> JobOutcome:
    """Volcano's end of a job's turn: bind when the job is ready (together with what earlier turns
    kept for it), keep the placements in the session when it is pipelined, else roll back."""
    if ssn.job_ready(job):
        requests: list[BindRequest] = []
        for kept in ssn.kept_statements.pop(job.uid, []):
            requests.extend(kept.commit())
        requests.extend(statement.commit())
        # A gang's requests go out together, only now that the whole gang is placed.
        _hand_on(ssn, requests)
        return JobOutcome.COMMITTED
    if ssn.job_pipelined(job):
        if len(statement):
            ssn.kept_statements.setdefault(job.uid, []).append(statement)
        return JobOutcome.KEPT
    _log.debug("job not ready, placements rolled back", job=job.key, operations=len(statement))
    statement.discard()
    return JobOutcome.DISCARDED
