"""Pods that did not fit wait for a cluster change (or the flush interval) and their backoff, as
kube-scheduler's unschedulable pods do; all times here come from a fake clock."""

from __future__ import annotations

import pytest

from numasched.api.job import JobInfo
from numasched.api.resource import Resource
from numasched.api.task import TaskInfo, TaskStatus
from numasched.scheduler.loop_unschedulable import BackoffPolicy, RequeuePolicy, UnschedulablePods

POLICY = RequeuePolicy(BackoffPolicy(initial_s=1.0, max_s=10.0), flush_after_s=60.0)


def task(uid: str, job: str, status: TaskStatus = TaskStatus.PENDING) -> TaskInfo:
    request = Resource(milli_cpu=1000, memory=1e9)
    made = TaskInfo(uid=uid, namespace="ns", name=uid, job_id=job, resreq=request, init_resreq=request.clone())
    made.status = status
    return made


def jobs_of(*members: tuple[str, str] | tuple[str, str, TaskStatus]) -> dict[str, JobInfo]:
    jobs: dict[str, JobInfo] = {}
    for member in members:
        uid, job_uid = member[0], member[1]
        status = member[2] if len(member) == 3 else TaskStatus.PENDING
        job = jobs.setdefault(job_uid, JobInfo(uid=job_uid, namespace="ns", name=job_uid))
        job.add_task(task(uid, job_uid, status))
    return jobs


def test_the_backoff_is_kube_schedulers_one_two_four_up_to_ten_seconds() -> None:
    policy = BackoffPolicy(initial_s=1.0, max_s=10.0)
    assert [policy.delay(attempts) for attempts in range(1, 8)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    assert policy.delay(10**6) == 10.0
    with pytest.raises(ValueError, match="positive"):
        RequeuePolicy(flush_after_s=0.0)
    with pytest.raises(ValueError, match="positive"):
        RequeuePolicy(flush_after_s=float("inf"))


def test_a_pod_that_did_not_fit_waits_for_a_change_then_for_its_backoff() -> None:
    queue = UnschedulablePods(POLICY)
    jobs = jobs_of(("p", "jp"))
    queue.record(set(), {"p": "0/3 nodes are available: 3 Insufficient cpu."}, now=100.0, changes_at_start=0)
    # No change: held back, with the reason it failed with, word for word, however long (< flush).
    for now in (100.5, 101.5, 130.0, 159.9):
        assert queue.held_back(jobs, now) == {"p": "0/3 nodes are available: 3 Insufficient cpu."}
    # A change at 100.2, inside the 1 s backoff: tried once the backoff is over, not before.
    assert queue.cluster_changed("pod ns/x deleted from node n1", now=100.2) is False
    assert queue.held_back(jobs, 100.9) == {"p": "0/3 nodes are available: 3 Insufficient cpu."}
    assert queue.held_back(jobs, 101.0) == {}
    # It fails again: the second backoff is 2 s and it needs a new change.
    queue.record(set(), {"p": "still no room"}, now=101.0, changes_at_start=queue.changes)
    assert queue.attempts("p") == 2
    assert queue.held_back(jobs, 150.0) == {"p": "still no room"}
    assert queue.cluster_changed("node n4 added", now=102.0) is False
    assert queue.held_back(jobs, 102.9) == {"p": "still no room"}
    assert queue.held_back(jobs, 103.0) == {}
    # Bound: it leaves.
    queue.record({"p"}, {}, now=103.0, changes_at_start=queue.changes)
    assert len(queue) == 0 and queue.attempts("p") == 0


def test_a_change_after_the_backoff_asks_for_a_cycle_at_once() -> None:
    queue = UnschedulablePods(POLICY)
    queue.record(set(), {"p": "no room"}, now=0.0, changes_at_start=0)
    assert queue.cluster_changed("node n1 changed", now=5.0) is True
    # Already moved: a second change asks for nothing more.
    assert queue.cluster_changed("node n2 changed", now=5.1) is False
    assert queue.held_back(jobs_of(("p", "jp")), 5.2) == {}


def test_with_no_change_a_pod_is_flushed_back_after_the_flush_interval() -> None:
    queue = UnschedulablePods(POLICY)
    jobs = jobs_of(("p", "jp"))
    queue.record(set(), {"p": "no room"}, now=10.0, changes_at_start=0)
    assert queue.held_back(jobs, 69.9) == {"p": "no room"}
    assert queue.held_back(jobs, 70.0) == {}


def test_a_change_during_the_session_that_failed_the_pod_counts() -> None:
    queue = UnschedulablePods(POLICY)
    jobs = jobs_of(("p", "jp"))
    changes_at_start = queue.changes
    # A bound pod was deleted while the session was deciding on a snapshot taken before it.
    queue.cluster_changed("pod ns/x deleted from node n1", now=50.0)
    queue.record(set(), {"p": "no room"}, now=50.5, changes_at_start=changes_at_start)
    assert queue.held_back(jobs, 51.0) == {"p": "no room"}
    assert queue.held_back(jobs, 51.5) == {}


def test_only_the_changed_pod_is_moved_by_its_own_update() -> None:
    queue = UnschedulablePods(POLICY)
    jobs = jobs_of(("p", "jp"), ("q", "jq"))
    queue.record(set(), {"p": "no room", "q": "no room"}, now=0.0, changes_at_start=0)
    assert queue.pod_changed("p", now=3.0) is True
    assert queue.pod_changed("p", now=3.0) is False
    assert queue.pod_changed("unknown", now=3.0) is False
    assert queue.held_back(jobs, 3.0) == {"q": "no room"}


def test_a_job_is_tried_whole_when_any_of_its_pending_tasks_is_new_or_ready() -> None:
    queue = UnschedulablePods(POLICY)
    queue.record(set(), {"g-0": "gang short", "g-1": "gang short", "h-0": "no room"}, now=0.0, changes_at_start=0)
    # g-2 arrived (not waiting): the whole gang is tried; h stays held.
    jobs = jobs_of(("g-0", "g"), ("g-1", "g"), ("g-2", "g"), ("h-0", "h"), ("h-1", "h", TaskStatus.BOUND))
    assert queue.held_back(jobs, 1.0) == {"h-0": "no room"}
    # Without the newcomer both gang members wait.
    jobs = jobs_of(("g-0", "g"), ("g-1", "g"), ("h-0", "h"))
    assert queue.held_back(jobs, 1.0) == {"g-0": "gang short", "g-1": "gang short", "h-0": "no room"}


def test_pods_no_longer_pending_are_dropped() -> None:
    queue = UnschedulablePods(POLICY)
    queue.record(set(), {"p": "no room", "q": "no room", "r": "no room"}, now=0.0, changes_at_start=0)
    # q was bound by someone else; r was deleted.
    jobs = jobs_of(("p", "jp"), ("q", "jq", TaskStatus.BOUND))
    assert queue.held_back(jobs, 1.0) == {"p": "no room"}
    assert set(queue) == {"p"}
    queue.forget("p")
    assert "p" not in queue
