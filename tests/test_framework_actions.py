"""enqueue / allocate / backfill through run_session, with the priority, gang and conformance
plugins, on nodes and tasks built directly from api/."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import structlog

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot, QueueInfo
from numasched.api.task import TaskInfo, TaskStatus
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.plugins.conformance import is_critical
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.registry import Registry
from numasched.scheduler.framework.session import PERMIT, REJECT, Session
from numasched.scheduler.framework.status import SUCCESS, Status, StatusCode, fit_error_summary
from numasched.scheduler.loop import run_session

GPU = "nvidia.com/gpu"


def gpu_node(name: str, gpus: int = 8, *, zone: str = "a") -> NodeInfo:
    node = NodeInfo.create(name, Resource(milli_cpu=64000, memory=512e9, scalars={GPU: gpus * 1000.0}))
    node.labels = {"zone": zone}
    return node


def make_task(
    uid: str,
    job: str,
    *,
    cpu: float = 1000,
    gpus: int = 0,
    ts: float = 0.0,
    priority: int = 0,
    best_effort: bool = False,
) -> TaskInfo:
    request = Resource() if best_effort else Resource(milli_cpu=cpu, memory=1e9, scalars={GPU: gpus * 1000.0})
    return TaskInfo(
        uid=uid,
        namespace="ns",
        name=uid,
        job_id=job,
        resreq=request,
        init_resreq=request.clone(),
        creation_timestamp=ts,
        priority=priority,
    )


def make_job(uid: str, tasks: list[TaskInfo], *, min_available: int = 1, **fields: Any) -> JobInfo:
    job = JobInfo(uid=uid, namespace="ns", name=uid, min_available=min_available)
    job = attrs.evolve(job, **fields)
    for task in tasks:
        job.add_task(task)
    return job


def snapshot_of(nodes: list[NodeInfo], jobs: list[JobInfo], **fields: Any) -> ClusterSnapshot:
    snapshot = ClusterSnapshot(nodes={n.name: n for n in nodes}, jobs={j.uid: j for j in jobs})
    return attrs.evolve(snapshot, **fields)


def config(*extra: str, actions: tuple[str, ...] = ("enqueue", "allocate", "backfill")) -> SchedulerConfig:
    first = Tier((PluginOption("priority"), PluginOption("gang"), PluginOption("conformance")))
    second = Tier(tuple(PluginOption(name) for name in extra))
    return SchedulerConfig(actions=actions, tiers=(first, second))


class ZonePredicate:
    """A test plugin: only nodes in zone "a"."""

    name = "zone"

    def __init__(self, arguments: Arguments) -> None:
        self.zone = arguments.get_str("zone", "a")

    def on_session_open(self, ssn: Session) -> None:
        def predicate(task: TaskInfo, node: NodeInfo) -> Status:
            if node.labels.get("zone") == self.zone:
                return SUCCESS
            return Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, "node(s) didn't match Pod's node affinity")

        ssn.add_predicate_fn(self.name, predicate)

    def on_session_close(self, ssn: Session) -> None:
        return None


def registry() -> Registry:
    result = default_registry()
    result.register_plugin("zone", ZonePredicate)
    return result


# --- gang ----------------------------------------------------------------------------------------


def _gang(nodes: int) -> tuple[ClusterSnapshot, JobInfo]:
    tasks = [make_task(f"w{i}", "train", cpu=8000, gpus=8, ts=i) for i in range(4)]
    job = make_job("train", tasks, min_available=4, has_pod_group=True, pod_group_phase="Inqueue")
    return snapshot_of([gpu_node(f"n{i}") for i in range(nodes)], [job]), job


def test_a_gang_of_four_whole_node_pods_binds_none_on_three_nodes() -> None:
    snapshot, job = _gang(3)
    result = run_session(snapshot, config(), registry())
    assert result.bind_requests == ()
    assert all(task.status is TaskStatus.PENDING for task in job.tasks.values())
    assert all(node.idle.scalars[GPU] == 8000 for node in snapshot.nodes.values())
    assert result.fit_errors["w3"] == "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    assert result.fit_errors["w0"] == (
        "pod group ns/train is not ready: 3 of 4 required tasks could be placed; "
        "ns/w3: 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    )
    [update] = result.job_updates
    assert update.job is job
    assert update.message.startswith("4/4 tasks in gang unschedulable: ns/w0: pod group ns/train is not ready")


def test_a_gang_of_four_whole_node_pods_binds_all_on_four_nodes() -> None:
    snapshot, job = _gang(4)
    result = run_session(snapshot, config(), registry())
    assert sorted((r.task.uid, r.node_name) for r in result.bind_requests) == [
        ("w0", "n0"),
        ("w1", "n1"),
        ("w2", "n2"),
        ("w3", "n3"),
    ]
    assert all(task.status is TaskStatus.BINDING for task in job.tasks.values())
    assert result.unschedulable == ()


def test_without_gang_each_pod_binds_on_its_own() -> None:
    snapshot, _ = _gang(3)
    plain = SchedulerConfig(actions=("allocate",), tiers=(Tier((PluginOption("priority"),)),))
    result = run_session(snapshot, plain, registry())
    assert [r.task.uid for r in result.bind_requests] == ["w0", "w1", "w2"]
    assert list(result.fit_errors) == ["w3"]


def test_an_invalid_gang_is_not_allocated() -> None:
    tasks = [make_task(f"w{i}", "train") for i in range(2)]
    tasks[1].status = TaskStatus.FAILED
    job = make_job("train", tasks, min_available=2)
    result = run_session(snapshot_of([gpu_node("n0")], [job]), config(), registry())
    assert result.bind_requests == ()
    assert result.fit_errors == {"w0": "not enough valid tasks for gang-scheduling of ns/train: valid 1, min 2"}


# --- fit errors ----------------------------------------------------------------------------------


def test_fit_error_summary_groups_counts_and_sorts() -> None:
    nodes = [gpu_node(f"n{i:02d}", gpus=0 if i < 8 else 8, zone="a" if i < 8 else "b") for i in range(12)]
    task = make_task("t", "job", gpus=1)
    result = run_session(snapshot_of(nodes, [make_job("job", [task])]), config("zone"), registry())
    assert result.fit_errors == {
        "t": "0/12 nodes are available: 8 Insufficient nvidia.com/gpu, 4 node(s) didn't match Pod's node affinity."
    }
    assert task.fit_error == result.fit_errors["t"]


def test_fit_error_summary_ties_sort_by_text_and_reasons_count_once_per_node() -> None:
    unschedulable = Status.unschedulable
    per_node = {
        "a": [unschedulable("Insufficient memory"), unschedulable("Insufficient cpu")],
        "b": [unschedulable("Insufficient cpu"), unschedulable("Insufficient cpu")],
        "c": [unschedulable("Insufficient memory")],
        "d": [Status(StatusCode.ERROR, "", "numa-aware")],
    }
    assert fit_error_summary(5, per_node) == (
        "0/5 nodes are available: 2 Insufficient cpu, 2 Insufficient memory, 1 rejected by numa-aware."
    )
    assert fit_error_summary(0, {}) == "0/0 nodes are available: no nodes in the cluster."


def test_resources_being_released_admit_a_pipelined_task_that_is_not_bound() -> None:
    node = gpu_node("n0", gpus=8)
    leaving = make_task("old", "old-job", gpus=8)
    leaving.status = TaskStatus.RELEASING
    leaving.node_name = "n0"
    node.add_task(leaving)
    task = make_task("new", "new-job", gpus=4)
    result = run_session(snapshot_of([node], [make_job("new-job", [task])]), config(), registry())
    assert result.bind_requests == ()
    assert task.status is TaskStatus.PIPELINED
    assert task.node_name == "n0"
    assert result.fit_errors["new"] == "pod group ns/new-job is pipelined: waiting for resources being released"


# --- ordering and determinism ---------------------------------------------------------------------


def test_higher_priority_job_gets_the_only_node() -> None:
    low = make_job("low", [make_task("l", "low", gpus=8, ts=1.0)], priority_class_name="batch-low")
    high = make_job("high", [make_task("h", "high", gpus=8, ts=5.0)], priority_class_name="batch-high")
    snapshot = snapshot_of([gpu_node("n0")], [low, high], priority_classes={"batch-low": 10, "batch-high": 1000})
    result = run_session(snapshot, config(), registry())
    assert [r.task.uid for r in result.bind_requests] == ["h"]
    assert result.fit_errors == {"l": "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."}


def test_task_priority_orders_tasks_within_a_job() -> None:
    tasks = [make_task("a", "job", gpus=8, priority=1, ts=0.0), make_task("b", "job", gpus=8, priority=50, ts=9.0)]
    result = run_session(snapshot_of([gpu_node("n0")], [make_job("job", tasks)]), config(), registry())
    assert [r.task.uid for r in result.bind_requests] == ["b"]


def test_equal_scores_pick_the_smallest_node_name() -> None:
    nodes = [gpu_node(name) for name in ("zeta", "alpha", "mid")]
    tasks = [make_task(f"t{i}", f"j{i}", gpus=8, ts=i) for i in range(3)]
    jobs = [make_job(f"j{i}", [task]) for i, task in enumerate(tasks)]
    result = run_session(snapshot_of(nodes, jobs), config(), registry())
    assert [(r.task.uid, r.node_name) for r in result.bind_requests] == [("t0", "alpha"), ("t1", "mid"), ("t2", "zeta")]


def test_node_order_and_best_node_choose_the_node() -> None:
    class Scores:
        name = "scores"

        def __init__(self, arguments: Arguments) -> None:
            self.best = arguments.get_str("best", "")

        def on_session_open(self, ssn: Session) -> None:
            ssn.add_node_order_fn(self.name, lambda task, node: 10.0 if node.name == "n1" else 0.0)
            ssn.add_batch_node_order_fn(self.name, lambda task, nodes: {"n2": 10.5})
            if self.best:
                ssn.add_best_node_fn(self.name, lambda task, scores: ssn.nodes[self.best])

        def on_session_close(self, ssn: Session) -> None:
            return None

    reg = registry()
    reg.register_plugin("scores", Scores)

    def placed(arguments: dict[str, object]) -> str:
        job = make_job("j", [make_task("t", "j", gpus=1)])
        cfg = SchedulerConfig(actions=("allocate",), tiers=(Tier((PluginOption("scores", arguments),)),))
        [request] = run_session(snapshot_of([gpu_node(f"n{i}") for i in range(3)], [job]), cfg, reg).bind_requests
        return request.node_name

    assert placed({}) == "n2"
    assert placed({"best": "n0"}) == "n0"


# --- enqueue -------------------------------------------------------------------------------------


def test_enqueue_admits_pod_groups_the_plugins_permit() -> None:
    class Gate:
        name = "gate"

        def __init__(self, arguments: Arguments) -> None:
            pass

        def on_session_open(self, ssn: Session) -> None:
            ssn.add_job_enqueueable_fn(self.name, lambda job: PERMIT if job.name == "welcome" else REJECT)

        def on_session_close(self, ssn: Session) -> None:
            return None

    reg = registry()
    reg.register_plugin("gate", Gate)
    minimum = Resource(milli_cpu=1000)
    welcome = make_job("welcome", [make_task("w", "welcome")], has_pod_group=True, min_resources=minimum)
    refused = make_job("refused", [make_task("r", "refused")], has_pod_group=True, min_resources=minimum)
    no_minimum = make_job("free", [make_task("f", "free")], has_pod_group=True, pod_group_phase="Pending")
    standalone = make_job("solo", [make_task("s", "solo")])
    snapshot = snapshot_of([gpu_node("n0")], [welcome, refused, no_minimum, standalone])
    result = run_session(snapshot, config("gate"), reg)
    assert welcome.pod_group_phase == "Inqueue"
    assert no_minimum.pod_group_phase == "Inqueue"
    assert refused.pod_group_phase == ""
    assert sorted(r.task.uid for r in result.bind_requests) == ["f", "s", "w"]
    assert result.fit_errors == {"r": "pod group ns/refused is not admitted yet (phase Pending)"}
    assert {(u.job.uid, u.phase) for u in result.job_updates} >= {("welcome", "Inqueue"), ("free", "Inqueue")}


def test_a_closed_queue_allocates_nothing() -> None:
    job = make_job("j", [make_task("t", "j")], queue="research")
    snapshot = snapshot_of([gpu_node("n0")], [job], queues={"research": QueueInfo("research", state="Closed")})
    result = run_session(snapshot, config(), registry())
    assert result.bind_requests == ()
    assert result.fit_errors == {"t": "queue research is Closed"}


# --- backfill ------------------------------------------------------------------------------------


def test_backfill_places_best_effort_pods_on_the_first_passing_node() -> None:
    nodes = [gpu_node("n0", zone="b"), gpu_node("n1"), gpu_node("n2")]
    be = [make_task(f"be{i}", f"be{i}", best_effort=True) for i in range(2)]
    jobs = [make_job(task.job_id, [task]) for task in be]
    result = run_session(snapshot_of(nodes, jobs), config("zone"), registry())
    assert [(r.task.uid, r.node_name) for r in result.bind_requests] == [("be0", "n1"), ("be1", "n1")]
    assert nodes[1].idle == nodes[1].allocatable


def test_backfill_is_the_only_action_that_places_best_effort_pods() -> None:
    task = make_task("be", "be", best_effort=True)
    result = run_session(
        snapshot_of([gpu_node("n0")], [make_job("be", [task])]), config(actions=("allocate",)), registry()
    )
    assert result.bind_requests == ()
    assert result.fit_errors == {"be": "no configured action placed this best-effort task; actions: allocate"}


def test_backfill_reports_nodes_that_fail_predicates() -> None:
    task = make_task("be", "be", best_effort=True)
    nodes = [gpu_node("n0", zone="b"), gpu_node("n1", zone="c")]
    result = run_session(snapshot_of(nodes, [make_job("be", [task])]), config("zone"), registry())
    assert result.fit_errors == {"be": "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity."}


def test_backfill_completes_a_gang_of_best_effort_pods_together() -> None:
    tasks = [make_task(f"be{i}", "g", best_effort=True) for i in range(3)]
    job = make_job("g", tasks, min_available=3)
    result = run_session(snapshot_of([gpu_node("n0")], [job]), config(), registry())
    assert sorted(r.task.uid for r in result.bind_requests) == ["be0", "be1", "be2"]


# --- conformance ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "priority_class", "critical"),
    [
        ("kube-system", "", True),
        ("team", "system-cluster-critical", True),
        ("team", "system-node-critical", True),
        ("team", "high", False),
    ],
)
def test_conformance_never_offers_critical_pods_as_victims(namespace: str, priority_class: str, critical: bool) -> None:
    victim = attrs.evolve(make_task("v", "vj"), namespace=namespace, priority_class_name=priority_class)
    ordinary = make_task("o", "oj")
    ssn = Session(snapshot_of([gpu_node("n0")], []), config(), registry())
    ssn.open()
    assert is_critical(victim) is critical
    expected = ["o"] if critical else ["v", "o"]
    assert [t.uid for t in ssn.preemptable(make_task("p", "pj"), [victim, ordinary])] == expected
    assert [t.uid for t in ssn.reclaimable(make_task("p", "pj"), [victim, ordinary])] == expected
    only_critical = ssn.preemptable(make_task("p", "pj"), [victim])
    assert only_critical == ([] if critical else [victim])


def test_accepted_noop_plugins_warn_once_per_registry() -> None:
    cfg = SchedulerConfig(actions=("allocate",), tiers=(Tier((PluginOption("sla"), PluginOption("tdm"))),))
    reg = registry()
    with structlog.testing.capture_logs() as logs:
        for _ in range(3):
            run_session(snapshot_of([gpu_node("n0")], []), cfg, reg)
        run_session(snapshot_of([gpu_node("n0")], []), cfg, registry())
    warned = [entry["plugin"] for entry in logs if "not implemented" in entry["event"]]
    assert warned == ["sla", "tdm", "sla", "tdm"]


def test_a_task_its_queue_cannot_take_is_not_placed() -> None:
    class Quota:
        name = "quota"

        def __init__(self, arguments: Arguments) -> None:
            pass

        def on_session_open(self, ssn: Session) -> None:
            ssn.add_allocatable_fn(self.name, lambda queue, task: task.uid != "over")

        def on_session_close(self, ssn: Session) -> None:
            return None

    reg = registry()
    reg.register_plugin("quota", Quota)
    job = make_job("j", [make_task("fits", "j", ts=0.0), make_task("over", "j", ts=1.0)])
    result = run_session(snapshot_of([gpu_node("n0")], [job]), config("quota"), reg)
    assert [r.task.uid for r in result.bind_requests] == ["fits"]
    assert result.fit_errors == {"over": "queue default cannot take this task now"}
