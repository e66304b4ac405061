"""capacity with enableHierarchy: Volcano's own cases (Test_capacityPlugin_OnSessionOpenWithHierarchy
in pkg/scheduler/plugins/capacity/capacity_test.go) as table tests, the tree's figures computed by
hand, queue order, and broken parents (cycle, missing) named and still usable."""

from __future__ import annotations

import functools

import attrs
import pytest

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.queue_hierarchy import ROOT, resolve_parents
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot, QueueInfo
from numasched.api.task import TaskInfo, TaskStatus
from numasched.cache.cache import Cache
from numasched.cache.simcluster import SimCluster
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.plugins.capacity import CapacityPlugin, deciding_ancestors
from numasched.plugins.capacity_hierarchy import build_queue_tree
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import Session
from numasched.scheduler.loop import SessionResult, run_session

GI = 1024**3


def res(cpu: float, mem_gi: float, **scalars: float) -> Resource:
    return Resource(cpu * 1000, mem_gi * GI, {name.replace("_", "/"): v * 1000 for name, v in scalars.items()})


def queue(name: str, parent: str, deserved: Resource | None, capability: Resource | None) -> QueueInfo:
    return QueueInfo(name, deserved=deserved, capability=capability, parent=parent)


@attrs.define
class Pod:
    name: str
    group: str
    request: Resource
    node: str = ""
    preemptable: bool = True


@attrs.define
class Group:
    name: str
    queue: str
    min_member: int
    phase: str
    min_resources: Resource | None = None


def snapshot(
    nodes: dict[str, Resource], queues: list[QueueInfo], groups: list[Group], pods: list[Pod]
) -> ClusterSnapshot:
    node_infos = {name: NodeInfo.create(name, alloc) for name, alloc in nodes.items()}
    jobs = {
        g.name: JobInfo(
            uid=g.name,
            namespace="ns1",
            name=g.name,
            queue=g.queue,
            min_available=g.min_member,
            has_pod_group=True,
            pod_group_phase=g.phase,
            min_resources=g.min_resources,
        )
        for g in groups
    }
    for pod in pods:
        task = TaskInfo(
            uid=pod.name, namespace="ns1", name=pod.name, job_id=pod.group, resreq=pod.request, init_resreq=pod.request
        )
        if not pod.preemptable:
            task.annotations["volcano.sh/preemptable"] = "false"
        if pod.node:
            task.status, task.node_name = TaskStatus.RUNNING, pod.node
            node_infos[pod.node].add_task(task)
        jobs[pod.group].add_task(task)
    return ClusterSnapshot(nodes=node_infos, jobs=jobs, queues={q.name: q for q in queues})


def hierarchy_config(actions: tuple[str, ...] = ("enqueue", "reclaim", "allocate")) -> SchedulerConfig:
    capacity = PluginOption("capacity", flags={"hierarchy": True})
    gang = PluginOption("gang", flags={"preemptable": False})
    return SchedulerConfig(actions=actions, tiers=(Tier((gang, PluginOption("predicates"), capacity)),))


def run(snap: ClusterSnapshot) -> SessionResult:
    return run_session(snap, hierarchy_config(), default_registry())


N1 = {"n1": res(8, 8)}
ROOT_Q = queue("root", "", None, None)
Q1 = queue("q1", "root", None, res(4, 4))
Q2 = queue("q2", "root", None, res(4, 4))
Q11 = queue("q11", "q1", None, res(1, 1))
Q12 = queue("q12", "q1", None, res(3, 3))
Q3 = queue("q3", "root", res(4, 4), res(4, 4))
Q4 = queue("q4", "root", res(2, 2), res(4, 4))
Q31 = queue("q31", "q3", res(2, 2), res(4, 4))
Q32 = queue("q32", "q3", res(2, 2), res(4, 4))
Q33 = queue("q33", "q3", res(0, 0), res(4, 4))


def bound(result: SessionResult) -> dict[str, str]:
    return {request.task.name: request.node_name for request in result.bind_requests}


def test_case0_a_leaf_queue_allocates() -> None:
    snap = snapshot(N1, [ROOT_Q, Q1, Q2, Q11, Q12], [Group("pg1", "q11", 1, "Inqueue")], [Pod("p1", "pg1", res(1, 1))])
    assert bound(run(snap)) == {"p1": "n1"}


def test_case1_a_queue_with_children_does_not() -> None:
    snap = snapshot(N1, [ROOT_Q, Q1, Q2, Q11, Q12], [Group("pg2", "q1", 1, "Pending")], [Pod("p2", "pg2", res(1, 1))])
    assert bound(run(snap)) == {}


def test_case2_within_capability_both_pods_bind() -> None:
    pods = [Pod("p3", "pg3", res(2, 2)), Pod("p4", "pg3", res(2, 2))]
    snap = snapshot(N1, [ROOT_Q, Q3, Q4, Q31, Q32], [Group("pg3", "q31", 2, "Inqueue")], pods)
    assert bound(run(snap)) == {"p3": "n1", "p4": "n1"}


def test_case3_reclaim_from_other_queues_when_allocated_below_deserved() -> None:
    """q32 (deserved 2) holds nothing and wants 2 CPUs on a full node; q31 holds 4 (deserved 2,
    one pod not preemptable) and q4 holds 4 (deserved 2). Volcano reclaims the preemptable pod of
    q31, the sibling: one victim either way, and its victim queue order takes from the queue
    nearest in the tree first (test_victims_of_the_nearest_queue_come_first)."""
    groups = [
        Group("pg4", "q4", 1, "Running"),
        Group("pg5", "q31", 1, "Running"),
        Group("pg6", "q32", 1, "Inqueue"),
    ]
    pods = [
        Pod("p5", "pg4", res(4, 4), node="n1"),
        Pod("p6", "pg5", res(2, 2), node="n1", preemptable=False),
        Pod("p7", "pg5", res(2, 2), node="n1"),
        Pod("p8", "pg6", res(2, 2)),
    ]
    snap = snapshot(N1, [ROOT_Q, Q3, Q31, Q32, Q4], groups, pods)
    result = run(snap)
    assert [e.task.name for e in result.evictions] == ["p7"]
    assert snap.jobs["pg6"].tasks["p8"].status is TaskStatus.PIPELINED


def test_victims_of_the_nearest_queue_come_first() -> None:
    from numasched.scheduler.actions.preempt import victim_order

    # Without a preemptor's queue to weigh, p7 comes before p5 (task order reversed); p5's queue
    # q31 is the reclaimer's sibling, p7's (q4) only a cousin under root, so p5 goes first.
    groups = [Group("pg4", "q31", 1, "Running"), Group("pg5", "q4", 1, "Running"), Group("pg6", "q32", 1, "Inqueue")]
    pods = [Pod("p5", "pg4", res(2, 2), node="n1"), Pod("p7", "pg5", res(2, 2), node="n1"), Pod("p8", "pg6", res(2, 2))]
    for names in (["p5", "p7"], ["p7", "p5"]):
        snap = snapshot(N1, [ROOT_Q, Q3, Q31, Q32, Q4], groups, pods)
        ssn = Session(snap, hierarchy_config(()), default_registry())
        ssn.open()
        tasks = [t for job in snap.jobs.values() for t in job.tasks.values() if t.name in names]
        tasks.sort(key=lambda t: names.index(t.name))
        preemptor = snap.jobs["pg6"].tasks["p8"]
        unweighed = sorted(tasks, key=functools.cmp_to_key(victim_order(ssn)))
        assert [t.name for t in unweighed] == ["p7", "p5"]
        ordered = sorted(tasks, key=functools.cmp_to_key(victim_order(ssn, preemptor)))
        assert [t.name for t in ordered] == ["p5", "p7"]


def test_case4_an_ancestors_real_capability_bounds_a_leaf() -> None:
    """q3 (capability 4 CPUs) already holds 4 through q31 and q32: q33's 3-CPU pod does not fit
    q3, though q33 alone (capability 4) would take it."""
    groups = [Group("pg5", "q31", 1, "Running"), Group("pg7", "q32", 1, "Running"), Group("pg8", "q33", 1, "Inqueue")]
    pods = [
        Pod("p6", "pg5", res(2, 2), node="n1", preemptable=False),
        Pod("p9", "pg7", res(2, 2), node="n1"),
        Pod("p10", "pg8", res(3, 3)),
    ]
    snap = snapshot(N1, [ROOT_Q, Q3, Q31, Q32, Q33], groups, pods)
    assert bound(run(snap)) == {}


def test_case5_unset_cpu_capability_is_inherited() -> None:
    q5 = queue("q5", "root", None, Resource(0, 4 * GI))
    q51 = queue("q51", "q5", None, Resource(0, 2 * GI))
    snap = snapshot(N1, [ROOT_Q, q5, q51], [Group("pg9", "q51", 1, "Running")], [Pod("p11", "pg9", Resource(1000, 0))])
    assert bound(run(snap)) == {"p11": "n1"}
    tree = build_queue_tree(snap.queues, [], res(8, 8))
    # q51 inherits CPU from q5, which inherits it from the unlimited root.
    assert tree.attrs_by_queue["q51"].capability == Resource(float("inf"), 2 * GI)


def test_case6_a_job_waits_when_an_ancestors_capability_is_taken() -> None:
    q6 = queue("q6", "root", None, res(2, 4))
    q61, q62 = queue("q61", "q6", None, None), queue("q62", "q6", None, None)
    groups = [
        Group("pg10", "q61", 1, "Pending", min_resources=res(2, 4)),
        Group("pg11", "q62", 1, "Pending", min_resources=res(2, 4)),
    ]
    snap = snapshot(N1, [ROOT_Q, q6, q61, q62], groups, [])
    run_session(snap, hierarchy_config(("enqueue",)), default_registry())
    assert snap.jobs["pg10"].pod_group_phase == "Inqueue"
    assert snap.jobs["pg11"].pod_group_phase == "Pending"


def test_case7_children_guaranteed_more_than_the_parent_do_not_break_anything() -> None:
    q7 = queue("q7", "root", None, res(6, 4))
    q71 = attrs.evolve(queue("q71", "q7", None, res(6, 4)), guarantee=res(4, 3))
    q72 = attrs.evolve(queue("q72", "q7", None, res(6, 4)), guarantee=res(4, 3))
    tree = build_queue_tree({q.name: q for q in (ROOT_Q, q7, q71, q72)}, [], res(8, 8))
    assert any(p.queue == "q7" and p.message.startswith("spec.guarantee.resource") for p in tree.problems)
    # What q7 leaves beyond its children's guarantees is nothing (6-8 CPUs < 0): each child gets
    # its own guarantee, within its capability.
    assert tree.attrs_by_queue["q71"].real_capability == res(4, 3)


def test_the_tree_figures_by_hand() -> None:
    """root (unlimited) -> a (capability 8 GPUs, guarantee 2) -> a1 (guarantee 1), a2; root -> b.
    Cluster 16 GPUs. a's real capability: min(inf - 2 (guarantees under root) + 2, 8) = 8; a1's:
    8 - 1 (a's children's guarantees) + 1 = 8; a2's 8 - 1 = 7; b's inf. A 1-GPU pod running in a1
    counts in a1, a and root."""
    gpu = "nvidia.com/gpu"
    queues = [
        ROOT_Q,
        attrs.evolve(queue("a", "root", None, Resource(0, 0, {gpu: 8000})), guarantee=Resource(0, 0, {gpu: 2000})),
        attrs.evolve(queue("a1", "a", Resource(0, 0, {gpu: 4000}), None), guarantee=Resource(0, 0, {gpu: 1000})),
        queue("a2", "a", None, None),
        queue("b", "root", None, None),
    ]
    snap = snapshot(
        {"n1": Resource(64000, 512 * GI, {gpu: 16000})},
        queues,
        [Group("j", "a1", 1, "Running")],
        [Pod("p", "j", Resource(1000, GI, {gpu: 1000}), node="n1")],
    )
    tree = build_queue_tree(snap.queues, snap.jobs.values(), Resource(64000, 512 * GI, {gpu: 16000}))
    real = {name: tree.attrs_by_queue[name].real_capability.scalars[gpu] for name in ("a", "a1", "a2", "b")}
    assert real == {"a": 8000, "a1": 8000, "a2": 7000, "b": float("inf")}
    assert [tree.attrs_by_queue[n].allocated.scalars.get(gpu, 0) for n in ("root", "a", "a1", "a2", "b")] == [
        1000,
        1000,
        1000,
        0,
        0,
    ]
    # a1's share: 1 of 4 deserved GPUs. root deserves what its children deserve: a at least its
    # guarantee (2), b nothing.
    assert tree.attrs_by_queue["a1"].share == pytest.approx(0.25)
    assert tree.attrs_by_queue["root"].deserved.scalars[gpu] == 2000


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        (["root"], ["root"], (1, 1)),  # siblings under root: themselves
        (["root", "a"], ["root", "a"], (2, 2)),  # siblings under a: themselves
        (["root", "a"], ["root", "b"], (1, 1)),  # cousins: their parents a and b
        (["root"], ["root", "a"], (1, 1)),  # a leaf under root against one under a: itself and a
    ],
)
def test_deciding_ancestors(first: list[str], second: list[str], expected: tuple[int, int]) -> None:
    assert deciding_ancestors(first, second) == expected


def test_queue_order_compares_cousins_by_their_parents() -> None:
    """a1 holds little of a lot (share 0.1) but its parent a is busier (share 1.0) than b (0.5),
    so b1 (share 0.9 itself) goes before a1; a leaf goes before a queue with children."""
    queues = [
        ROOT_Q,
        queue("a", "root", res(10, 10), None),
        queue("b", "root", res(10, 10), None),
        queue("a1", "a", res(10, 10), None),
        queue("a2", "a", res(1, 1), None),
        queue("b1", "b", res(5, 5), None),
    ]
    groups = [Group("ja1", "a1", 1, "Running"), Group("ja2", "a2", 1, "Running"), Group("jb1", "b1", 1, "Running")]
    pods = [
        Pod("x", "ja1", res(1, 1), node="n1"),
        Pod("y", "ja2", res(9, 9), node="n1"),
        Pod("z", "jb1", res(4.5, 4.5), node="n1"),
    ]
    snap = snapshot({"n1": res(64, 64)}, queues, groups, pods)
    ssn = Session(snap, hierarchy_config(()), default_registry())
    ssn.open()
    plugin = ssn.plugins["capacity"]
    assert isinstance(plugin, CapacityPlugin)
    by_name = snap.queues
    assert plugin.queue_order(by_name["b1"], by_name["a1"]) == -1
    assert plugin.queue_order(by_name["a1"], by_name["a2"]) == -1  # siblings: 0.1 before 9.0
    assert plugin.queue_order(by_name["b1"], by_name["a"]) == -1  # a leaf first


def test_hierarchy_is_off_unless_enabled() -> None:
    """Without enableHierarchy a job in q1 (which has children) is scheduled as in a flat queue."""
    snap = snapshot(N1, [ROOT_Q, Q1, Q2, Q11, Q12], [Group("pg2", "q1", 1, "Inqueue")], [Pod("p2", "pg2", res(1, 1))])
    flat = SchedulerConfig(
        actions=("enqueue", "allocate"),
        tiers=(Tier((PluginOption("gang"), PluginOption("predicates"), PluginOption("capacity"))),),
    )
    assert bound(run_session(snap, flat, default_registry())) == {"p2": "n1"}
    assert CapacityPlugin(Arguments({})).tree is None


@pytest.mark.parametrize(
    ("parents", "named", "field_text"),
    [
        ({"a": "a"}, {"a"}, "names the queue itself"),
        ({"a": "ghost"}, {"a"}, "queue 'ghost' does not exist"),
        ({"a": "b", "b": "c", "c": "a", "d": "a"}, {"a", "b", "c"}, "the parents form a cycle (a -> b -> c -> a)"),
    ],
)
def test_broken_parents_are_named_and_placed_under_root(
    parents: dict[str, str], named: set[str], field_text: str
) -> None:
    queues = {name: QueueInfo(name, parent=parent) for name, parent in parents.items()}
    parent, problems = resolve_parents(queues)
    assert {p.queue for p in problems} == named
    assert all(p.message.startswith("spec.parent: ") and field_text in p.message for p in problems)
    assert all(parent[name] == ROOT for name in named)
    # Every queue now reaches the root.
    for name in parents:
        seen = 0
        current = name
        while current != ROOT:
            current, seen = parent[current], seen + 1
            assert seen <= len(parents)


def test_a_queue_with_a_broken_parent_still_schedules_and_is_told() -> None:
    queues = [ROOT_Q, queue("a", "b", None, None), queue("b", "a", None, None)]
    snap = snapshot(N1, queues, [Group("j", "a", 1, "Inqueue")], [Pod("p", "j", res(1, 1))])
    assert bound(run(snap)) == {"p": "n1"}
    seen: list[tuple[str, str, str]] = []
    cluster = SimCluster(Cache(on_problem=lambda kind, name, message: seen.append((kind, name, message))))
    for name, parent in (("a", "b"), ("b", "a")):
        cluster.add(
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "Queue",
                "metadata": {"name": name},
                "spec": {"parent": parent},
            }
        )
    told = {(kind, name) for kind, name, message in seen if "cycle" in message}
    assert told == {("Queue", "a"), ("Queue", "b")}
    assert "spec.parent" in cluster.cache.warnings[("Queue", "a")]
    # The same queue again (a re-list): still in the warnings, not said again.
    said = len(seen)
    cluster.add(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "Queue",
            "metadata": {"name": "a"},
            "spec": {"parent": "b"},
        }
    )
    assert len(seen) == said and "cycle" in cluster.cache.warnings[("Queue", "a")]
    # Fixed: the warning goes.
    cluster.add({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "b"}, "spec": {}})
    assert ("Queue", "a") not in cluster.cache.warnings and ("Queue", "b") not in cluster.cache.warnings
