"""Session: tier walk, enable* flag gating and how each extension point combines answers."""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot, QueueInfo
from numasched.api.task import TaskInfo
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.scheduler.framework.registry import Registry
from numasched.scheduler.framework.session import ABSTAIN, PERMIT, REJECT, Session
from numasched.scheduler.framework.status import SUCCESS, Status, StatusCode, ValidateResult


def make_task(uid: str, *, ts: float = 0.0, namespace: str = "ns", priority_class: str = "") -> TaskInfo:
    request = Resource(milli_cpu=1000, memory=1e9)
    return TaskInfo(
        uid=uid,
        namespace=namespace,
        name=uid,
        job_id="job",
        resreq=request,
        init_resreq=request.clone(),
        creation_timestamp=ts,
        priority_class_name=priority_class,
    )


def make_job(uid: str, *, ts: float = 0.0) -> JobInfo:
    return JobInfo(uid=uid, namespace="ns", name=uid, creation_timestamp=ts)


def make_session(*tiers: list[PluginOption]) -> Session:
    config = SchedulerConfig(tiers=tuple(Tier(tuple(tier)) for tier in tiers))
    node = NodeInfo.create("n1", Resource(milli_cpu=8000, memory=8e9))
    return Session(ClusterSnapshot(nodes={"n1": node}), config, Registry())


def opt(name: str, **flags: bool) -> PluginOption:
    return PluginOption(name, flags=flags)


NODE = NodeInfo.create("n1", Resource(milli_cpu=8000, memory=8e9))
TASK = make_task("t1")
JOB = make_job("j1")


# --- gating: every point honours its own flag and only that flag ---------------------------------


def _register_all(ssn: Session, name: str, calls: list[str]) -> None:
    def note(point: str) -> Callable[..., None]:
        return lambda *_: calls.append(point)

    ssn.add_predicate_fn(name, lambda t, n: (note("predicate")(), Status.unschedulable("no"))[1])
    ssn.add_pre_predicate_fn(name, lambda t: (note("prePredicate")(), Status.unschedulable("no"))[1])
    ssn.add_node_order_fn(name, lambda t, n: (note("nodeOrder")(), 5.0)[1])
    ssn.add_batch_node_order_fn(name, lambda t, ns: (note("batchNodeOrder")(), {"n1": 7.0})[1])
    ssn.add_best_node_fn(name, lambda t, s: (note("bestNode")(), NODE)[1])
    ssn.add_job_order_fn(name, lambda a, b: (note("jobOrder")(), 1)[1])
    ssn.add_task_order_fn(name, lambda a, b: (note("taskOrder")(), 1)[1])
    ssn.add_job_ready_fn(name, lambda j: (note("jobReady")(), False)[1])
    ssn.add_job_pipelined_fn(name, lambda j: (note("jobPipelined")(), REJECT)[1])
    ssn.add_job_enqueueable_fn(name, lambda j: (note("jobEnqueued")(), REJECT)[1])
    ssn.add_allocatable_fn(name, lambda q, t: (note("allocatable")(), False)[1])
    ssn.add_preemptable_fn(name, lambda e, es: (note("preemptable")(), ([], PERMIT))[1])
    ssn.add_reclaimable_fn(name, lambda e, es: (note("reclaimable")(), ([], PERMIT))[1])


def _evaluate_all(ssn: Session) -> None:
    ssn.predicate(TASK, NODE)
    ssn.pre_predicate(TASK)
    ssn.node_order(TASK, NODE)
    ssn.batch_node_order(TASK, [NODE])
    ssn.best_node(TASK, {0.0: [NODE]})
    ssn.job_order(JOB, make_job("j2"))
    ssn.task_order(TASK, make_task("t2"))
    ssn.job_ready(JOB)
    ssn.job_pipelined(JOB)
    ssn.job_enqueueable(JOB)
    ssn.allocatable(QueueInfo("default"), TASK)
    ssn.preemptable(TASK, [make_task("victim")])
    ssn.reclaimable(TASK, [make_task("victim")])


ALL_POINTS = {
    "predicate",
    "prePredicate",
    "nodeOrder",
    "batchNodeOrder",
    "bestNode",
    "jobOrder",
    "taskOrder",
    "jobReady",
    "jobPipelined",
    "jobEnqueued",
    "allocatable",
    "preemptable",
    "reclaimable",
}
# The flag that gates each point; pre-predicate shares the predicate flag and batch node order
# shares the node order flag, as in Volcano.
GATING_FLAG = {"prePredicate": "predicate", "batchNodeOrder": "nodeOrder"}


def test_every_point_is_called_when_enabled() -> None:
    ssn = make_session([opt("p")])
    calls: list[str] = []
    _register_all(ssn, "p", calls)
    _evaluate_all(ssn)
    assert set(calls) == ALL_POINTS


@pytest.mark.parametrize(
    "flag",
    [
        "predicate",
        "nodeOrder",
        "bestNode",
        "jobOrder",
        "taskOrder",
        "jobReady",
        "jobPipelined",
        "jobEnqueued",
        "allocatable",
        "preemptable",
        "reclaimable",
    ],
)
def test_a_disabled_flag_skips_exactly_its_points(flag: str) -> None:
    ssn = make_session([opt("p", **{flag: False})])
    calls: list[str] = []
    _register_all(ssn, "p", calls)
    _evaluate_all(ssn)
    skipped = {point for point in ALL_POINTS if GATING_FLAG.get(point, point) == flag}
    assert set(calls) == ALL_POINTS - skipped


def test_disabled_points_fall_back_to_their_defaults() -> None:
    every_flag_off = {
        flag: False
        for flag in (
            "predicate",
            "nodeOrder",
            "bestNode",
            "jobOrder",
            "taskOrder",
            "jobReady",
            "jobPipelined",
            "jobEnqueued",
            "allocatable",
        )
    }
    ssn = make_session([opt("p", **every_flag_off)])
    _register_all(ssn, "p", [])
    assert ssn.predicate(TASK, NODE) == SUCCESS
    assert ssn.pre_predicate(TASK) == SUCCESS
    assert ssn.node_order(TASK, NODE) == 0.0
    assert ssn.batch_node_order(TASK, [NODE]).tolist() == [0.0]
    assert ssn.best_node(TASK, {0.0: [NODE]}) is None
    assert ssn.job_ready(JOB) is True
    assert ssn.job_pipelined(JOB) is True
    assert ssn.job_enqueueable(JOB) is True
    assert ssn.allocatable(QueueInfo("default"), TASK) is True


def test_a_plugin_not_in_the_tiers_is_never_called() -> None:
    ssn = make_session([opt("p")])
    calls: list[str] = []
    _register_all(ssn, "stranger", calls)
    _evaluate_all(ssn)
    assert calls == []


# --- predicate -----------------------------------------------------------------------------------


def test_predicate_is_an_and_in_tier_order_and_stops_at_the_first_failure() -> None:
    ssn = make_session([opt("a"), opt("b")], [opt("c")])
    calls: list[str] = []

    def predicate(name: str, status: Status) -> Callable[[TaskInfo, NodeInfo], Status]:
        def fn(task: TaskInfo, node: NodeInfo) -> Status:
            calls.append(name)
            return status

        return fn

    ssn.add_predicate_fn("c", predicate("c", Status.unschedulable("c says no")))
    ssn.add_predicate_fn("b", predicate("b", Status(StatusCode.SKIP)))
    ssn.add_predicate_fn("a", predicate("a", SUCCESS))
    status = ssn.predicate(TASK, NODE)
    assert calls == ["a", "b", "c"]
    assert status == Status(StatusCode.UNSCHEDULABLE, "c says no", "c")

    calls.clear()
    ssn.add_predicate_fn("a", predicate("a", Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, "taint")))
    assert ssn.predicate(TASK, NODE) == Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, "taint", "a")
    assert calls == ["a"]


def test_predicate_keeps_a_plugin_name_the_status_already_carries() -> None:
    ssn = make_session([opt("a")])
    ssn.add_predicate_fn("a", lambda t, n: Status(StatusCode.ERROR, "boom", "inner"))
    assert ssn.predicate(TASK, NODE).plugin == "inner"


# --- node order and best node --------------------------------------------------------------------


def test_node_order_and_batch_node_order_sum_over_plugins() -> None:
    ssn = make_session([opt("a")], [opt("b"), opt("c", nodeOrder=False)])
    ssn.add_node_order_fn("a", lambda t, n: 1.5)
    ssn.add_node_order_fn("b", lambda t, n: 2.25)
    ssn.add_node_order_fn("c", lambda t, n: 100.0)
    assert ssn.node_order(TASK, NODE) == 3.75
    ssn.add_batch_node_order_fn("a", lambda t, ns: {"n1": 1.0, "n2": 2.0})
    ssn.add_batch_node_order_fn("b", lambda t, ns: {"n2": 3.0, "n3": 4.0})
    ssn.add_batch_node_order_fn("c", lambda t, ns: {"n1": 50.0})
    nodes = [NodeInfo.create(name, Resource(milli_cpu=1000)) for name in ("n1", "n2", "n3", "n4")]
    # Per candidate, in their order; a node no plugin scores gets 0.
    assert ssn.batch_node_order(TASK, nodes).tolist() == [1.0, 5.0, 4.0, 0.0]


def test_best_node_is_the_first_plugin_in_tier_order_that_names_one() -> None:
    other = NodeInfo.create("n2", Resource(milli_cpu=1000))
    third = NodeInfo.create("n3", Resource(milli_cpu=1000))
    ssn = make_session([opt("a"), opt("b")], [opt("c")])
    ssn.add_best_node_fn("c", lambda t, s: third)
    ssn.add_best_node_fn("b", lambda t, s: other)
    ssn.add_best_node_fn("a", lambda t, s: None)
    assert ssn.best_node(TASK, {1.0: [NODE, other]}) is other


# --- ordering ------------------------------------------------------------------------------------


def test_job_order_first_non_zero_plugin_decides() -> None:
    ssn = make_session([opt("a"), opt("b")], [opt("c")])
    ssn.add_job_order_fn("a", lambda x, y: 0)
    ssn.add_job_order_fn("b", lambda x, y: -1 if x.uid == "late" else 1)
    ssn.add_job_order_fn("c", lambda x, y: 1 if x.uid == "late" else -1)
    early, late = make_job("early", ts=1.0), make_job("late", ts=9.0)
    assert [job.uid for job in ssn.sorted_jobs([early, late])] == ["late", "early"]


def test_job_order_ties_break_by_creation_then_uid() -> None:
    ssn = make_session([opt("a")])
    ssn.add_job_order_fn("a", lambda x, y: 0)
    jobs = [make_job("b", ts=5.0), make_job("c", ts=1.0), make_job("a", ts=5.0)]
    assert [job.uid for job in ssn.sorted_jobs(jobs)] == ["c", "a", "b"]


def test_task_order_first_non_zero_decides_then_creation_then_uid() -> None:
    ssn = make_session([opt("a")], [opt("b")])
    ssn.add_task_order_fn("b", lambda x, y: -1 if x.uid == "t9" else (1 if y.uid == "t9" else 0))
    tasks = [make_task("t2", ts=3.0), make_task("t1", ts=3.0), make_task("t9", ts=7.0), make_task("t5", ts=0.5)]
    assert [task.uid for task in ssn.sorted_tasks(tasks)] == ["t9", "t5", "t1", "t2"]
    assert ssn.task_order(make_task("x", ts=1.0), make_task("x", ts=1.0)) == 0


# --- job ready, valid, allocatable ---------------------------------------------------------------


def test_job_ready_needs_every_plugin_and_none_means_ready() -> None:
    ssn = make_session([opt("a")], [opt("b")])
    assert ssn.job_ready(JOB) is True
    ssn.add_job_ready_fn("a", lambda j: True)
    ssn.add_job_ready_fn("b", lambda j: False)
    assert ssn.job_ready(JOB) is False
    ssn.add_job_ready_fn("b", lambda j: True)
    assert ssn.job_ready(JOB) is True


def test_job_valid_returns_the_first_failing_result() -> None:
    ssn = make_session([opt("a"), opt("b")], [opt("c")])
    ssn.add_job_valid_fn("c", lambda j: ValidateResult(False, "C", "third"))
    ssn.add_job_valid_fn("b", lambda j: ValidateResult(False, "B", "second"))
    ssn.add_job_valid_fn("a", lambda j: ValidateResult(True))
    assert ssn.job_valid(JOB) == ValidateResult(False, "B", "second")
    ssn.add_job_valid_fn("b", lambda j: None)
    assert ssn.job_valid(JOB) == ValidateResult(False, "C", "third")


def test_allocatable_is_an_and() -> None:
    ssn = make_session([opt("a"), opt("b")])
    ssn.add_allocatable_fn("a", lambda q, t: True)
    assert ssn.allocatable(QueueInfo("q"), TASK) is True
    ssn.add_allocatable_fn("b", lambda q, t: q.name != "q")
    assert ssn.allocatable(QueueInfo("q"), TASK) is False
    assert ssn.allocatable(QueueInfo("other"), TASK) is True


# --- votes ---------------------------------------------------------------------------------------


def _vote_session(votes: list[list[int]], point: str) -> Session:
    tiers = [[opt(f"p{t}{i}") for i in range(len(tier))] for t, tier in enumerate(votes)]
    ssn = make_session(*tiers)
    for t, tier in enumerate(votes):
        for i, vote in enumerate(tier):
            fn = functools.partial(lambda v, job: v, vote)
            if point == "pipelined":
                ssn.add_job_pipelined_fn(f"p{t}{i}", fn)
            else:
                ssn.add_job_enqueueable_fn(f"p{t}{i}", fn)
    return ssn


@pytest.mark.parametrize("point", ["pipelined", "enqueueable"])
@pytest.mark.parametrize(
    ("votes", "expected"),
    [
        ([[PERMIT, REJECT]], False),  # a reject anywhere in a tier loses, even after a permit
        ([[REJECT], [PERMIT]], False),
        ([[PERMIT], [REJECT]], True),  # a permitting tier ends the walk before the reject
        ([[ABSTAIN, ABSTAIN], [REJECT]], False),  # an abstaining tier passes to the next
        ([[ABSTAIN], [ABSTAIN, PERMIT]], True),
        ([[ABSTAIN], [ABSTAIN]], True),  # nobody decides -> yes
        ([], True),
    ],
)
def test_tiered_votes(point: str, votes: list[list[int]], expected: bool) -> None:
    ssn = _vote_session(votes, point)
    result = ssn.job_pipelined(JOB) if point == "pipelined" else ssn.job_enqueueable(JOB)
    assert result is expected


# --- evictable -----------------------------------------------------------------------------------


def test_evictable_intersects_within_a_tier_and_first_deciding_tier_wins() -> None:
    a, b, c = make_task("a"), make_task("b"), make_task("c")
    ssn = make_session([opt("x"), opt("y"), opt("z")], [opt("w")])
    ssn.add_preemptable_fn("x", lambda e, es: ([a, b, c], PERMIT))
    ssn.add_preemptable_fn("y", lambda e, es: ([], ABSTAIN))
    ssn.add_preemptable_fn("z", lambda e, es: ([c, b], PERMIT))
    ssn.add_preemptable_fn("w", lambda e, es: ([a], PERMIT))
    assert [task.uid for task in ssn.preemptable(TASK, [a, b, c])] == ["b", "c"]


def test_evictable_empty_answer_vetoes_and_all_abstain_gives_none() -> None:
    a = make_task("a")
    ssn = make_session([opt("x")], [opt("w")])
    ssn.add_reclaimable_fn("x", lambda e, es: ([], PERMIT))
    ssn.add_reclaimable_fn("w", lambda e, es: ([a], PERMIT))
    assert ssn.reclaimable(TASK, [a]) == []
    ssn.add_reclaimable_fn("x", lambda e, es: ([a], ABSTAIN))
    assert ssn.reclaimable(TASK, [a]) == [a]
    ssn.add_reclaimable_fn("w", lambda e, es: ([a], ABSTAIN))
    assert ssn.reclaimable(TASK, [a]) == []
