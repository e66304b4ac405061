"""Statement: allocate / pipeline / evict in session memory, commit to bind requests, roll back."""

from __future__ import annotations

import pytest

from numasched.api.allocation import ALLOCATION_ANNOTATION, ContainerAllocation, PodAllocation
from numasched.api.idset import IdSet
from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo, TaskStatus
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.scheduler.framework.registry import Registry
from numasched.scheduler.framework.session import Event, EventHandler, Session
from numasched.scheduler.framework.statement import Eviction, JobOutcome, Statement, settle_job

GPU = "nvidia.com/gpu"


def make_task(uid: str, *, cpu: float = 1000, gpu: float = 0, job: str = "job") -> TaskInfo:
    request = Resource(milli_cpu=cpu, memory=1e9, scalars={GPU: gpu * 1000} if gpu else {})
    return TaskInfo(uid=uid, namespace="ns", name=uid, job_id=job, resreq=request, init_resreq=request.clone())


def status_of(task: TaskInfo) -> TaskStatus:
    return task.status


def make_session(*tasks: TaskInfo, min_available: int = 1) -> tuple[Session, NodeInfo, JobInfo]:
    node = NodeInfo.create("n1", Resource(milli_cpu=8000, memory=16e9, scalars={GPU: 8000}))
    job = JobInfo(uid="job", namespace="ns", name="job", min_available=min_available)
    for task in tasks:
        job.add_task(task)
    snapshot = ClusterSnapshot(nodes={"n1": node}, jobs={"job": job})
    return Session(snapshot, SchedulerConfig(), Registry()), node, job


def test_allocate_places_and_fires_handlers_in_registration_order() -> None:
    task = make_task("t1", cpu=2000, gpu=1)
    ssn, node, job = make_session(task)
    seen: list[tuple[str, str, TaskStatus, float]] = []

    def recorder(label: str) -> EventHandler:
        def record(event: Event) -> None:
            seen.append((label, event.node.name, event.task.status, event.node.idle.milli_cpu))

        return EventHandler(allocate=record)

    ssn.add_event_handler(recorder("first"))
    ssn.add_event_handler(recorder("second"))
    Statement(ssn).allocate(task, node)
    assert task.status is TaskStatus.ALLOCATED
    assert task.node_name == "n1"
    assert node.tasks["t1"] is task
    assert job.tasks["t1"] is task
    assert node.idle.milli_cpu == 6000
    assert node.idle.scalars[GPU] == 7000
    # handlers see the node already holding the task
    assert seen == [("first", "n1", TaskStatus.ALLOCATED, 6000), ("second", "n1", TaskStatus.ALLOCATED, 6000)]


def test_allocation_decided_in_a_handler_is_accounted_on_the_node() -> None:
    task = make_task("t1", gpu=2)
    ssn, node, _ = make_session(task)
    decided = PodAllocation((ContainerAllocation("main", cpuset=IdSet([2, 3]), devices={GPU: ("gpu-0", "gpu-1")}),))

    def decide(event: Event) -> None:
        event.task.allocation = decided

    ssn.add_event_handler(EventHandler(allocate=decide))
    statement = Statement(ssn)
    statement.allocate(task, node)
    assert node.numa_usage.cpus == IdSet([2, 3])
    assert node.numa_usage.devices[GPU] == frozenset({"gpu-0", "gpu-1"})
    statement.discard()
    assert node.numa_usage.cpus == IdSet()
    assert node.numa_usage.devices[GPU] == frozenset()
    assert task.allocation is None


def test_discard_rolls_back_in_reverse_order_and_restores_idle() -> None:
    tasks = [make_task(f"t{i}", cpu=1000 * (i + 1), gpu=1) for i in range(3)]
    ssn, node, _ = make_session(*tasks)
    before = node.idle.clone()
    events: list[str] = []
    ssn.add_event_handler(
        EventHandler(
            allocate=lambda e: events.append(f"+{e.task.uid}"),
            deallocate=lambda e: events.append(f"-{e.task.uid}:{e.node.idle.milli_cpu:g}"),
        )
    )
    ssn.add_event_handler(EventHandler(deallocate=lambda e: events.append(f"-{e.task.uid}/2")))
    statement = Statement(ssn)
    for task in tasks:
        statement.allocate(task, node)
    assert node.idle.milli_cpu == 2000
    statement.discard()
    # last operation first; both handlers per task in registration order; the node has already
    # given the task's resources back when its deallocate handlers run
    assert events == ["+t0", "+t1", "+t2", "-t2:5000", "-t2/2", "-t1:7000", "-t1/2", "-t0:8000", "-t0/2"]
    assert node.idle == before
    assert node.used == Resource(scalars={GPU: 0.0})
    assert node.tasks == {}
    for task in tasks:
        assert task.status is TaskStatus.PENDING
        assert task.node_name == ""
    assert len(statement) == 0


def test_pipeline_counts_as_pipelined_and_rolls_back() -> None:
    task = make_task("t1", cpu=3000)
    ssn, node, _ = make_session(task)
    statement = Statement(ssn)
    statement.pipeline(task, node)
    assert task.status is TaskStatus.PIPELINED
    assert node.pipelined.milli_cpu == 3000
    assert node.idle.milli_cpu == 8000
    assert node.future_idle().milli_cpu == 5000
    assert statement.commit() == []
    assert task.status is TaskStatus.PIPELINED

    task = make_task("t2", cpu=3000)
    ssn, node, _ = make_session(task)
    statement = Statement(ssn)
    statement.pipeline(task, node)
    statement.discard()
    assert node.pipelined.milli_cpu == 0
    assert node.used.milli_cpu == 0
    assert task.status is TaskStatus.PENDING


def test_commit_returns_bind_requests_with_annotations_and_marks_binding() -> None:
    with_allocation, plain = make_task("t1", gpu=1), make_task("t2")
    ssn, node, _ = make_session(with_allocation, plain)

    def decide(event: Event) -> None:
        if event.task.uid == "t1":
            event.task.allocation = PodAllocation((ContainerAllocation("main", devices={GPU: ("gpu-3",)}),))

    ssn.add_event_handler(EventHandler(allocate=decide))
    statement = Statement(ssn)
    statement.allocate(with_allocation, node)
    statement.allocate(plain, node)
    requests = statement.commit()
    assert [(r.task.uid, r.node_name) for r in requests] == [("t1", "n1"), ("t2", "n1")]
    assert ALLOCATION_ANNOTATION in requests[0].annotations
    assert '"gpu-3"' in requests[0].annotations[ALLOCATION_ANNOTATION]
    assert requests[1].annotations == {}
    assert with_allocation.status is TaskStatus.BINDING
    assert plain.status is TaskStatus.BINDING
    # committed resources stay used
    assert node.idle.milli_cpu == 6000


def test_evict_marks_releasing_and_discard_restores() -> None:
    running = make_task("r1", cpu=4000)
    running.status = TaskStatus.RUNNING
    running.node_name = "n1"
    ssn, node, _ = make_session(running)
    node.add_task(running)
    deallocated: list[str] = []
    allocated: list[str] = []
    ssn.add_event_handler(
        EventHandler(
            allocate=lambda e: allocated.append(e.task.uid), deallocate=lambda e: deallocated.append(e.task.uid)
        )
    )
    statement = Statement(ssn)
    statement.evict(running, "preempted by a higher priority job")
    assert running.status is TaskStatus.RELEASING
    assert node.releasing.milli_cpu == 4000
    assert node.future_idle().milli_cpu == 8000
    assert deallocated == ["r1"]
    statement.discard()
    assert status_of(running) is TaskStatus.RUNNING
    assert node.releasing.milli_cpu == 0
    assert node.idle.milli_cpu == 4000
    assert allocated == ["r1"]

    statement.evict(running, "reclaimed")
    assert statement.commit() == []
    assert ssn.evictions == [Eviction(running, "n1", "reclaimed")]


def test_only_pending_tasks_are_placed_and_only_placed_ones_evicted() -> None:
    task = make_task("t1")
    ssn, node, _ = make_session(task)
    statement = Statement(ssn)
    with pytest.raises(ValueError, match="ns/t1 is not on a node"):
        statement.evict(task, "x")
    statement.allocate(task, node)
    with pytest.raises(ValueError, match="ns/t1 is Allocated"):
        statement.allocate(task, node)


def _gang_session(*tasks: TaskInfo, min_available: int) -> tuple[Session, NodeInfo, JobInfo]:
    ssn, node, job = make_session(*tasks, min_available=min_available)
    ssn = Session(ssn.snapshot, SchedulerConfig(tiers=(Tier((PluginOption("gang"),)),)), Registry())
    ssn.add_job_ready_fn("gang", JobInfo.is_ready)
    ssn.add_job_pipelined_fn("gang", lambda j: 1 if j.is_pipelined() else -1)
    return ssn, node, job


def test_settle_job_discards_a_job_short_of_its_minimum() -> None:
    tasks = [make_task(f"t{i}") for i in range(2)]
    ssn, node, job = _gang_session(*tasks, min_available=2)
    statement = Statement(ssn)
    statement.allocate(tasks[0], node)
    assert settle_job(ssn, job, statement) is JobOutcome.DISCARDED
    assert ssn.bind_requests == []
    assert tasks[0].status is TaskStatus.PENDING
    assert node.idle.milli_cpu == 8000


def test_settle_job_keeps_a_pipelined_job_and_binds_it_with_the_turn_that_makes_it_ready() -> None:
    tasks = [make_task(f"t{i}") for i in range(3)]
    ssn, node, job = _gang_session(*tasks, min_available=2)
    first = Statement(ssn)
    first.allocate(tasks[0], node)
    first.pipeline(tasks[1], node)
    assert settle_job(ssn, job, first) is JobOutcome.KEPT
    assert ssn.bind_requests == []
    assert ssn.kept_statements == {"job": [first]}
    assert tasks[0].status is TaskStatus.ALLOCATED
    second = Statement(ssn)
    second.allocate(tasks[2], node)
    assert settle_job(ssn, job, second) is JobOutcome.COMMITTED
    assert [r.task.uid for r in ssn.bind_requests] == ["t0", "t2"]
    assert tasks[1].status is TaskStatus.PIPELINED
    assert ssn.kept_statements == {}
