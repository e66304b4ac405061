"""predicates: each kube-scheduler filter on its own, then the plugin through a real Session."""

from __future__ import annotations

from typing import Any

import pytest

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo, Taint
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import NodeSelectorRequirement, NodeSelectorTerm, TaskInfo, TaskStatus, Toleration
from numasched.conf.loader import load_config_text
from numasched.plugins import predicates
from numasched.plugins.predicates import (
    AFFINITY_MISMATCH,
    NOT_READY,
    TOO_MANY_PODS,
    UNSCHEDULABLE,
    check_node,
    insufficient_resources,
    matches_node_selector,
    required_affinity_matches,
    requirement_matches,
    term_matches,
    tolerates,
    tolerates_unschedulable,
    too_many_pods,
    untolerated_taint,
    untolerated_taint_message,
)
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.session import Session
from numasched.scheduler.framework.status import StatusCode
from numasched.scheduler.loop import run_session


def make_task(uid: str = "t1", requests: dict[str, Any] | None = None, **fields: Any) -> TaskInfo:
    resources = Resource.from_list(requests or {})
    return TaskInfo(
        uid=uid,
        namespace="default",
        name=uid,
        job_id=f"job-{uid}",
        resreq=resources,
        init_resreq=resources.clone(),
        **fields,
    )


def make_node(name: str = "n1", allocatable: dict[str, Any] | None = None, **fields: Any) -> NodeInfo:
    node = NodeInfo.create(name, Resource.from_list(allocatable or {"cpu": "8", "memory": "16Gi", "pods": 110}))
    for key, value in fields.items():
        setattr(node, key, value)
    return node


def requirement(key: str, operator: str, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key, operator, tuple(values))


# -- resources -----------------------------------------------------------------------------------


def test_resources_fit() -> None:
    available = Resource.from_list({"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": 2})
    assert insufficient_resources(Resource.from_list({"cpu": "4", "nvidia.com/gpu": 2}), available) == []


def test_resources_missing_named_kube_scheduler_style() -> None:
    available = Resource.from_list({"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": 1})
    request = Resource.from_list({"cpu": "5", "memory": "1Gi", "nvidia.com/gpu": 2, "example.com/nic": 1})
    assert insufficient_resources(request, available) == [
        "Insufficient cpu",
        "Insufficient nvidia.com/gpu",
        "Insufficient example.com/nic",
    ]


def test_pod_count() -> None:
    node = make_node(max_pods=1)
    assert not too_many_pods(node)
    node.add_task(make_task("other", status=TaskStatus.RUNNING))
    assert too_many_pods(node)


# -- node selector and affinity ------------------------------------------------------------------


def test_node_selector() -> None:
    labels = {"zone": "a", "gpu": "h100"}
    assert matches_node_selector({}, labels)
    assert matches_node_selector({"zone": "a"}, labels)
    assert not matches_node_selector({"zone": "b"}, labels)
    assert not matches_node_selector({"rack": "1"}, labels)


@pytest.mark.parametrize(
    ("req", "expected"),
    [
        (requirement("zone", "In", "a", "b"), True),
        (requirement("zone", "In", "c"), False),
        (requirement("rack", "In", "a"), False),
        (requirement("zone", "NotIn", "c"), True),
        (requirement("zone", "NotIn", "a"), False),
        (requirement("rack", "NotIn", "a"), True),
        (requirement("zone", "Exists"), True),
        (requirement("rack", "Exists"), False),
        (requirement("rack", "DoesNotExist"), True),
        (requirement("zone", "DoesNotExist"), False),
        (requirement("cores", "Gt", "31"), True),
        (requirement("cores", "Gt", "32"), False),
        (requirement("cores", "Lt", "33"), True),
        (requirement("cores", "Lt", "32"), False),
        (requirement("zone", "Gt", "1"), False),
        (requirement("cores", "Gt", "x"), False),
        (requirement("cores", "Gt", "1", "2"), False),
        (requirement("cores", "Gt", "1_0"), False),
        (requirement("rack", "Lt", "5"), False),
        (requirement("zone", "Like", "a"), False),
    ],
)
def test_requirement_operators(req: NodeSelectorRequirement, expected: bool) -> None:
    assert requirement_matches(req, {"zone": "a", "cores": "32"}) is expected


def test_term_ands_expressions_and_fields() -> None:
    labels = {"zone": "a", "gpu": "h100"}
    both = NodeSelectorTerm(match_expressions=(requirement("zone", "In", "a"), requirement("gpu", "Exists")))
    assert term_matches(both, labels, "n1")
    one_fails = NodeSelectorTerm(match_expressions=(requirement("zone", "In", "a"), requirement("gpu", "In", "a100")))
    assert not term_matches(one_fails, labels, "n1")
    by_name = NodeSelectorTerm(match_fields=(requirement("metadata.name", "In", "n1"),))
    assert term_matches(by_name, labels, "n1")
    assert not term_matches(by_name, labels, "n2")
    mixed = NodeSelectorTerm(
        match_expressions=(requirement("zone", "In", "a"),), match_fields=(requirement("metadata.name", "NotIn", "n1"),)
    )
    assert not term_matches(mixed, labels, "n1")
    assert term_matches(mixed, labels, "n2")


def test_empty_term_matches_nothing() -> None:
    assert not term_matches(NodeSelectorTerm(), {"zone": "a"}, "n1")


def test_terms_are_ored() -> None:
    labels = {"zone": "a"}
    miss = NodeSelectorTerm(match_expressions=(requirement("zone", "In", "b"),))
    hit = NodeSelectorTerm(match_expressions=(requirement("zone", "In", "a"),))
    assert required_affinity_matches((), labels, "n1")
    assert required_affinity_matches((miss, hit), labels, "n1")
    assert not required_affinity_matches((miss,), labels, "n1")


# -- taints and tolerations ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        (Toleration(key="gpu", operator="Equal", value="true", effect="NoSchedule"), True),
        (Toleration(key="gpu", operator="Equal", value="false", effect="NoSchedule"), False),
        (Toleration(key="gpu", operator="", value="true"), True),
        (Toleration(key="gpu", operator="Exists"), True),
        (Toleration(key="gpu", operator="Exists", effect="NoExecute"), False),
        (Toleration(key="other", operator="Exists"), False),
        (Toleration(key="", operator="Exists"), True),
        (Toleration(key="", operator="Exists", effect="NoExecute"), False),
        (Toleration(key="gpu", operator="Bogus", value="true"), False),
    ],
)
def test_toleration_matching(toleration: Toleration, expected: bool) -> None:
    assert tolerates(toleration, Taint(key="gpu", value="true", effect="NoSchedule")) is expected


def test_untolerated_taints_by_effect() -> None:
    no_schedule = Taint("gpu", "true", "NoSchedule")
    no_execute = Taint("maintenance", "", "NoExecute")
    prefer = Taint("spot", "yes", "PreferNoSchedule")
    assert untolerated_taint((prefer,), ()) is None
    assert untolerated_taint((prefer, no_schedule), ()) == no_schedule
    assert untolerated_taint((no_execute,), ()) == no_execute
    tolerations = (Toleration(key="gpu", operator="Exists"),)
    assert untolerated_taint((no_schedule, no_execute), tolerations) == no_execute
    assert untolerated_taint((no_schedule, no_execute), (Toleration(operator="Exists"),)) is None
    assert untolerated_taint_message(no_schedule) == "node(s) had untolerated taint {gpu: true}"


def test_unschedulable_toleration() -> None:
    assert not tolerates_unschedulable(())
    assert not tolerates_unschedulable((Toleration(key="gpu", operator="Exists"),))
    assert tolerates_unschedulable((Toleration(key="node.kubernetes.io/unschedulable", operator="Exists"),))
    assert tolerates_unschedulable((Toleration(operator="Exists"),))


# -- check_node ----------------------------------------------------------------------------------


def test_check_node_passes() -> None:
    task = make_task(requests={"cpu": "2", "memory": "1Gi"}, node_selector={"zone": "a"})
    assert check_node(task, make_node(labels={"zone": "a"})).passed


@pytest.mark.parametrize(
    ("node_fields", "task_fields", "reason", "code"),
    [
        ({"ready": False}, {}, NOT_READY, StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE),
        ({"unschedulable": True}, {}, UNSCHEDULABLE, StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE),
        (
            {"taints": (Taint("dedicated", "ml", "NoSchedule"),)},
            {},
            "node(s) had untolerated taint {dedicated: ml}",
            StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE,
        ),
        (
            {"labels": {"zone": "b"}},
            {"node_selector": {"zone": "a"}},
            AFFINITY_MISMATCH,
            StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE,
        ),
        (
            {"labels": {"zone": "b"}},
            {"required_node_terms": (NodeSelectorTerm(match_expressions=(requirement("zone", "In", "a"),)),)},
            AFFINITY_MISMATCH,
            StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE,
        ),
        ({"max_pods": 0}, {}, TOO_MANY_PODS, StatusCode.UNSCHEDULABLE),
        (
            {},
            {"requests": {"cpu": "9", "memory": "32Gi"}},
            "Insufficient cpu, Insufficient memory",
            StatusCode.UNSCHEDULABLE,
        ),
        ({}, {"requests": {"nvidia.com/gpu": 1}}, "Insufficient nvidia.com/gpu", StatusCode.UNSCHEDULABLE),
    ],
)
def test_check_node_failures(
    node_fields: dict[str, Any], task_fields: dict[str, Any], reason: str, code: StatusCode
) -> None:
    requests = task_fields.pop("requests", {"cpu": "1"})
    status = check_node(make_task(requests=requests, **task_fields), make_node(**node_fields))
    assert (status.code, status.reason, status.plugin) == (code, reason, "predicates")


def test_cordoned_node_accepts_a_tolerating_task() -> None:
    task = make_task(tolerations=(Toleration(key="node.kubernetes.io/unschedulable", operator="Exists"),))
    assert check_node(task, make_node(unschedulable=True)).passed


def test_resources_count_what_is_being_released() -> None:
    node = make_node(allocatable={"cpu": "4", "memory": "4Gi"})
    leaving = make_task("leaving", requests={"cpu": "3"}, status=TaskStatus.RELEASING)
    node.add_task(leaving)
    assert check_node(make_task(requests={"cpu": "3"}), node).passed
    arriving = make_task("arriving", requests={"cpu": "2"}, status=TaskStatus.PIPELINED)
    node.add_task(arriving)
    assert check_node(make_task(requests={"cpu": "3"}), node).reason == "Insufficient cpu"


# -- through the framework -----------------------------------------------------------------------

CONFIG = """\
actions: "allocate, backfill"
tiers:
- plugins:
  - name: predicates
"""


def test_plugin_registers_its_predicate_on_a_session() -> None:
    nodes = {"good": make_node("good", labels={"zone": "a"}), "bad": make_node("bad", labels={"zone": "b"})}
    ssn = Session(ClusterSnapshot(nodes=nodes), load_config_text(CONFIG), default_registry())
    ssn.open()
    task = make_task(node_selector={"zone": "a"})
    assert ssn.predicate(task, nodes["good"]).passed
    failed = ssn.predicate(task, nodes["bad"])
    assert (failed.reason, failed.plugin) == (AFFINITY_MISMATCH, "predicates")
    ssn.close()


def test_disabled_predicate_flag_skips_the_plugin() -> None:
    config = load_config_text(CONFIG + "    enablePredicate: false\n")
    node = make_node(labels={"zone": "b"})
    ssn = Session(ClusterSnapshot(nodes={node.name: node}), config, default_registry())
    ssn.open()
    assert ssn.predicate(make_task(node_selector={"zone": "a"}), node).passed


def test_run_session_places_only_where_predicates_allow() -> None:
    nodes = {
        "tainted": make_node("tainted", taints=(Taint("dedicated", "ml", "NoSchedule"),)),
        "cordoned": make_node("cordoned", unschedulable=True),
        "fits": make_node("fits", labels={"zone": "a"}),
        "wrong-zone": make_node("wrong-zone", labels={"zone": "b"}),
    }
    task = make_task("pod", requests={"cpu": "1"}, node_selector={"zone": "a"})
    job = JobInfo(uid=task.job_id, namespace="default", name="pod", tasks={task.uid: task})
    stranded = make_task("stranded", requests={"cpu": "1"}, node_selector={"zone": "nowhere"})
    stranded_job = JobInfo(uid=stranded.job_id, namespace="default", name="stranded", tasks={stranded.uid: stranded})
    snapshot = ClusterSnapshot(nodes=nodes, jobs={job.uid: job, stranded_job.uid: stranded_job})
    result = run_session(snapshot, load_config_text(CONFIG), default_registry())
    assert [(request.task.name, request.node_name) for request in result.bind_requests] == [("pod", "fits")]
    [unplaced] = result.unschedulable
    assert unplaced.task.name == "stranded"
    assert "0/4 nodes are available" in unplaced.message
    assert AFFINITY_MISMATCH in unplaced.message
    assert "untolerated taint {dedicated: ml}" in unplaced.message
    assert predicates.UNSCHEDULABLE in unplaced.message
