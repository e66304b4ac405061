"""pdb: Volcano's PodDisruptionBudget victim filter, the budgets' conversion, and budgets honoured
by preempt and reclaim (in a session, and end to end in the simulated cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from numasched.api.disruption_budget import DisruptionBudget, IntOrPercent, computed_disruptions_allowed
from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot, QueueInfo
from numasched.api.task import TaskInfo, TaskStatus
from numasched.cache.cache import Cache
from numasched.cache.convert_pdb import pdb_from_object
from numasched.cache.eviction import EvictRequest, EvictStatus
from numasched.cache.sim_evictor import SimEvictor
from numasched.cache.simcluster import SimCluster
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.session import Session
from numasched.scheduler.framework.statement import Statement
from numasched.scheduler.loop import run_session

GPU = "nvidia.com/gpu"
JOB_LABEL = "volcano.sh/job-name"


def gpus(count: int) -> Resource:
    return Resource(1000 * count, 1e9 * count, {GPU: 1000.0 * count})


def pdb_object(name: str, selector: Any, *, status: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"selector": selector, **spec},
    }
    if status is not None:
        obj["status"] = status
    return obj


def budget(name: str, labels: dict[str, str], **fields: Any) -> DisruptionBudget:
    return DisruptionBudget("default", name, match_labels=labels, selects=bool(labels), **fields)


def placed(name: str, job: str, node: NodeInfo, *, labels: dict[str, str], priority: int = 1) -> TaskInfo:
    task = TaskInfo(
        uid=name,
        namespace="default",
        name=name,
        job_id=job,
        resreq=gpus(1),
        init_resreq=gpus(1),
        priority=priority,
        labels=labels,
    )
    task.status, task.node_name = TaskStatus.RUNNING, node.name
    node.add_task(task)
    return task


def pdb_session(budgets: list[DisruptionBudget], tasks: list[TaskInfo], node: NodeInfo) -> Session:
    jobs: dict[str, JobInfo] = {}
    for task in tasks:
        job = jobs.setdefault(task.job_id, JobInfo(uid=task.job_id, namespace="default", name=task.job_id))
        job.add_task(task)
    snapshot = ClusterSnapshot(nodes={node.name: node}, jobs=jobs, disruption_budgets={b.key: b for b in budgets})
    config = SchedulerConfig(actions=(), tiers=(Tier((PluginOption("pdb"),)),))
    ssn = Session(snapshot, config, default_registry())
    ssn.open()
    return ssn


# Volcano's TestPreemptableAndReclaimableFn (pkg/scheduler/plugins/pdb/pdb_test.go): two pods of
# job-1 under a budget selecting job-1, by status.disruptionsAllowed.
@pytest.mark.parametrize(
    ("disruptions_allowed", "expected"),
    [(None, ["test-pod1", "test-pod2"]), (0, []), (1, ["test-pod1"])],
    ids=["without pdbs", "can evict 0 pod", "can evict 1 pod"],
)
def test_volcano_table(disruptions_allowed: int | None, expected: list[str]) -> None:
    node = NodeInfo.create("n1", gpus(4))
    tasks = [placed(f"test-pod{i}", "job-1", node, labels={JOB_LABEL: "job-1"}) for i in (1, 2)]
    budgets = (
        []
        if disruptions_allowed is None
        else [budget("test-pdb", {JOB_LABEL: "job-1"}, disruptions_allowed=disruptions_allowed)]
    )
    ssn = pdb_session(budgets, tasks, node)
    preemptor = TaskInfo(uid="p", namespace="default", name="p", job_id="other", resreq=gpus(1), init_resreq=gpus(1))
    assert [t.name for t in ssn.preemptable(preemptor, tasks)] == expected
    assert [t.name for t in ssn.reclaimable(preemptor, tasks)] == expected


def test_pods_already_disrupted_use_no_budget_and_unlabelled_pods_stay_victims() -> None:
    node = NodeInfo.create("n1", gpus(4))
    gone = placed("gone", "j", node, labels={"app": "web"})
    kept = placed("web-1", "j", node, labels={"app": "web"})
    bare = placed("bare", "j", node, labels={})
    protecting = budget("web", {"app": "web"}, disruptions_allowed=1, disrupted_pods=frozenset({"gone"}))
    ssn = pdb_session([protecting], [gone, kept, bare], node)
    preemptor = TaskInfo(uid="p", namespace="default", name="p", job_id="other", resreq=gpus(1), init_resreq=gpus(1))
    # gone is listed in disruptedPods (free), web-1 takes the one disruption, bare matches nothing.
    assert [t.name for t in ssn.preemptable(preemptor, [gone, kept, bare])] == ["gone", "web-1", "bare"]


def test_this_sessions_evictions_count_against_the_status_figure() -> None:
    node = NodeInfo.create("n1", gpus(4))
    tasks = [placed(f"web-{i}", "j", node, labels={"app": "web"}) for i in range(3)]
    ssn = pdb_session([budget("web", {"app": "web"}, disruptions_allowed=2)], tasks, node)
    preemptor = TaskInfo(uid="p", namespace="default", name="p", job_id="other", resreq=gpus(1), init_resreq=gpus(1))
    assert len(ssn.preemptable(preemptor, tasks)) == 2
    statement = Statement(ssn)
    statement.evict(tasks[0], "test")
    assert [t.name for t in ssn.preemptable(preemptor, tasks[1:])] == ["web-1"]
    statement.evict(tasks[1], "test")
    assert ssn.preemptable(preemptor, tasks[2:]) == []
    statement.discard()
    assert len(ssn.preemptable(preemptor, tasks)) == 2


def test_without_status_the_budget_is_computed_from_the_pods() -> None:
    node = NodeInfo.create("n1", gpus(4))
    tasks = [placed(f"web-{i}", "j", node, labels={"app": "web"}) for i in range(4)]
    preemptor = TaskInfo(uid="p", namespace="default", name="p", job_id="other", resreq=gpus(1), init_resreq=gpus(1))
    # minAvailable 3 of 4 healthy: one may go; after one is evicted, none.
    ssn = pdb_session([budget("web", {"app": "web"}, min_available=IntOrPercent(3))], tasks, node)
    assert [t.name for t in ssn.preemptable(preemptor, tasks)] == ["web-0"]
    Statement(ssn).evict(tasks[3], "test")
    assert ssn.preemptable(preemptor, tasks[:3]) == []


@pytest.mark.parametrize(
    ("min_available", "max_unavailable", "expected", "healthy", "allowed"),
    [
        (IntOrPercent(2), None, 5, 5, 3),
        (IntOrPercent(50, percent=True), None, 5, 5, 2),  # ceil(2.5) = 3 must stay
        (None, IntOrPercent(1), 5, 5, 1),
        (None, IntOrPercent(30, percent=True), 5, 4, 1),  # ceil(1.5) = 2 unavailable: 3 healthy needed
        (None, IntOrPercent(1), 5, 3, 0),  # already below: never negative
        (None, None, 4, 4, 4),
    ],
)
def test_computed_disruptions_allowed(
    min_available: IntOrPercent | None, max_unavailable: IntOrPercent | None, expected: int, healthy: int, allowed: int
) -> None:
    subject = budget("b", {"a": "b"}, min_available=min_available, max_unavailable=max_unavailable)
    assert computed_disruptions_allowed(subject, expected, healthy) == allowed


def test_conversion_reads_the_api_fields() -> None:
    selector = {
        "matchLabels": {"app": "web"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
            {"key": "canary", "operator": "DoesNotExist"},
        ],
    }
    read, problems = pdb_from_object(
        pdb_object("web", selector, maxUnavailable="25%", status={"disruptionsAllowed": 2, "disruptedPods": {"x": "t"}})
    )
    assert problems == []
    assert read.max_unavailable == IntOrPercent(25, percent=True)
    assert read.disruptions_allowed == 2 and read.disrupted_pods == frozenset({"x"})
    assert read.matches("default", {"app": "web", "tier": "a"})
    assert not read.matches("default", {"app": "web", "tier": "a", "canary": "1"})
    assert not read.matches("default", {"app": "web", "tier": "c"})
    assert not read.matches("other", {"app": "web", "tier": "a"})


@pytest.mark.parametrize(
    ("obj", "field", "selects", "allowed"),
    [
        (
            pdb_object("b", {"matchExpressions": [{"key": "k", "operator": "Near"}]}, minAvailable=1),
            "spec.selector.matchExpressions[0].operator",
            True,
            0,
        ),
        (
            pdb_object("b", {"matchExpressions": [{"key": "k", "operator": "In"}]}, minAvailable=1),
            "spec.selector.matchExpressions[0].values",
            True,
            0,
        ),
        (pdb_object("b", {"matchLabels": {"a": "b"}}, minAvailable="lots"), "spec.minAvailable", True, 0),
        (pdb_object("b", {"matchLabels": {"a": "b"}}, minAvailable="2"), "spec.minAvailable", True, 0),
        (pdb_object("b", "app=web", minAvailable=1), "spec.selector", True, 0),
    ],
)
def test_unreadable_fields_are_named_and_stay_on_the_safe_side(
    obj: dict[str, Any], field: str, selects: bool, allowed: int | None
) -> None:
    read, problems = pdb_from_object(obj)
    assert len(problems) == 1 and problems[0].startswith(field), problems
    assert read.selects is selects
    assert read.disruptions_allowed == allowed


def test_an_empty_selector_covers_the_namespace_and_a_null_one_nothing_as_in_policy_v1() -> None:
    # policy/v1 (the Eviction API's reading), not Volcano's, which skips an empty selector: a
    # victim chosen under Volcano's reading would be refused by the API server.
    read, problems = pdb_from_object(pdb_object("b", {}, minAvailable=1))
    assert problems == [] and read.matches("default", {"app": "web"}) and read.matches("default", {})
    assert not read.matches("other", {"app": "web"})
    null, problems = pdb_from_object(pdb_object("b", None, minAvailable=1))
    assert problems == [] and not null.matches("default", {"app": "web"})


def test_the_cache_names_a_bad_budget_and_keeps_it() -> None:
    seen: list[tuple[str, str, str]] = []
    cluster = SimCluster(Cache(on_problem=lambda kind, name, message: seen.append((kind, name, message))))
    cluster.add(pdb_object("web", {"matchLabels": {"app": "web"}}, minAvailable="x"))
    assert seen and seen[0][:2] == ("PodDisruptionBudget", "default/web") and "spec.minAvailable" in seen[0][2]
    assert cluster.cache.snapshot().disruption_budgets["default/web"].disruptions_allowed == 0


# -- preempt and reclaim ----------------------------------------------------------------------


def tiers() -> tuple[Tier, ...]:
    first = Tier(
        (
            PluginOption("priority"),
            PluginOption("gang", flags={"preemptable": False}),
            PluginOption("conformance"),
            PluginOption("pdb"),
        )
    )
    return first, Tier((PluginOption("predicates"), PluginOption("proportion")))


def two_nodes_and_a_preemptor() -> ClusterSnapshot:
    nodes = {name: NodeInfo.create(name, gpus(2)) for name in ("n1", "n2")}
    low = [placed(f"db-{i}", f"db-{i}", nodes["n1"], labels={"app": "db"}) for i in range(2)]
    low += [placed(f"batch-{i}", f"batch-{i}", nodes["n2"], labels={"app": "batch"}) for i in range(2)]
    jobs = {t.job_id: JobInfo(uid=t.job_id, namespace="default", name=t.job_id, priority=1) for t in low}
    for t in low:
        jobs[t.job_id].add_task(t)
    preemptor = TaskInfo(uid="hi", namespace="default", name="hi", job_id="hi", resreq=gpus(2), init_resreq=gpus(2))
    jobs["hi"] = JobInfo(uid="hi", namespace="default", name="hi", priority=100)
    jobs["hi"].add_task(preemptor)
    return ClusterSnapshot(nodes=nodes, jobs=jobs)


@pytest.mark.parametrize(
    ("with_budget", "victims"), [(False, {"db-0", "db-1"}), (True, {"batch-0", "batch-1"})], ids=["open", "budget"]
)
def test_preempt_goes_to_the_node_the_budget_does_not_protect(with_budget: bool, victims: set[str]) -> None:
    """n1's two low pods are under a budget (minAvailable 1), n2's are not protected; a 2-GPU
    preemptor can only be placed by evicting two pods: with the budget it goes to n2, without it
    to n1 (first by name)."""
    snapshot = two_nodes_and_a_preemptor()
    if with_budget:
        snapshot.disruption_budgets = {"default/db": budget("db", {"app": "db"}, min_available=IntOrPercent(1))}
    config = SchedulerConfig(actions=("enqueue", "allocate", "preempt"), tiers=tiers())
    result = run_session(snapshot, config, default_registry())
    assert {e.task.name for e in result.evictions} == victims


def test_reclaim_respects_the_budget_of_the_queue_it_takes_from() -> None:
    """Queue q1 holds both GPUs of the cluster; q2 (same weight) deserves one. q1's pods are
    under a budget that allows no disruption: nothing is reclaimed. Without it, one pod goes."""
    for allowed, evicted in ((0, 0), (1, 1)):
        node = NodeInfo.create("n1", gpus(2))
        owned = [placed(f"own-{i}", f"own-{i}", node, labels={"app": "own"}) for i in range(2)]
        jobs = {t.job_id: JobInfo(uid=t.job_id, namespace="default", name=t.job_id, queue="q1") for t in owned}
        for t in owned:
            jobs[t.job_id].add_task(t)
        wanting = TaskInfo(uid="w", namespace="default", name="w", job_id="w", resreq=gpus(1), init_resreq=gpus(1))
        jobs["w"] = JobInfo(uid="w", namespace="default", name="w", queue="q2")
        jobs["w"].add_task(wanting)
        snapshot = ClusterSnapshot(
            nodes={"n1": node},
            jobs=jobs,
            queues={"q1": QueueInfo("q1"), "q2": QueueInfo("q2")},
            disruption_budgets={"default/own": budget("own", {"app": "own"}, disruptions_allowed=allowed)},
        )
        config = SchedulerConfig(actions=("enqueue", "allocate", "reclaim"), tiers=tiers())
        result = run_session(snapshot, config, default_registry())
        assert len(result.evictions) == evicted


# -- the simulated cluster --------------------------------------------------------------------


def sim_pod(name: str, priority: int, *, node: str = "", labels: dict[str, str] | None = None) -> dict[str, Any]:
    requests = {"cpu": "1", "memory": "1Gi", GPU: "1"}
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": labels or {}},
        "spec": {
            "schedulerName": "numasched",
            "priority": priority,
            "containers": [{"name": "main", "resources": {"requests": requests, "limits": requests}}],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }
    if node:
        pod["spec"]["nodeName"] = node
    return pod


def sim_node(name: str) -> dict[str, Any]:
    capacity = {"cpu": "4", "memory": "8Gi", GPU: "2", "pods": "110"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"capacity": capacity, "allocatable": capacity},
    }


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_simulate_preempts_only_what_the_budget_allows(anyio_backend: str) -> None:
    """Four 1-GPU web pods (budget maxUnavailable 1) fill two nodes; two 1-GPU high-priority
    pods arrive. Only one web pod may go at a time: after the first eviction the budget is used
    up and stays so (the pods are gone), so exactly one high pod runs."""
    from numasched.scheduler.simulate import simulate

    cluster = SimCluster(Cache())
    for name in ("n1", "n2"):
        cluster.add(sim_node(name))
    for index in range(4):
        cluster.add(sim_pod(f"web-{index}", 1, node="n1" if index < 2 else "n2", labels={"app": "web"}))
    cluster.add(pdb_object("web", {"matchLabels": {"app": "web"}}, maxUnavailable=1))
    cluster.add(sim_pod("high-a", 100))
    cluster.add(sim_pod("high-b", 100))
    config = SchedulerConfig(actions=("enqueue", "allocate", "preempt"), tiers=tiers())
    evictor = SimEvictor(cluster)
    await simulate(cluster, config, default_registry(), max_cycles=6, progress=False, evictor=evictor)
    assert len(evictor.evicted) == 1
    running = [p["metadata"]["name"] for p in cluster.pods() if p["spec"].get("nodeName")]
    assert sum(1 for name in running if name.startswith("high")) == 1
    assert sum(1 for name in running if name.startswith("web")) == 3


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_the_simulated_eviction_api_refuses_past_the_budget_and_records_it(anyio_backend: str) -> None:
    cluster = SimCluster(Cache())
    cluster.add(sim_node("n1"))
    for index in range(2):
        cluster.add(sim_pod(f"web-{index}", 1, node="n1", labels={"app": "web"}))
    cluster.add(pdb_object("web", {"matchLabels": {"app": "web"}}, status={"disruptionsAllowed": 1}, minAvailable=1))
    evictor = SimEvictor(cluster)
    tasks = {t.name: t for t in cluster.cache.snapshot().nodes["n1"].tasks.values()}
    first = await evictor.evict(EvictRequest(tasks["web-0"], "n1", "test"))
    second = await evictor.evict(EvictRequest(tasks["web-1"], "n1", "test"))
    assert (first.status, second.status) == (EvictStatus.EVICTED, EvictStatus.BLOCKED)
    assert "default/web" in second.message
    status = cluster.objects["PodDisruptionBudget"]["default/web"]["status"]
    assert status["disruptionsAllowed"] == 0 and set(status["disruptedPods"]) == {"web-0"}
    assert cluster.cache.snapshot().disruption_budgets["default/web"].disruptions_allowed == 0
