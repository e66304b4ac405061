"""task-topology: Volcano's annotation cases, buckets, task order, node scores, and placements."""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import pytest
import structlog

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo
from numasched.cli import main
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.plugins.task_topology import (
    AFFINITY_ANNOTATION,
    ANTI_AFFINITY_ANNOTATION,
    TASK_ORDER_ANNOTATION,
    TaskTopology,
    TaskTopologyPlugin,
    TopologyError,
    job_topology_annotations,
    read_topology,
)
from numasched.scheduler.actions.allocate import AllocateAction
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.registry import Registry
from numasched.scheduler.framework.session import Session
from numasched.scheduler.framework.statement import Statement


def role_job(roles: list[str], name: str = "job1", namespace: str = "default") -> JobInfo:
    """A job with one pending 1-CPU task per entry of `roles`, named <job>-<role>-<n>."""
    job = JobInfo(
        uid=f"{namespace}/{name}",
        namespace=namespace,
        name=name,
        has_pod_group=True,
        pod_group_phase="Inqueue",
    )
    counts: dict[str, int] = {}
    for role in roles:
        index = counts[role] = counts.get(role, -1) + 1
        request = Resource(milli_cpu=1000, memory=1e9)
        task_name = f"{name}-{role}-{index}"
        job.add_task(
            TaskInfo(
                uid=f"{job.uid}/{task_name}",
                namespace=namespace,
                name=task_name,
                job_id=job.uid,
                resreq=request,
                init_resreq=request.clone(),
                annotations={"volcano.sh/task-spec": role},
                creation_timestamp=float(len(job.tasks)),
            )
        )
    return job


def annotate(job: JobInfo, annotations: dict[str, str]) -> JobInfo:
    for task in job.tasks.values():
        task.annotations.update(annotations)
    return job


TF_ROLES = ["ps", "ps", "worker", "worker", "chief", "evaluator"]


# --- Volcano's Test_readTopologyFromPgAnnotations, case by case ---------------------------------


def test_correct_annotation() -> None:
    job = role_job(TF_ROLES)
    annotations = {
        AFFINITY_ANNOTATION: "ps,worker;ps,chief",
        ANTI_AFFINITY_ANNOTATION: "ps;worker,chief",
        TASK_ORDER_ANNOTATION: "ps,worker,chief,evaluator",
    }
    assert read_topology(job, annotations) == TaskTopology(
        [["ps", "worker"], ["ps", "chief"]], [["ps"], ["worker", "chief"]], ["ps", "worker", "chief", "evaluator"]
    )


def test_role_names_with_dashes() -> None:
    job = role_job(["ps-some", "ps-some", "worker-another-some", "worker-another-some", "chief-kk", "evaluator-tt"])
    annotations = {
        AFFINITY_ANNOTATION: "ps-some,worker-another-some;ps-some,chief-kk",
        ANTI_AFFINITY_ANNOTATION: "ps-some;worker-another-some,chief-kk",
        TASK_ORDER_ANNOTATION: "ps-some,worker-another-some,chief-kk,evaluator-tt",
    }
    assert read_topology(job, annotations) == TaskTopology(
        [["ps-some", "worker-another-some"], ["ps-some", "chief-kk"]],
        [["ps-some"], ["worker-another-some", "chief-kk"]],
        ["ps-some", "worker-another-some", "chief-kk", "evaluator-tt"],
    )


def test_no_annotation_is_no_topology() -> None:
    assert read_topology(role_job(TF_ROLES), {}) is None


@pytest.mark.parametrize(
    ("roles", "annotations", "message"),
    [
        (
            TF_ROLES,
            {
                AFFINITY_ANNOTATION: "$%GF$^trtqwrg^",
                ANTI_AFFINITY_ANNOTATION: "ps;worker,chief;#@FGEW^vfa897bgs;;",
                TASK_ORDER_ANNOTATION: "ps,worker,chief,evaluator,,,",
            },
            f"annotation {AFFINITY_ANNOTATION}: task $%GF$^trtqwrg^ do not exist in job <default/job1>",
        ),
        (
            ["ps", "ps", "worker", "worker"],
            {
                AFFINITY_ANNOTATION: "ps,worker",
                ANTI_AFFINITY_ANNOTATION: "ps",
                TASK_ORDER_ANNOTATION: "ps,worker,chief",
            },
            f"annotation {TASK_ORDER_ANNOTATION}: task chief do not exist in job <default/job1>",
        ),
        (
            ["ps", "ps", "worker", "worker"],
            {AFFINITY_ANNOTATION: "ps,worker", ANTI_AFFINITY_ANNOTATION: "ps,ps", TASK_ORDER_ANNOTATION: "ps,worker"},
            f"annotation {ANTI_AFFINITY_ANNOTATION}: task ps is duplicate in job <default/job1>",
        ),
    ],
    ids=["invalid annotation", "invalid task name", "duplicate task name"],
)
def test_bad_annotations_name_the_annotation_and_role(
    roles: list[str], annotations: dict[str, str], message: str
) -> None:
    with pytest.raises(TopologyError) as raised:
        read_topology(role_job(roles), annotations)
    assert str(raised.value) == message


def test_redundant_punctuation_is_kept_as_empty_names() -> None:
    annotations = {
        AFFINITY_ANNOTATION: "ps,worker;ps,,chief,;",
        ANTI_AFFINITY_ANNOTATION: "ps;worker,chief;;;",
        TASK_ORDER_ANNOTATION: "ps,worker,chief,evaluator,,,",
    }
    assert read_topology(role_job(TF_ROLES), annotations) == TaskTopology(
        [["ps", "worker"], ["ps", "", "chief", ""], [""]],
        [["ps"], ["worker", "chief"], [""], [""], [""]],
        ["ps", "worker", "chief", "evaluator", "", "", ""],
    )


# --- sessions ------------------------------------------------------------------------------------


def cpu_node(name: str, cpus: int = 8) -> NodeInfo:
    return NodeInfo.create(name, Resource(milli_cpu=cpus * 1000.0, memory=64e9, scalars={"pods": 110.0}))


def session_config(*scoring: PluginOption) -> SchedulerConfig:
    return SchedulerConfig(
        actions=("allocate",),
        tiers=(Tier((PluginOption("priority"), PluginOption("gang"))), Tier((PluginOption("predicates"), *scoring))),
    )


def open_session(
    nodes: list[NodeInfo], jobs: list[JobInfo], config: SchedulerConfig, registry: Registry | None = None
) -> Session:
    snapshot = ClusterSnapshot(nodes={node.name: node for node in nodes}, jobs={job.uid: job for job in jobs})
    ssn = Session(snapshot, config, registry or default_registry())
    ssn.open()
    return ssn


def placements(ssn: Session) -> dict[str, str]:
    AllocateAction().execute(ssn)
    return {task.name: task.node_name for job in ssn.jobs.values() for task in job.tasks.values()}


TOPOLOGY = PluginOption("task-topology", {"task-topology.weight": 2})


def test_affinity_puts_the_tasks_together_where_least_requested_would_spread_them() -> None:
    def placed(*scoring: PluginOption) -> dict[str, str]:
        job = annotate(role_job(["ps", "worker", "worker", "worker"]), {AFFINITY_ANNOTATION: "ps,worker"})
        return placements(open_session([cpu_node("n0"), cpu_node("n1")], [job], session_config(*scoring)))

    spread = placed(PluginOption("nodeorder"))
    assert len(set(spread.values())) == 2 and "" not in spread.values()
    together = placed(PluginOption("nodeorder"), TOPOLOGY)
    assert len(set(together.values())) == 1 and "" not in together.values()


def test_self_anti_affinity_spreads_the_tasks_where_binpack_would_pack_them() -> None:
    def placed(*scoring: PluginOption) -> dict[str, str]:
        job = annotate(role_job(["worker"] * 3), {ANTI_AFFINITY_ANNOTATION: "worker"})
        nodes = [cpu_node("n0"), cpu_node("n1"), cpu_node("n2")]
        return placements(open_session(nodes, [job], session_config(*scoring)))

    packed = placed(PluginOption("binpack"))
    assert len(set(packed.values())) == 1
    spread = placed(PluginOption("binpack"), PluginOption("task-topology"))
    assert sorted(spread.values()) == ["n0", "n1", "n2"]


def test_inter_anti_affinity_keeps_two_roles_apart() -> None:
    job = annotate(role_job(["ps", "worker"]), {ANTI_AFFINITY_ANNOTATION: "ps,worker"})
    result = placements(
        open_session([cpu_node("n0"), cpu_node("n1")], [job], session_config(PluginOption("binpack"), TOPOLOGY))
    )
    assert result["job1-ps-0"] != result["job1-worker-0"]


@pytest.mark.parametrize(("order", "first_role"), [("worker,ps", "worker"), ("ps,worker", "ps")])
def test_task_order_follows_the_annotation_and_tasks_without_topology_come_last(order: str, first_role: str) -> None:
    roles = ["evaluator", "ps", "worker", "ps", "worker"]
    job = annotate(role_job(roles), {AFFINITY_ANNOTATION: "ps,worker", TASK_ORDER_ANNOTATION: order + ",evaluator"})
    ssn = open_session([cpu_node("n0")], [job], session_config(TOPOLOGY))
    ordered = [task.annotations["volcano.sh/task-spec"] for task in ssn.sorted_tasks(job.tasks.values())]
    second_role = "ps" if first_role == "worker" else "worker"
    # evaluator has no affinity or anti-affinity, so it is in no bucket: after the bucket's tasks.
    assert ordered == [first_role, first_role, second_role, second_role, "evaluator"]


def test_tasks_in_a_bucket_go_before_another_jobs_tasks_in_none() -> None:
    with_topology = annotate(role_job(["ps", "worker"], name="a"), {AFFINITY_ANNOTATION: "ps,worker"})
    without_bucket = annotate(role_job(["ps", "chief"], name="b"), {AFFINITY_ANNOTATION: "ps"})
    ssn = open_session([cpu_node("n0")], [with_topology, without_bucket], session_config(TOPOLOGY))
    chief = next(task for task in without_bucket.tasks.values() if task.name == "b-chief-0")
    worker = next(task for task in with_topology.tasks.values() if task.name == "a-worker-0")
    b_ps = next(task for task in without_bucket.tasks.values() if task.name == "b-ps-0")
    assert ssn.task_order(worker, chief) < 0 and ssn.task_order(chief, worker) > 0
    # Both in buckets, different jobs: the job order's business, not this plugin's.
    plugin = ssn.plugins["task-topology"]
    assert isinstance(plugin, TaskTopologyPlugin)
    assert plugin.task_order(worker, b_ps) == 0


def test_node_scores_count_the_bucket_by_hand() -> None:
    """Bucket {ps, worker x3}, largest bucket 4, weight 2: a node scores 2 * 100 / 4 = 50 points
    per task of the bucket already there or still to place, less one task per task that would not
    fit, and 0 where the task itself does not fit."""
    job = annotate(role_job(["ps", "worker", "worker", "worker"]), {AFFINITY_ANNOTATION: "ps,worker"})
    nodes = [cpu_node("n0"), cpu_node("n1"), cpu_node("small", cpus=2), cpu_node("tiny", cpus=0)]
    ssn = open_session(nodes, [job], session_config(TOPOLOGY))
    plugin = ssn.plugins["task-topology"]
    assert isinstance(plugin, TaskTopologyPlugin)
    tasks = {task.name: task for task in job.tasks.values()}
    ps, worker = tasks["job1-ps-0"], tasks["job1-worker-0"]
    # Nothing placed: 4 tasks to place, all fit on n0 (8 CPUs) -> 4 * 50.
    assert plugin.node_order(ps, ssn.nodes["n0"]) == 200
    # small has 2 CPUs for a bucket of 4: the bucket less two others fits -> (4 - 2) * 50.
    assert plugin.node_order(ps, ssn.nodes["small"]) == 100
    assert plugin.node_order(ps, ssn.nodes["tiny"]) == 0
    statement = Statement(ssn)
    assert statement.allocate(ps, ssn.nodes["n0"])
    # ps on n0: 1 there + 3 to place on n0, 0 there + 3 to place on n1.
    assert plugin.node_order(worker, ssn.nodes["n0"]) == 200
    assert plugin.node_order(worker, ssn.nodes["n1"]) == 150
    # A discarded placement is forgotten (numasched's deallocate event; Volcano has none).
    statement.discard()
    assert plugin.node_order(worker, ssn.nodes["n0"]) == 200
    assert plugin.node_order(worker, ssn.nodes["n1"]) == 200


def test_an_avoided_task_placed_this_session_lowers_the_node_score() -> None:
    job = annotate(role_job(["worker", "worker"]), {ANTI_AFFINITY_ANNOTATION: "worker"})
    ssn = open_session([cpu_node("n0"), cpu_node("n1")], [job], session_config(PluginOption("task-topology")))
    plugin = ssn.plugins["task-topology"]
    assert isinstance(plugin, TaskTopologyPlugin)
    first, second = sorted(job.tasks.values(), key=lambda task: task.name)
    # Two buckets of one: 1 * 100 / 1 everywhere before anything is placed.
    assert plugin.node_order(second, ssn.nodes["n0"]) == 100
    assert Statement(ssn).allocate(first, ssn.nodes["n0"])
    # n0 holds a worker it avoids: 1 to place - 1 avoided = 0.
    assert plugin.node_order(second, ssn.nodes["n0"]) == 0
    assert plugin.node_order(second, ssn.nodes["n1"]) == 100


def test_a_bad_annotation_is_logged_once_and_the_plugin_abstains_for_that_job() -> None:
    registry = default_registry()

    def placed(*scoring: PluginOption) -> dict[str, str]:
        job = annotate(role_job(["ps", "worker", "worker", "worker"]), {AFFINITY_ANNOTATION: "ps,chief"})
        return placements(open_session([cpu_node("n0"), cpu_node("n1")], [job], session_config(*scoring), registry))

    with structlog.testing.capture_logs() as logs:
        with_plugin = [placed(PluginOption("nodeorder"), TOPOLOGY) for _ in range(2)]
    reports = [entry for entry in logs if "bad topology annotation" in entry["event"]]
    assert len(reports) == 1
    assert reports[0]["podgroup"] == "default/job1"
    assert AFFINITY_ANNOTATION in reports[0]["error"] and "chief" in reports[0]["error"]
    assert with_plugin[0] == with_plugin[1] == placed(PluginOption("nodeorder"))


def test_pods_that_disagree_on_an_annotation_are_a_bad_annotation() -> None:
    job = role_job(["ps", "worker"])
    first, second = sorted(job.tasks.values(), key=lambda task: task.uid)
    first.annotations[AFFINITY_ANNOTATION] = "ps,worker"
    second.annotations[AFFINITY_ANNOTATION] = "ps"
    plugin = TaskTopologyPlugin(Arguments({}))
    with structlog.testing.capture_logs() as logs:
        plugin.build_managers({job.uid: job})
    assert plugin.managers == {}
    assert any("disagree" in entry.get("error", "") for entry in logs)


CLUSTER = """\
apiVersion: v1
kind: Node
metadata: {name: n0}
status:
  allocatable: {cpu: "8", memory: 32Gi, pods: "110"}
---
apiVersion: v1
kind: Node
metadata: {name: n1}
status:
  allocatable: {cpu: "8", memory: 32Gi, pods: "110"}
"""

CONFIG = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
  - name: nodeorder
  - name: task-topology
    arguments:
      task-topology.weight: 2
"""


def workload(roles: list[str]) -> str:
    documents = [
        """\
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata: {name: train, namespace: team}
spec: {minMember: 4}
"""
    ]
    for index, role in enumerate(roles):
        documents.append(
            f"""\
apiVersion: v1
kind: Pod
metadata:
  name: train-{role}-{index}
  namespace: team
  annotations:
    scheduling.k8s.io/group-name: train
    volcano.sh/task-spec: {role}
    volcano.sh/task-topology-affinity: "ps,worker"
spec:
  schedulerName: numasched
  containers:
  - name: main
    resources: {{requests: {{cpu: "1", memory: 1Gi}}}}
"""
        )
    return "---\n".join(documents)


def test_a_configuration_naming_task_topology_simulates_and_keeps_the_job_together(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    (tmp_path / "workload.yaml").write_text(workload(["ps", "worker", "worker", "worker"]))
    (tmp_path / "scheduler.conf").write_text(CONFIG)
    code = main(
        [
            "simulate",
            "--config",
            str(tmp_path / "scheduler.conf"),
            "--cluster",
            str(tmp_path / "cluster.yaml"),
            "--workload",
            str(tmp_path / "workload.yaml"),
            "--output",
            "json",
            "--no-progress",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    report = json.loads(captured.out)
    assert [pod["status"] for pod in report["pods"]] == ["Bound"] * 4
    assert len({pod["node"] for pod in report["pods"]}) == 1


def test_the_podgroup_annotations_are_read_before_the_pods() -> None:
    from numasched.cache.convert_pod import podgroup_to_job

    group = podgroup_to_job(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {
                "name": "train",
                "namespace": "ml",
                "annotations": {"volcano.sh/task-topology-affinity": "ps,worker"},
            },
            "spec": {"minMember": 2},
        }
    )
    assert job_topology_annotations(group) == {"volcano.sh/task-topology-affinity": "ps,worker"}
    # Without them on the PodGroup, the pods' annotations count (none here).
    bare = attrs.evolve(group, annotations={})
    assert job_topology_annotations(bare) == {}
