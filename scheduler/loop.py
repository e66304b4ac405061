"""The scheduling loop: snapshot -> session -> bind, every period, until told to stop.

run_session is the pure part (a snapshot in, decisions out). The edges: each job is streamed out
of the session the moment it is committed (a gang once it is ready), assumed in the cache (so the
next snapshot already sees its CPUs and devices taken) and bound by a fixed pool of workers
(BindPipeline) while the session goes on deciding; a placement whose bind failed is forgotten.
schedule_cycle runs one cycle and returns when its binds are done; run_loop keeps one pipeline
for all its cycles, so the next cycle decides while the last one's binds are still in flight.

Stopping (SIGTERM, or leadership lost) is checked by the actions between jobs and tasks; once it
is asked for, no bind is sent that was not already sent, and the binds in flight get a grace
period to finish. A pod whose plugins raised is held back for a growing time (PodBackoff), as
kube-scheduler backs off a pod whose attempt failed, so one bad pod does not cost every cycle; a
pod that found no node waits among the unschedulable pods (loop_unschedulable) until a cluster
change and its backoff let it be tried again, so each cycle decides only new and re-activated pods.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import math
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Protocol, TypeVar

import anyio
import attrs
import structlog
from anyio.streams.memory import MemoryObjectReceiveStream

from numasched.api.allocation import PodAllocation
from numasched.api.node import NodeInfo
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo, TaskStatus
from numasched.cache.binder import Binder, BindOutcome, BindRequest, BindStatus, StatusReporter
from numasched.cache.eviction import Evictor, EvictRequest, eviction_call
from numasched.cache.queue_status import QueueStatusWriter, changed_queue_status, queue_status_call
from numasched.conf.model import SchedulerConfig
from numasched.scheduler.framework.registry import Registry
from numasched.scheduler.framework.session import JobUpdate, PluginOpenError, Session
from numasched.scheduler.framework.statement import CommittedBinds, Eviction
from numasched.scheduler.framework.status import PluginFault
from numasched.scheduler.loop_unschedulable import DEFAULT_BACKOFF as DEFAULT_BACKOFF  # re-exported
from numasched.scheduler.loop_unschedulable import BackoffPolicy as BackoffPolicy  # re-exported
from numasched.scheduler.loop_unschedulable import UnschedulablePods

_log = structlog.get_logger(__name__)

_T = TypeVar("_T")

DEFAULT_BIND_CONCURRENCY = 16
DEFAULT_BIND_TIMEOUT_S = 30.0
DEFAULT_REPORT_TIMEOUT_S = 10.0
# The session thread wakes the event loop with newly committed binds at most this often: each
# wake costs a hand-over of the GIL (a wake per job: 5,000-pod burst 35 s; at most every 50 ms: 30 s).
STREAM_WAKE_INTERVAL_S = 0.05
# Time the binds in flight get to finish once a stop is asked for.
DEFAULT_SHUTDOWN_GRACE_S = 5.0


class CacheLike(Protocol):
    def snapshot(self) -> ClusterSnapshot: ...

    def assume(self, task_uid: str, node_name: str, allocation: PodAllocation | None) -> None: ...

    def forget(self, task_uid: str) -> None: ...

    def offer_session_nodes(self, nodes: Mapping[str, NodeInfo]) -> None: ...


@attrs.frozen(slots=True)
class Unschedulable:
    task: TaskInfo
    message: str


@attrs.frozen(slots=True)
class SessionResult:
    bind_requests: tuple[BindRequest, ...] = ()
    # Every task pending at the start that is not being bound, with why; but those held back.
    unschedulable: tuple[Unschedulable, ...] = ()
    job_updates: tuple[JobUpdate, ...] = ()
    evictions: tuple[Eviction, ...] = ()
    # Queue name -> status.allocated to write (only the queues where it changed).
    queue_status: Mapping[str, Mapping[str, str]] = attrs.field(factory=dict)
    # Every distinct plugin exception of the session (plugin, extension point, subject).
    plugin_faults: tuple[PluginFault, ...] = ()
    # Task uid -> the plugin fault the task failed with (its own, or its job's).
    failed_by_plugin: Mapping[str, PluginFault] = attrs.field(factory=dict)
    # Uids of the tasks the session held back (backing off) and did not try. They were reported
    # when they failed; reporting them again each cycle would only repeat that.
    held_back: frozenset[str] = frozenset()
    # A stop was asked for during the session: it decided only part of the cluster.
    stopped: bool = False

    @property
    def fit_errors(self) -> dict[str, str]:
        return {entry.task.uid: entry.message for entry in self.unschedulable}


@attrs.frozen(slots=True)
class CycleResult:
    session: SessionResult
    outcomes: dict[str, BindOutcome] = attrs.field(factory=dict)
    seconds: float = 0.0


def _never_stop() -> bool:
    return False


def run_session(
    snapshot: ClusterSnapshot,
    config: SchedulerConfig,
    registry: Registry,
    *,
    should_stop: Callable[[], bool] = _never_stop,
    held_back: Mapping[str, str] | None = None,
    on_commit: Callable[[Sequence[BindRequest]], None] | None = None,
) -> SessionResult:
    """Open a session on the snapshot, run the configured actions, close it. Changes only the
    snapshot it is given. should_stop is asked between jobs and tasks (it may be called from
    this worker thread while the event loop sets it); held_back names tasks not to try, with why;
    on_commit, when given, gets each job's bind requests the moment the job is committed."""
    actions = [registry.action(name) for name in config.actions]
    ssn = Session(snapshot, config, registry, should_stop=should_stop, held_back=held_back)
    if on_commit is not None:
        ssn.bind_requests = CommittedBinds(on_commit)
    pending_at_start = ssn.pending_tasks()
    ssn.open()
    try:
        for action in actions:
            if should_stop():
                break
            action.execute(ssn)
    finally:
        ssn.close()
    binding = {request.task.uid for request in ssn.bind_requests}
    failed_by_plugin: dict[str, PluginFault] = {}
    unschedulable: list[Unschedulable] = []
    for task in sorted(pending_at_start, key=lambda task: task.key):
        if task.uid in binding or task.uid in ssn.held_back:
            continue
        fault = ssn.fault_of(task)
        if fault is not None:
            failed_by_plugin[task.uid] = fault
            message = fault.message
        else:
            message = task.fit_error or _unattempted_message(task, config)
        unschedulable.append(Unschedulable(task, message))
    result = SessionResult(
        bind_requests=tuple(ssn.bind_requests),
        unschedulable=tuple(unschedulable),
        job_updates=tuple(ssn.job_updates.values()),
        evictions=tuple(ssn.evictions),
        queue_status=changed_queue_status(ssn.jobs.values(), ssn.queues),
        plugin_faults=tuple(ssn.plugin_faults.values()),
        failed_by_plugin=failed_by_plugin,
        held_back=frozenset(ssn.held_back),
        stopped=should_stop(),
    )
    ssn.release()
    return result


@attrs.define(slots=True)
class _Backoff:
    failures: int
    until: float
    message: str


class PodBackoff:
    """Pods whose plugins raised, held back until their backoff ends. A pod tried again without
    a plugin fault (bound, or unschedulable for an ordinary reason) starts over."""

    def __init__(self, policy: BackoffPolicy = DEFAULT_BACKOFF) -> None:
        self.policy = policy
        self._entries: dict[str, _Backoff] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def failures(self, uid: str) -> int:
        entry = self._entries.get(uid)
        return entry.failures if entry is not None else 0

    def held_back(self, now: float) -> dict[str, str]:
        """Uid -> why, for the pods still backing off at `now`."""
        return {
            uid: f"backing off {self.policy.delay(entry.failures):g}s after {entry.failures} plugin error(s); "
            f"{entry.message}"
            for uid, entry in self._entries.items()
            if entry.until > now
        }

    def record(self, result: SessionResult, now: float) -> None:
        """Account one session: a failure extends its pod's backoff; a pod that was tried and did
        not fail by a plugin leaves the backoff."""
        for uid in [uid for uid in self._entries if uid not in result.held_back]:
            if uid not in result.failed_by_plugin:
                del self._entries[uid]
        for uid, fault in result.failed_by_plugin.items():
            entry = self._entries.get(uid)
            failures = 1 if entry is None else entry.failures + 1
            self._entries[uid] = _Backoff(failures, now + self.policy.delay(failures), fault.message)


def _unattempted_message(task: TaskInfo, config: SchedulerConfig) -> str:
    kind = "best-effort " if task.best_effort else ""
    placed = f" (held on {task.node_name}, {task.status.value})" if task.status is not TaskStatus.PENDING else ""
    return f"no configured action placed this {kind}task{placed}; actions: {', '.join(config.actions) or '(none)'}"


async def _bounded(call: Callable[[], Awaitable[_T]], timeout_s: float) -> _T:
    with anyio.fail_after(timeout_s):
        return await call()


@attrs.define(eq=False)
class _CycleBinds:
    """One cycle's share of the bind pipeline: the outcomes of its binds and when all of its work
    (binds and reports) is done. The session may be over long before."""

    outcomes: dict[str, BindOutcome] = attrs.Factory(dict)
    queued: int = 0
    sealed: bool = False
    done: anyio.Event = attrs.Factory(anyio.Event)

    def added(self) -> None:
        self.queued += 1

    def finished_one(self) -> None:
        self.queued -= 1
        if self.sealed and self.queued <= 0:
            self.done.set()

    def seal(self) -> None:
        """Nothing more comes for this cycle."""
        self.sealed = True
        if self.queued <= 0:
            self.done.set()


@attrs.frozen(slots=True)
class _BindWork:
    request: BindRequest
    cycle: _CycleBinds


@attrs.frozen(slots=True)
class _ReportWork:
    call: Callable[[], Awaitable[None]]
    subject: str
    cycle: _CycleBinds


_Work = _BindWork | _ReportWork


@attrs.frozen
class _Binding:
    """What every bind worker shares: where binds and reports go, and whether a stop was asked for."""

    cache: CacheLike
    binder: Binder
    reporter: StatusReporter
    timeout_s: float
    stopping: Callable[[], bool]
    # Told why, each time a placement is forgotten after a bind that did not succeed.
    on_released: Callable[[str], None] | None = None
    # Where the victims of preempt / reclaim go; None: they keep running (logged).
    evictor: Evictor | None = None
    # Where Queue status.allocated goes; None: not written.
    queue_status: QueueStatusWriter | None = None


class BindPipeline:
    """A fixed pool of bind workers (bounded concurrency, not one task per pod) fed by a queue,
    for one cycle (schedule_cycle) or for a whole run of the loop (run_loop), where it lets the
    next cycle decide while the last one's binds are still in flight. Binds and reports are done
    in the order queued. Once a stop is asked for, nothing not yet sent is sent (its placement is
    forgotten) and the binds in flight get the shutdown grace; whatever was queued and never sent
    when the pipeline ends (grace over, cancelled) is forgotten too, so nothing stays assumed."""

    def __init__(self, binding: _Binding, concurrency: int) -> None:
        self.binding = binding
        self.concurrency = max(1, concurrency)
        # Unbounded: it holds at most the decisions of the cycles not yet bound, which exist anyway.
        self._send, self._receive = anyio.create_memory_object_stream[_Work](max_buffer_size=math.inf)
        # Assumed and queued but not taken by a bind worker yet: forgotten if never sent.
        self.unsent: dict[str, BindRequest] = {}
        self._open: set[_CycleBinds] = set()
        # Set when the unsent binds drop to the limit someone waits for (wait_for_room).
        self._room: anyio.Event | None = None
        self._room_limit = 0

    def queue(self, work: _Work) -> bool:
        """On the loop: queue work for the workers; False when the pipeline is closed."""
        try:
            self._send.send_nowait(work)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            return False
        work.cycle.added()
        self._open.add(work.cycle)
        if isinstance(work, _BindWork):
            self.unsent[work.request.task.uid] = work.request
        return True

    def close(self) -> None:
        """No more work: the workers finish what is queued (or skip it, once stopping) and end."""
        self._send.close()

    async def wait_for_room(self, limit: int, stop: anyio.Event) -> None:
        """Until at most `limit` binds wait for a worker, or `stop` is set. Deciding more while
        binds queue up (a slow API server) would only lengthen the queue and what is assumed."""
        while len(self.unsent) > limit and not stop.is_set():
            self._room_limit = limit
            self._room = anyio.Event()
            await _first_of(stop, self._room)
            self._room = None

    def _taken(self, uid: str) -> None:
        self.unsent.pop(uid, None)
        if self._room is not None and len(self.unsent) <= self._room_limit:
            self._room.set()

    def _done_with(self, work: _Work) -> None:
        work.cycle.finished_one()
        if work.cycle.done.is_set():
            self._open.discard(work.cycle)

    async def run(self, stop: anyio.Event | None, shutdown_grace_s: float) -> None:
        """The workers, until the pipeline is closed and its queue empty; once `stop` is set they
        get shutdown_grace_s to finish."""
        try:
            with anyio.CancelScope() as sending:
                async with anyio.create_task_group() as watch:
                    if stop is not None:
                        watch.start_soon(_limit_to_grace, stop, sending, shutdown_grace_s)
                    async with self._receive, anyio.create_task_group() as pool:
                        for _ in range(self.concurrency):
                            pool.start_soon(self._work_off, self._receive.clone())
                    watch.cancel_scope.cancel()
            if sending.cancelled_caught:
                _log.warning(
                    "shutdown grace over; binds in flight abandoned", grace=shutdown_grace_s, binds=len(self.unsent)
                )
        finally:
            self.forget_unsent()
            # Cycles whose work was cut off are as done as they will get.
            for cycle in self._open:
                cycle.done.set()
            self._open.clear()

    async def _work_off(self, receive: MemoryObjectReceiveStream[_Work]) -> None:
        binding = self.binding
        async with receive:
            async for work in receive:
                if isinstance(work, _BindWork):
                    self._taken(work.request.task.uid)
                    await _bind_one(work.request, binding, work.cycle.outcomes)
                elif not binding.stopping():
                    await _report(work.call, _log.bind(subject=work.subject))
                self._done_with(work)

    def forget_unsent(self) -> None:
        for uid in self.unsent:
            self.binding.cache.forget(uid)
        self.unsent.clear()
        if self._room is not None:
            self._room.set()


class _BindStream:
    """Bind requests committed in the session's worker thread, handed to the event loop as each
    job is committed. On the loop each is assumed in the cache (so the next snapshot sees its
    CPUs and devices taken; the session's own copy already does) and queued in the pipeline.
    Once a stop is asked for nothing more is assumed or queued.

    The worker thread never waits for the loop: it appends under a lock and wakes the loop once
    per batch, so deciding does not slow down while the loop is busy binding."""

    def __init__(
        self,
        cache: CacheLike,
        pipeline: BindPipeline,
        cycle: _CycleBinds,
        stopping: Callable[[], bool],
        wake_interval_s: float,
    ) -> None:
        self._cache = cache
        self._pipeline = pipeline
        self._cycle = cycle
        self._stopping = stopping
        self._loop = asyncio.get_running_loop()
        self._lock = threading.Lock()
        self._waiting: list[BindRequest] = []
        self._wake_scheduled = False
        self._wake_interval_s = wake_interval_s
        # Assumed and queued, in commit order: what the cycle hands to the binder.
        self.delivered: list[BindRequest] = []
        self.dropped = 0

    def publish(self, requests: Sequence[BindRequest]) -> None:
        """From the session thread: one job's committed requests. Never raises."""
        with self._lock:
            self._waiting.extend(requests)
            if self._wake_scheduled:
                # A wake is on its way, or one was just handled and the loop looks again within
                # the wake interval: these go with it.
                return
            self._wake_scheduled = True
        try:
            self._loop.call_soon_threadsafe(self.deliver)
        except RuntimeError:
            # The loop is closed (the cycle was abandoned): nothing can be bound any more.
            return

    def deliver(self) -> None:
        """On the loop: assume and queue what the session has committed so far. After a batch the
        loop looks again one wake interval later instead of being woken per job, so the session
        thread hands the GIL over at most once per interval and a committed job waits at most
        that long."""
        with self._lock:
            batch, self._waiting = self._waiting, []
            if not batch:
                self._wake_scheduled = False
        for request in batch:
            if self._stopping():
                self.dropped += 1
                continue
            task = request.task
            self._cache.assume(task.uid, request.node_name, task.allocation)
            if not self._pipeline.queue(_BindWork(request, self._cycle)):
                self._cache.forget(task.uid)
                self.dropped += 1
                continue
            self.delivered.append(request)
        if batch:
            self._loop.call_later(self._wake_interval_s, self.deliver)


async def _first_of(*events: anyio.Event) -> None:
    """Until any of `events` is set."""
    async with anyio.create_task_group() as group:

        async def wait(event: anyio.Event) -> None:
            await event.wait()
            group.cancel_scope.cancel()

        for event in events:
            group.start_soon(wait, event)


async def _bind_one(request: BindRequest, binding: _Binding, outcomes: dict[str, BindOutcome]) -> None:
    task = request.task
    log = _log.bind(pod=task.key, node=request.node_name)
    if binding.stopping():
        # Not sent yet, and a stop was asked for: it is not sent at all. The next leader
        # decides the pod again.
        binding.cache.forget(task.uid)
        return
    try:
        outcome = await _bounded(lambda: binding.binder.bind(request), binding.timeout_s)
    except TimeoutError:
        outcome = BindOutcome(BindStatus.FAILED, f"no answer within {binding.timeout_s:g}s")
    except Exception as error:  # the binder is I/O; whatever it raises fails this bind only
        outcome = BindOutcome(BindStatus.FAILED, f"{type(error).__name__}: {error}")
    except BaseException:
        # Cancelled (grace over, or leadership lost) with the answer unknown: the placement
        # is forgotten; if the bind did land, the pod's watch event brings it back.
        binding.cache.forget(task.uid)
        raise
    outcomes[task.uid] = outcome
    if outcome.status is BindStatus.BOUND:
        log.info("pod bound")
        await _report(lambda: binding.reporter.scheduled(task, request.node_name), log)
        return
    binding.cache.forget(task.uid)
    log.warning("bind failed, placement forgotten", status=outcome.status.value, message=outcome.message)
    if binding.on_released is not None:
        binding.on_released(f"bind of {task.key} to {request.node_name} {outcome.status.value.lower()}")
    if outcome.status is BindStatus.FAILED:
        message = f"binding to node {request.node_name} failed: {outcome.message}"
        await _report(lambda: binding.reporter.unschedulable(task, message), log)


async def _report(call: Callable[[], Awaitable[None]], log: structlog.typing.FilteringBoundLogger) -> None:
    try:
        await _bounded(call, DEFAULT_REPORT_TIMEOUT_S)
    except Exception as error:  # status reporting is best effort; scheduling goes on
        log.warning("status report failed", error=f"{type(error).__name__}: {error}")


async def _decide(
    cache: CacheLike,
    config: SchedulerConfig,
    registry: Registry,
    pipeline: BindPipeline,
    *,
    stop: anyio.Event | None,
    held_back: Mapping[str, str] | None,
    hold_back: Callable[[ClusterSnapshot], Mapping[str, str]] | None,
    freeze: bool,
) -> tuple[SessionResult, _CycleBinds]:
    """Snapshot, then the session in a worker thread, each committed job assumed and queued in
    the pipeline as it is committed; then the cycle's reports. Returns once the session is over
    and all its work is queued (not done: the cycle's done event says when)."""
    # Set when this cycle is cancelled (leadership lost): the worker thread cannot be
    # interrupted, so it is told to stop deciding and left to finish on its own copy.
    abandoned = threading.Event()

    def stopping() -> bool:
        return abandoned.is_set() or (stop is not None and stop.is_set())

    cycle = _CycleBinds()
    stream = _BindStream(cache, pipeline, cycle, stopping, STREAM_WAKE_INTERVAL_S)
    reporter = pipeline.binding.reporter
    switch_interval_s: float | None = None
    if freeze:
        # Copying the cluster allocates as much as a session does, and what it makes lives as long
        # as the session: frozen first, the cache is not walked by collections, and none runs
        # while the copy is made (at 1,000 nodes and 10,000 pods a snapshot took 120 ms of CPU
        # unfrozen, 78 ms frozen; then 58 ms, and 49 ms without collections, in hack/bench_phases.py).
        freeze_long_lived()
        switch_interval_s = pause_collection()
    try:
        snapshot = cache.snapshot()
        if hold_back is not None:
            held_back = {**(held_back or {}), **hold_back(snapshot)}
        session = functools.partial(run_session, should_stop=stopping, held_back=held_back, on_commit=stream.publish)
        if freeze:
            # The snapshot too, now that it is made.
            freeze_long_lived()
        try:
            # The session is CPU-bound; a worker thread keeps watch events and binds flowing.
            result = await anyio.to_thread.run_sync(session, snapshot, config, registry, abandon_on_cancel=True)
        except Exception:
            # What was committed before stays committed (and is bound).
            stream.deliver()
            cycle.seal()
            raise
        except BaseException:
            abandoned.set()
            raise
    finally:
        if switch_interval_s is not None:
            resume_collection(switch_interval_s)
        if freeze:
            thaw_long_lived()
    stream.deliver()
    # The next snapshot keeps the generations of nodes it finds as this session left them.
    cache.offer_session_nodes(snapshot.nodes)
    if not stopping():
        for entry in result.unschedulable:
            pipeline.queue(_ReportWork(_unschedulable_call(entry, reporter), entry.task.key, cycle))
        for update in result.job_updates:
            pipeline.queue(_ReportWork(_job_call(update, reporter), update.job.key, cycle))
    evictor = pipeline.binding.evictor
    for eviction in result.evictions:
        if evictor is None or stopping():
            _log.warning(
                "eviction decided but not sent; the pod keeps running",
                pod=eviction.task.key,
                node=eviction.node_name,
                reason=eviction.reason,
            )
            continue
        request = EvictRequest(eviction.task, eviction.node_name, eviction.reason)
        pipeline.queue(_ReportWork(eviction_call(evictor, request), eviction.task.key, cycle))
    writer = pipeline.binding.queue_status
    if writer is not None and not stopping():
        for name, allocated in result.queue_status.items():
            pipeline.queue(_ReportWork(queue_status_call(writer, name, allocated), f"queue {name}", cycle))
    cycle.seal()
    if stopping():
        if stream.dropped:
            _log.info("stop asked for during the session; its later binds are not sent", binds=stream.dropped)
        result = attrs.evolve(result, stopped=True)
    result = attrs.evolve(result, bind_requests=tuple(stream.delivered))
    return result, cycle


async def schedule_cycle(
    cache: CacheLike,
    config: SchedulerConfig,
    registry: Registry,
    binder: Binder,
    reporter: StatusReporter,
    *,
    bind_concurrency: int = DEFAULT_BIND_CONCURRENCY,
    bind_timeout_s: float = DEFAULT_BIND_TIMEOUT_S,
    stop: anyio.Event | None = None,
    shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S,
    held_back: Mapping[str, str] | None = None,
    hold_back: Callable[[ClusterSnapshot], Mapping[str, str]] | None = None,
    on_released: Callable[[str], None] | None = None,
    freeze: bool = True,
    evictor: Evictor | None = None,
    queue_status: QueueStatusWriter | None = None,
) -> CycleResult:
    """One cycle, returning once its binds and reports are done. Each job is assumed and handed
    to the bind workers as soon as the session commits it, so binding overlaps with deciding.
    Once `stop` is set the session decides nothing more, no bind or report that was not sent yet
    is sent, and the binds in flight get shutdown_grace_s to finish. With freeze, what is alive
    once the snapshot is taken (the cache, the snapshot) sits out the garbage collector's
    generations until the session ends.

    held_back names tasks not to try, with why; hold_back, when given, is asked the same of the
    snapshot once it is taken (and its answer added). on_released hears why each time a
    placement is forgotten after its bind did not succeed (what it held is free again)."""
    started = time.monotonic()
    stop_binding = stop.is_set if stop is not None else _never_stop
    pipeline = BindPipeline(
        _Binding(cache, binder, reporter, bind_timeout_s, stop_binding, on_released, evictor, queue_status),
        bind_concurrency,
    )
    result = SessionResult(stopped=True)
    cycle = _CycleBinds()
    failure: Exception | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(pipeline.run, stop, shutdown_grace_s)
        try:
            result, cycle = await _decide(
                cache, config, registry, pipeline, stop=stop, held_back=held_back, hold_back=hold_back, freeze=freeze
            )
        except Exception as error:
            # What was committed before stays committed (and bound); the error is raised once
            # the binds already handed on have finished.
            failure = error
        finally:
            pipeline.close()
    if failure is not None:
        raise failure
    seconds = time.monotonic() - started
    _log.debug(
        "cycle done",
        bound=sum(1 for outcome in cycle.outcomes.values() if outcome.status is BindStatus.BOUND),
        unschedulable=len(result.unschedulable),
        seconds=round(seconds, 4),
    )
    return CycleResult(result, cycle.outcomes, seconds)


def record_unschedulable(waiting: UnschedulablePods, session: SessionResult, now: float, changes_at_start: int) -> None:
    """The session's pods that found no node wait for a change; those sent to bind leave. A pod
    that failed by a plugin's exception backs off in PodBackoff instead (no change needed)."""
    failed = {
        entry.task.uid: entry.message
        for entry in session.unschedulable
        if entry.task.uid not in session.failed_by_plugin
    }
    for uid in session.failed_by_plugin:
        waiting.forget(uid)
    bound = {request.task.uid for request in session.bind_requests}
    waiting.record(bound, failed, now, changes_at_start)


async def _limit_to_grace(stop: anyio.Event, sending: anyio.CancelScope, grace_s: float) -> None:
    await stop.wait()
    sending.deadline = min(sending.deadline, anyio.current_time() + grace_s)


def _unschedulable_call(entry: Unschedulable, reporter: StatusReporter) -> Callable[[], Awaitable[None]]:
    return lambda: reporter.unschedulable(entry.task, entry.message)


def _job_call(update: JobUpdate, reporter: StatusReporter) -> Callable[[], Awaitable[None]]:
    return lambda: reporter.job_status(update.job, update.phase, update.message)


class CycleTrigger:
    """Asks for a cycle before the period is up: pods that arrive are decided at once, as
    kube-scheduler decides a pod as soon as it is queued, instead of waiting up to a whole period
    (Volcano's fixed tick). Called on the event loop (the informers deliver there)."""

    def __init__(self) -> None:
        self._asked = anyio.Event()

    def ask(self) -> None:
        self._asked.set()

    def asked(self) -> bool:
        return self._asked.is_set()

    async def wait(self) -> None:
        await self._asked.wait()

    def reset(self) -> None:
        if self._asked.is_set():
            self._asked = anyio.Event()


# The least time between the starts of two cycles a trigger asks for, so a burst of arrivals is
# decided in a few cycles rather than one cycle per pod.
DEFAULT_MIN_CYCLE_INTERVAL_S = 0.02


def freeze_long_lived() -> None:
    """Move every object alive now (the cache and the cycle's snapshot of it) out of the
    collector's generations for the session (gc.freeze): the collections the session's own
    allocations trigger then walk only what the session made, not the whole cluster again and
    again. Objects freed by reference counting are freed as usual while frozen."""
    gc.freeze()


# While a session decides in its worker thread, the event loop's thread (binds, watch events) gives
# the interpreter lock back after this long instead of Python's default 5 ms: a pod's decision
# then waits at most this long for work of the other thread (measured in hack/bench.py: the
# decisions over 5 ms at 1,000 nodes went from 178 to 95, most of them waits for the lock).
SESSION_SWITCH_INTERVAL_S = 0.001


def pause_collection() -> float:
    """No automatic collection while the session decides (gc.disable): a collection pauses the
    decision under way for as long as it walks what the session made (up to 20 ms at 1,000 nodes),
    and what a session makes is freed by reference counting (Session.release breaks its cycles).
    The thread switch interval is shortened for the session too (SESSION_SWITCH_INTERVAL_S).
    Returns the switch interval to restore (resume_collection)."""
    gc.disable()
    previous = sys.getswitchinterval()
    sys.setswitchinterval(min(previous, SESSION_SWITCH_INTERVAL_S))
    return previous


def resume_collection(switch_interval_s: float) -> None:
    # Only while the interval is still the session's: of two sessions overlapping (two loops in
    # one process), the first to end then does not leave the other's value behind for good.
    if sys.getswitchinterval() == min(switch_interval_s, SESSION_SWITCH_INTERVAL_S):
        sys.setswitchinterval(switch_interval_s)
    gc.enable()


def thaw_long_lived() -> None:
    """After the session: what is alive now goes to the collector's oldest generation (gc.freeze,
    then gc.unfreeze, which puts the frozen objects there). That is the cache and snapshot frozen
    before, and what the session made and kept (its memo tables, the placements); with automatic
    collection off while it decided, all of that would otherwise sit in the youngest generation,
    and the next young collections would walk it (at 1,000 nodes about 5 ms per cycle). Cyclic garbage
    among them is reclaimed by the full collections."""
    gc.freeze()
    gc.unfreeze()


async def _wait_for_next_cycle(
    stop: anyio.Event, trigger: CycleTrigger | None, started: float, period_s: float, min_interval_s: float
) -> None:
    """Until the period is up, or a trigger asks (but not sooner than min_interval_s after the
    last cycle started), or a stop."""
    with anyio.move_on_after(max(0.0, period_s - (time.monotonic() - started))):
        async with anyio.create_task_group() as group:

            async def on_stop() -> None:
                await stop.wait()
                group.cancel_scope.cancel()

            async def on_trigger() -> None:
                assert trigger is not None
                await trigger.wait()
                await anyio.sleep(max(0.0, min_interval_s - (time.monotonic() - started)))
                group.cancel_scope.cancel()

            group.start_soon(on_stop)
            if trigger is not None:
                group.start_soon(on_trigger)


async def run_loop(
    cache: CacheLike,
    current_config: Callable[[], SchedulerConfig],
    registry: Registry,
    binder: Binder,
    reporter: StatusReporter,
    *,
    period_s: float,
    stop: anyio.Event,
    bind_concurrency: int = DEFAULT_BIND_CONCURRENCY,
    bind_timeout_s: float = DEFAULT_BIND_TIMEOUT_S,
    on_cycle: Callable[[CycleResult], None] | None = None,
    backoff: PodBackoff | None = None,
    shutdown_grace_s: float = DEFAULT_SHUTDOWN_GRACE_S,
    on_plugin_fault: Callable[[PluginFault], None] | None = None,
    trigger: CycleTrigger | None = None,
    min_cycle_interval_s: float = DEFAULT_MIN_CYCLE_INTERVAL_S,
    unschedulable: UnschedulablePods | None = None,
    evictor: Evictor | None = None,
    queue_status: QueueStatusWriter | None = None,
) -> int:
    """Run a cycle every period (measured start to start) until `stop` is set; the config is
    read afresh each cycle so a reload takes effect at the next one. A cycle that fails is logged
    and the loop goes on. Pods whose plugins raised sit out their backoff; pods that did not fit
    wait in `unschedulable` until a cluster change (noted there by the informers' side) or its
    flush interval, and their backoff, let them be tried again. A trigger starts the next cycle
    early (pods arrived, or waiting pods may fit now).

    One bind pipeline serves every cycle, so the next cycle may decide while the last one's binds
    are in flight (its snapshot sees them assumed), but not while more than bind_concurrency of
    them still wait for a worker; on_cycle hears of each cycle once its binds and reports are
    done. Once `stop` is set no new cycle starts, nothing not yet sent is sent,
    and the binds in flight get shutdown_grace_s. Returns the number of cycles run."""
    if not math.isfinite(period_s) or period_s <= 0:
        raise ValueError(f"schedule period must be a positive number of seconds, got {period_s!r}")
    pod_backoff = backoff if backoff is not None else PodBackoff()
    waiting = unschedulable if unschedulable is not None else UnschedulablePods()

    def hold_back(snapshot: ClusterSnapshot) -> dict[str, str]:
        now = time.monotonic()
        held = waiting.held_back(snapshot.jobs, now)
        # A pod backing off after a plugin error says so, whatever it failed with before.
        held.update(pod_backoff.held_back(now))
        return held

    def released(reason: str) -> None:
        waiting.cluster_changed(reason, time.monotonic())

    pipeline = BindPipeline(
        _Binding(cache, binder, reporter, bind_timeout_s, stop.is_set, released, evictor, queue_status),
        bind_concurrency,
    )
    cycles = 0
    last_config: SchedulerConfig | None = None
    async with anyio.create_task_group() as group:
        group.start_soon(pipeline.run, stop, shutdown_grace_s)
        try:
            while not stop.is_set():
                # While a round of binds still waits for a worker, the next cycle waits for it.
                await pipeline.wait_for_room(pipeline.concurrency, stop)
                if stop.is_set():
                    break
                started = time.monotonic()
                if trigger is not None:
                    # Arrivals from now on are for the next cycle; this one's snapshot sees those.
                    trigger.reset()
                config = current_config()
                if last_config is not None and config is not last_config:
                    # Other plugins or arguments may place what the last ones could not.
                    waiting.cluster_changed("scheduler configuration reloaded", started)
                last_config = config
                changes_at_start = waiting.changes
                try:
                    session, cycle = await _decide(
                        cache, config, registry, pipeline, stop=stop, held_back=None, hold_back=hold_back, freeze=True
                    )
                except PluginOpenError as error:
                    _log.error("scheduling cycle dropped: a plugin raised while opening the session", error=str(error))
                    if on_plugin_fault is not None:
                        on_plugin_fault(error.fault)
                except Exception:  # one bad cycle (a bad config, a bug) must not stop scheduling
                    _log.exception("scheduling cycle failed")
                else:
                    if not session.stopped:
                        now = time.monotonic()
                        pod_backoff.record(session, now)
                        record_unschedulable(waiting, session, now, changes_at_start)
                    group.start_soon(_finish_cycle, session, cycle, started, on_cycle)
                cycles += 1
                await _wait_for_next_cycle(stop, trigger, started, period_s, min_cycle_interval_s)
        finally:
            pipeline.close()
    return cycles


async def _finish_cycle(
    session: SessionResult, cycle: _CycleBinds, started: float, on_cycle: Callable[[CycleResult], None] | None
) -> None:
    await cycle.done.wait()
    seconds = time.monotonic() - started
    _log.debug(
        "cycle done",
        bound=sum(1 for outcome in cycle.outcomes.values() if outcome.status is BindStatus.BOUND),
        unschedulable=len(session.unschedulable),
        seconds=round(seconds, 4),
    )
    if on_cycle is not None:
        on_cycle(CycleResult(session, cycle.outcomes, seconds))
