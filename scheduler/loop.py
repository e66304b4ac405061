"""The scheduling loop: snapshot -> session -> bind, every period, until told to stop.

run_session is the pure part (a snapshot in, decisions out). schedule_cycle adds the edges:
it assumes every placement in the cache before binding, so the next snapshot already sees it,
binds concurrently with a bound on parallelism and time, and forgets a placement whose bind failed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import anyio
import attrs
import structlog

from numasched.api.allocation import PodAllocation
from numasched.api.job import JobInfo
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo, TaskStatus
from numasched.cache.binder import BindOutcome, BindRequest, BindStatus
from numasched.conf.model import SchedulerConfig
from numasched.scheduler.registry import Registry
from numasched.scheduler.session import JobUpdate, Session
from numasched.scheduler.statement import Eviction

_log = structlog.get_logger(__name__)

_T = TypeVar("_T")

DEFAULT_BIND_CONCURRENCY = 16
DEFAULT_BIND_TIMEOUT_S = 30.0
DEFAULT_REPORT_TIMEOUT_S = 10.0


class CacheLike(Protocol):
    def snapshot(self) -> ClusterSnapshot: ...

    def assume(self, task_uid: str, node_name: str, allocation: PodAllocation | None) -> None: ...

    def forget(self, task_uid: str) -> None: ...


class BinderLike(Protocol):
    async def bind(self, request: BindRequest) -> BindOutcome: ...


class ReporterLike(Protocol):
    async def scheduled(self, task: TaskInfo, node_name: str) -> None: ...

    async def unschedulable(self, task: TaskInfo, message: str) -> None: ...

    async def job_status(self, job: JobInfo, phase: str, message: str) -> None: ...


@attrs.frozen(slots=True)
class Unschedulable:
    task: TaskInfo
    message: str


@attrs.frozen(slots=True)
class SessionResult:
    bind_requests: tuple[BindRequest, ...] = ()
    # Every task pending at the start that is not being bound, with why.
    unschedulable: tuple[Unschedulable, ...] = ()
    job_updates: tuple[JobUpdate, ...] = ()
    evictions: tuple[Eviction, ...] = ()

    @property
    def fit_errors(self) -> dict[str, str]:
        return {entry.task.uid: entry.message for entry in self.unschedulable}


@attrs.frozen(slots=True)
class CycleResult:
    session: SessionResult
    outcomes: dict[str, BindOutcome] = attrs.field(factory=dict)
    seconds: float = 0.0


def run_session(snapshot: ClusterSnapshot, config: SchedulerConfig, registry: Registry) -> SessionResult:
    """Open a session on the snapshot, run the configured actions, close it. Changes only the
    snapshot it is given."""
    actions = [registry.action(name) for name in config.actions]
    ssn = Session(snapshot, config, registry)
    pending_at_start = ssn.pending_tasks()
    ssn.open()
    try:
        for action in actions:
            action.execute(ssn)
    finally:
        ssn.close()
    binding = {request.task.uid for request in ssn.bind_requests}
    unschedulable = tuple(
        Unschedulable(task, task.fit_error or _unattempted_message(task, config))
        for task in sorted(pending_at_start, key=lambda task: task.key)
        if task.uid not in binding
    )
    return SessionResult(
        bind_requests=tuple(ssn.bind_requests),
        unschedulable=unschedulable,
        job_updates=tuple(ssn.job_updates.values()),
        evictions=tuple(ssn.evictions),
    )


def _unattempted_message(task: TaskInfo, config: SchedulerConfig) -> str:
    kind = "best-effort " if task.best_effort else ""
    placed = f" (held on {task.node_name}, {task.status.value})" if task.status is not TaskStatus.PENDING else ""
    return f"no configured action placed this {kind}task{placed}; actions: {', '.join(config.actions) or '(none)'}"


async def _bounded(call: Callable[[], Awaitable[_T]], timeout_s: float) -> _T:
    with anyio.fail_after(timeout_s):
        return await call()


async def _bind_one(
    request: BindRequest,
    cache: CacheLike,
    binder: BinderLike,
    reporter: ReporterLike,
    limiter: anyio.CapacityLimiter,
    timeout_s: float,
    outcomes: dict[str, BindOutcome],
) -> None:
    task = request.task
    log = _log.bind(pod=task.key, node=request.node_name)
    async with limiter:
        try:
            outcome = await _bounded(lambda: binder.bind(request), timeout_s)
        except TimeoutError:
            outcome = BindOutcome(BindStatus.FAILED, f"no answer within {timeout_s:g}s")
        except Exception as error:  # the binder is I/O; whatever it raises fails this bind only
            outcome = BindOutcome(BindStatus.FAILED, f"{type(error).__name__}: {error}")
    outcomes[task.uid] = outcome
    if outcome.status is BindStatus.BOUND:
        log.info("pod bound")
        await _report(lambda: reporter.scheduled(task, request.node_name), log)
        return
    cache.forget(task.uid)
    log.warning("bind failed, placement forgotten", status=outcome.status.value, message=outcome.message)
    if outcome.status is BindStatus.FAILED:
        message = f"binding to node {request.node_name} failed: {outcome.message}"
        await _report(lambda: reporter.unschedulable(task, message), log)


async def _report(call: Callable[[], Awaitable[None]], log: structlog.typing.FilteringBoundLogger) -> None:
    try:
        await _bounded(call, DEFAULT_REPORT_TIMEOUT_S)
    except Exception as error:  # status reporting is best effort; scheduling goes on
        log.warning("status report failed", error=f"{type(error).__name__}: {error}")


async def schedule_cycle(
    cache: CacheLike,
    config: SchedulerConfig,
    registry: Registry,
    binder: BinderLike,
    reporter: ReporterLike,
    *,
    bind_concurrency: int = DEFAULT_BIND_CONCURRENCY,
    bind_timeout_s: float = DEFAULT_BIND_TIMEOUT_S,
) -> CycleResult:
    started = time.monotonic()
    snapshot = cache.snapshot()
    # The session is CPU-bound; a worker thread keeps watch events flowing meanwhile.
    result = await anyio.to_thread.run_sync(run_session, snapshot, config, registry)
    for request in result.bind_requests:
        cache.assume(request.task.uid, request.node_name, request.task.allocation)
    outcomes: dict[str, BindOutcome] = {}
    limiter = anyio.CapacityLimiter(max(1, bind_concurrency))
    async with anyio.create_task_group() as group:
        for request in result.bind_requests:
            group.start_soon(_bind_one, request, cache, binder, reporter, limiter, bind_timeout_s, outcomes)
        for entry in result.unschedulable:
            group.start_soon(_report_unschedulable, entry, reporter, limiter)
        for update in result.job_updates:
            group.start_soon(_report_job, update, reporter, limiter)
    for eviction in result.evictions:
        _log.warning(
            "eviction decided but this scheduler has no evictor; the pod keeps running",
            pod=eviction.task.key,
            node=eviction.node_name,
            reason=eviction.reason,
        )
    seconds = time.monotonic() - started
    _log.debug(
        "cycle done",
        bound=sum(1 for outcome in outcomes.values() if outcome.status is BindStatus.BOUND),
        unschedulable=len(result.unschedulable),
        seconds=round(seconds, 4),
    )
    return CycleResult(result, outcomes, seconds)


async def _report_unschedulable(entry: Unschedulable, reporter: ReporterLike, limiter: anyio.CapacityLimiter) -> None:
    async with limiter:
        await _report(lambda: reporter.unschedulable(entry.task, entry.message), _log.bind(pod=entry.task.key))


async def _report_job(update: JobUpdate, reporter: ReporterLike, limiter: anyio.CapacityLimiter) -> None:
    async with limiter:
        await _report(
            lambda: reporter.job_status(update.job, update.phase, update.message), _log.bind(job=update.job.key)
        )


async def run_loop(
    cache: CacheLike,
    current_config: Callable[[], SchedulerConfig],
    registry: Registry,
    binder: BinderLike,
    reporter: ReporterLike,
    *,
    period_s: float,
    stop: anyio.Event,
    bind_concurrency: int = DEFAULT_BIND_CONCURRENCY,
    bind_timeout_s: float = DEFAULT_BIND_TIMEOUT_S,
    on_cycle: Callable[[CycleResult], None] | None = None,
) -> int:
    """Run a cycle every period (measured start to start) until `stop` is set; the config is
    read afresh each cycle so a reload takes effect at the next one. A cycle that fails is logged
    and the loop goes on. Returns the number of cycles run."""
    if not math.isfinite(period_s) or period_s <= 0:
        raise ValueError(f"schedule period must be a positive number of seconds, got {period_s!r}")
    cycles = 0
    while not stop.is_set():
        started = time.monotonic()
        try:
            result = await schedule_cycle(
                cache,
                current_config(),
                registry,
                binder,
                reporter,
                bind_concurrency=bind_concurrency,
                bind_timeout_s=bind_timeout_s,
            )
        except Exception:  # one bad cycle (a plugin bug, a bad config) must not stop scheduling
            _log.exception("scheduling cycle failed")
        else:
            if on_cycle is not None:
                on_cycle(result)
        cycles += 1
        with anyio.move_on_after(max(0.0, period_s - (time.monotonic() - started))):
            await stop.wait()
    return cycles
