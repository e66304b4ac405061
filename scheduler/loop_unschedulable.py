"""Pods that did not fit, held out of the cycles until something could make them fit.

kube-scheduler's model (pkg/scheduler/backend/queue): a pod whose attempt found no node goes to
the unschedulable pods; a cluster event that could make it schedulable (a pod deleted or
finished, a node added or changed, ...) moves it back, to the active queue when its backoff is
over and to the backoff queue until then; a pod left there longer than
podMaxInUnschedulablePodsDuration (5 min there) is moved back whatever happened. The backoff is
initial * 2^(attempts-1), at most max (podInitialBackoffSeconds 1 s, podMaxBackoffSeconds 10 s),
counted from the last attempt.

Here the scheduler decides whole snapshots, so "moved back" means "not held back from the next
session": `held_back` gives the session (Session(held_back=...)) the pods that sit it out, each
with the reason it last failed with, verbatim. Those pods are neither tried nor reported again, so
the PodScheduled condition and event written when they failed stay as written, and a stream of new
pods costs only the new pods (and the re-activated ones) per cycle.

A job is held back or tried as a whole: if any of its pending pods is new or re-activated, all of
them are tried, so a gang is never decided with part of its members missing.

Everything here runs on the event loop (informer callbacks and the loop between sessions), never
in the session's thread; it does no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping

import attrs

from numasched.api.job import JobInfo

# kube-scheduler's podMaxInUnschedulablePodsDuration is 5 minutes. We retry sooner: a pod that no
# event frees (the flush is only the safety net for a change the event filter judged irrelevant)
# waits at most a minute, and at ~1 ms a decision even 10,000 waiting pods cost about 10 s of CPU
# a minute; `--pod-max-unschedulable` sets it.
DEFAULT_FLUSH_AFTER_S = 60.0


@attrs.frozen(slots=True)
class BackoffPolicy:
    """kube-scheduler's pod backoff: initial * 2^(attempts-1), at most max (1 s and 10 s there).
    The same for a pod that did not fit and for one whose plugins raised."""

    initial_s: float = 1.0
    max_s: float = 10.0

    def __attrs_post_init__(self) -> None:
        if not (math.isfinite(self.initial_s) and math.isfinite(self.max_s) and 0 < self.initial_s <= self.max_s):
            raise ValueError(f"pod backoff needs 0 < initial <= max, got {self.initial_s} / {self.max_s}")

    def delay(self, failures: int) -> float:
        # The exponent is bounded so a pod failing for days never builds a huge number.
        return min(self.max_s, self.initial_s * 2.0 ** min(max(failures - 1, 0), 62))


DEFAULT_BACKOFF = BackoffPolicy()


@attrs.frozen(slots=True)
class RequeuePolicy:
    """When a pod that did not fit is tried again: not before its backoff, and then only after a
    cluster change or once it has waited flush_after_s since its last attempt."""

    backoff: BackoffPolicy = DEFAULT_BACKOFF
    flush_after_s: float = DEFAULT_FLUSH_AFTER_S

    def __attrs_post_init__(self) -> None:
        if not (math.isfinite(self.flush_after_s) and self.flush_after_s > 0):
            raise ValueError(f"the unschedulable flush interval must be positive, got {self.flush_after_s}")


DEFAULT_REQUEUE_POLICY = RequeuePolicy()


@attrs.define(slots=True)
class _Waiting:
    attempts: int
    # When the last attempt failed, and the earliest the pod may be tried again.
    failed_at: float
    backoff_until: float
    # What the last attempt said: the reason the pod carries while it waits.
    message: str
    # A cluster change since that attempt may have made it schedulable.
    moved: bool


class UnschedulablePods:
    """The pods (by task uid) whose last attempt found no node, until they are bound, gone, or
    ready to be tried again."""

    def __init__(self, policy: RequeuePolicy = DEFAULT_REQUEUE_POLICY) -> None:
        self.policy = policy
        self._waiting: dict[str, _Waiting] = {}
        # Cluster changes seen so far: a change during a session counts for the pods it fails.
        self._changes = 0
        self.last_change = ""

    def __len__(self) -> int:
        return len(self._waiting)

    def __contains__(self, uid: object) -> bool:
        return uid in self._waiting

    def __iter__(self) -> Iterator[str]:
        return iter(self._waiting)

    @property
    def changes(self) -> int:
        """How many cluster changes were noted so far (a cycle takes it when it starts)."""
        return self._changes

    def attempts(self, uid: str) -> int:
        entry = self._waiting.get(uid)
        return entry.attempts if entry is not None else 0

    def _ready(self, entry: _Waiting, now: float) -> bool:
        if now < entry.backoff_until:
            return False
        return entry.moved or now - entry.failed_at >= self.policy.flush_after_s

    def cluster_changed(self, reason: str, now: float) -> bool:
        """A change that could make any waiting pod fit: each is tried again once its backoff is
        over. True when one of them may be tried at once (a cycle now is worth it)."""
        self._changes += 1
        self.last_change = reason
        ready_now = False
        for entry in self._waiting.values():
            if not entry.moved:
                entry.moved = True
                ready_now = ready_now or entry.backoff_until <= now
        return ready_now

    def pod_changed(self, uid: str, now: float) -> bool:
        """The pod itself changed (its spec, labels or annotations): it is tried again once its
        backoff is over. True when it may be tried at once."""
        entry = self._waiting.get(uid)
        if entry is None or entry.moved:
            return False
        entry.moved = True
        return entry.backoff_until <= now

    def held_back(self, jobs: Mapping[str, JobInfo], now: float) -> dict[str, str]:
        """Task uid -> its last failure, for the pending tasks of `jobs` (a snapshot's) that sit
        the next session out: every pending task of a job waits, none is ready. Pods that are no
        longer pending (bound, deleted) are dropped."""
        held: dict[str, str] = {}
        pending_uids: set[str] = set()
        for job in jobs.values():
            pending = job.pending_tasks()
            if not pending:
                continue
            waiting: list[tuple[str, _Waiting]] = []
            for task in pending:
                pending_uids.add(task.uid)
                entry = self._waiting.get(task.uid)
                if entry is not None and not self._ready(entry, now):
                    waiting.append((task.uid, entry))
            if len(waiting) == len(pending):
                held.update((uid, entry.message) for uid, entry in waiting)
        for uid in [uid for uid in self._waiting if uid not in pending_uids]:
            del self._waiting[uid]
        return held

    def record(
        self,
        bound: set[str] | frozenset[str],
        failed: Mapping[str, str],
        now: float,
        changes_at_start: int,
    ) -> None:
        """Account one session: the pods sent to bind leave; each pod that failed (uid -> why)
        waits, its backoff doubled. A cluster change noted since the session started
        (changes_at_start) may already have freed what it lacked: it waits only for its backoff."""
        for uid in bound:
            self._waiting.pop(uid, None)
        changed_since = self._changes != changes_at_start
        for uid, message in failed.items():
            previous = self._waiting.get(uid)
            attempts = 1 if previous is None else previous.attempts + 1
            self._waiting[uid] = _Waiting(
                attempts, now, now + self.policy.backoff.delay(attempts), message, changed_since
            )

    def forget(self, uid: str) -> None:
        self._waiting.pop(uid, None)
