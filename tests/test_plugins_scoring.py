"""nodeorder and binpack: kube-scheduler's and Volcano's scores, then both through a real session."""

from __future__ import annotations

from typing import Any

import pytest

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo, Taint
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import ContainerInfo, TaskInfo, TaskStatus, Toleration
from numasched.conf.loader import load_config_text
from numasched.plugins.binpack import BinpackWeights, binpack_score, resource_binpack_score
from numasched.plugins.binpack import build as build_binpack
from numasched.plugins.nodeorder import (
    DEFAULT_MEMORY_REQUEST,
    NodeOrderWeights,
    balanced_resource_score,
    intolerable_prefer_no_schedule,
    least_requested_score,
    most_requested_score,
    node_non_zero_requested,
    node_score,
    non_zero_request,
    reverse_normalized,
    taint_toleration_scores,
    weighted_resource_score,
)
from numasched.plugins.nodeorder import build as build_nodeorder
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.arguments import Arguments, PluginArgumentError
from numasched.scheduler.framework.session import Session
from numasched.scheduler.loop import run_session

GI = 1024**3
MI = 1024**2


def resources(**amounts: Any) -> Resource:
    """cpu=, memory= and gpu= (nvidia.com/gpu) as a ResourceList."""
    return Resource.from_list({"nvidia.com/gpu" if key == "gpu" else key: value for key, value in amounts.items()})


def make_task(uid: str = "t1", containers: tuple[ContainerInfo, ...] = (), **requests: Any) -> TaskInfo:
    request = resources(**requests)
    return TaskInfo(
        uid=uid,
        namespace="default",
        name=uid,
        job_id=f"job-{uid}",
        resreq=request,
        init_resreq=request.clone(),
        containers=containers,
    )


def make_node(name: str, **allocatable: Any) -> NodeInfo:
    return NodeInfo.create(name, resources(**allocatable))


def container(
    name: str, cpu: str = "0", memory: str = "0", *, init: bool = False, sidecar: bool = False
) -> ContainerInfo:
    request = Resource.from_list({"cpu": cpu, "memory": memory})
    return ContainerInfo(name=name, requests=request, limits=request.clone(), init=init, sidecar=sidecar)


# -- kube-scheduler's per-resource scores --------------------------------------------------------


@pytest.mark.parametrize(
    ("requested", "capacity", "least", "most"),
    [
        (0, 4000, 100, 0),
        (1000, 4000, 75, 25),
        (3000, 4000, 25, 75),
        (4000, 4000, 0, 100),
        (5000, 4000, 0, 100),
        (1, 3, 66, 33),
        (10, 0, 0, 0),
    ],
)
def test_least_and_most_requested(requested: int, capacity: int, least: int, most: int) -> None:
    assert least_requested_score(requested, capacity) == least
    assert most_requested_score(requested, capacity) == most


def test_kube_scheduler_table_differently_sized_nodes() -> None:
    # kube-scheduler's own case: a 3000m / 5000 pod on 4000/10000 and 6000/10000 nodes.
    pod = (3000, 5000)
    weights = (1, 1)
    assert weighted_resource_score(pod, (4000, 10000), weights, least_requested_score) == 37
    assert weighted_resource_score(pod, (6000, 10000), weights, least_requested_score) == 50
    assert weighted_resource_score(pod, (4000, 10000), weights, most_requested_score) == 62
    assert weighted_resource_score(pod, (6000, 10000), weights, most_requested_score) == 50
    assert balanced_resource_score((3000.0, 5000.0), (4000.0, 10000.0)) == 87
    assert balanced_resource_score((3000.0, 5000.0), (6000.0, 10000.0)) == 100


def test_weighted_score_skips_resources_the_node_lacks() -> None:
    assert weighted_resource_score((1000, 5), (4000, 0), (1, 1), least_requested_score) == 75
    assert weighted_resource_score((1, 1), (0, 0), (1, 1), least_requested_score) == 0


def test_balanced_score_cases() -> None:
    assert balanced_resource_score((1.0,), (2.0,)) == 100
    assert balanced_resource_score((8.0, 1.0), (4.0, 4.0)) == 62  # fraction capped at 1: |1 - 0.25| / 2
    assert balanced_resource_score((2.0, 4.0, 6.0), (10.0, 10.0, 10.0)) == 83  # std of 0.2, 0.4, 0.6
    assert balanced_resource_score((1.0, 1.0), (0.0, 0.0)) == 100


# -- non-zero requests ---------------------------------------------------------------------------


def test_non_zero_defaults_for_missing_requests() -> None:
    assert non_zero_request(make_task()) == (100, DEFAULT_MEMORY_REQUEST)
    assert non_zero_request(make_task(cpu="2")) == (2000, DEFAULT_MEMORY_REQUEST)


def test_non_zero_per_container_with_init() -> None:
    task = make_task(
        containers=(
            container("empty"),
            container("app", "500m", "1Gi"),
            container("setup", "2", init=True),
        )
    )
    assert non_zero_request(task) == (2000, GI + 200 * MI)


def test_non_zero_with_sidecar() -> None:
    task = make_task(
        containers=(
            container("proxy", "300m", "100Mi", init=True, sidecar=True),
            container("migrate", "1", "1Gi", init=True),
            container("app", "200m", "50Mi"),
        )
    )
    # migrate runs beside proxy (1300m, 1Gi+100Mi); then app and proxy run together (500m, 150Mi).
    assert non_zero_request(task) == (1300, GI + 100 * MI)


def test_node_non_zero_requested_sums_tasks() -> None:
    node = make_node("n", cpu="8", memory="16Gi")
    node.add_task(make_task("a", cpu="1", memory="1Gi"))
    node.add_task(make_task("b"))
    assert node_non_zero_requested(node) == (1100, GI + DEFAULT_MEMORY_REQUEST)


# -- nodeorder -----------------------------------------------------------------------------------


def test_node_score_default_weights() -> None:
    node = make_node("n", cpu="4", memory="8Gi")
    task = make_task(cpu="1", memory="2Gi")
    # least requested 75 (both 25% used) + balanced 100.
    assert node_score(task, node, NodeOrderWeights()) == 175


def test_node_score_weights() -> None:
    node = make_node("n", cpu="4", memory="8Gi")
    task = make_task(cpu="3", memory="2Gi")
    least, balanced, most = 50, 75, 50  # cpu 75% used, memory 25%
    assert node_score(task, node, NodeOrderWeights(2, 0, 0)) == 2 * least
    assert node_score(task, node, NodeOrderWeights(0, 3, 0)) == 3 * balanced
    assert node_score(task, node, NodeOrderWeights(0, 0, 1)) == most
    assert node_score(task, node, NodeOrderWeights(0, 0, 0)) == 0


def test_emptier_node_scores_higher_by_default() -> None:
    busy = make_node("busy", cpu="8", memory="16Gi")
    busy.add_task(make_task("running", cpu="4", memory="8Gi"))
    idle = make_node("idle", cpu="8", memory="16Gi")
    task = make_task(cpu="1", memory="1Gi")
    assert node_score(task, idle, NodeOrderWeights()) > node_score(task, busy, NodeOrderWeights())
    most_only = NodeOrderWeights(0, 0, 1)
    assert node_score(task, busy, most_only) > node_score(task, idle, most_only)


def test_nodeorder_weights_from_volcano_arguments() -> None:
    arguments = Arguments({"leastrequested.weight": 0, "balancedresource.weight": 2, "mostrequested.weight": 3})
    assert NodeOrderWeights.from_arguments(arguments) == NodeOrderWeights(0, 2, 3)
    assert NodeOrderWeights.from_arguments(Arguments({})) == NodeOrderWeights(1, 1, 0, 1)
    assert NodeOrderWeights.from_arguments(Arguments({"tainttoleration.weight": 0})).taint_toleration == 0
    with pytest.raises(PluginArgumentError, match=r"leastrequested\.weight"):
        NodeOrderWeights.from_arguments(Arguments({"leastrequested.weight": "heavy"}))


def test_intolerable_prefer_no_schedule_counts() -> None:
    taints = (
        Taint("spot", "yes", "PreferNoSchedule"),
        Taint("old-gpu", "", "PreferNoSchedule"),
        Taint("dedicated", "ml", "NoSchedule"),
    )
    assert intolerable_prefer_no_schedule(taints, ()) == 2
    assert intolerable_prefer_no_schedule(taints, (Toleration(key="spot", operator="Exists"),)) == 1
    prefer_only = Toleration(key="spot", operator="Exists", effect="PreferNoSchedule")
    assert intolerable_prefer_no_schedule(taints, (prefer_only,)) == 1
    # A toleration for another effect does not count toward PreferNoSchedule.
    no_schedule_only = Toleration(operator="Exists", effect="NoSchedule")
    assert intolerable_prefer_no_schedule(taints, (no_schedule_only,)) == 2
    assert intolerable_prefer_no_schedule(taints, (Toleration(operator="Exists"),)) == 0


def test_reverse_normalized() -> None:
    assert reverse_normalized({"a": 0, "b": 1, "c": 3}) == {"a": 100, "b": 67, "c": 0}
    assert reverse_normalized({"a": 0, "b": 0}) == {"a": 100, "b": 100}
    assert reverse_normalized({}) == {}


def test_taint_toleration_scores_prefer_clean_nodes() -> None:
    clean = make_node("clean", cpu="4")
    spot = make_node("spot", cpu="4")
    spot.taints = (Taint("spot", "yes", "PreferNoSchedule"),)
    assert taint_toleration_scores(make_task(), [clean, spot]) == {"clean": 100, "spot": 0}
    tolerant = TaskInfo(
        uid="t",
        namespace="default",
        name="t",
        job_id="j",
        resreq=Resource(),
        init_resreq=Resource(),
        tolerations=(Toleration(key="spot", operator="Exists"),),
    )
    assert taint_toleration_scores(tolerant, [clean, spot]) == {"clean": 100, "spot": 100}


# -- binpack -------------------------------------------------------------------------------------


def test_resource_binpack_score() -> None:
    assert resource_binpack_score(1000, 4000, 1000, 1) == 0.5
    assert resource_binpack_score(1000, 4000, 1000, 3) == 1.5
    assert resource_binpack_score(1000, 4000, 3500, 1) is None
    assert resource_binpack_score(1000, 0, 0, 1) == 0.0
    assert resource_binpack_score(1000, 4000, 0, 0) == 0.0


def test_binpack_score_cpu_and_memory() -> None:
    allocatable = resources(cpu="4", memory="8Gi")
    request = resources(cpu="1", memory="2Gi")
    assert binpack_score(request, allocatable, resources(cpu="1", memory="2Gi"), BinpackWeights()) == 50
    weights = BinpackWeights(weight=10, resources={"cpu": 3, "memory": 1})
    # cpu 2/4 * 3, memory 8/8 * 1 over a weight sum of 4, * 100 * 10.
    assert binpack_score(request, allocatable, resources(cpu="1", memory="6Gi"), weights) == 625


def test_binpack_score_gpu_weighting_and_unlisted_resources() -> None:
    allocatable = resources(cpu="4", memory="8Gi", gpu=8)
    used = resources(cpu="1", memory="2Gi", gpu=6)
    request = resources(cpu="1", memory="2Gi", gpu=2)
    with_gpu = BinpackWeights(resources={"cpu": 1, "memory": 1, "nvidia.com/gpu": 2})
    assert binpack_score(request, allocatable, used, with_gpu) == 75  # (0.5 + 0.5 + 2 * 1.0) / 4
    assert binpack_score(request, allocatable, used, BinpackWeights()) == 50  # the GPU does not count


def test_binpack_zero_when_a_resource_does_not_fit_and_skips_unrequested() -> None:
    allocatable = resources(cpu="4", memory="8Gi")
    assert binpack_score(resources(cpu="2"), allocatable, resources(cpu="3"), BinpackWeights()) == 0
    # Only CPU is requested: memory's fill does not count.
    assert binpack_score(resources(cpu="2"), allocatable, resources(memory="8Gi"), BinpackWeights()) == 50
    assert binpack_score(Resource(), allocatable, Resource(), BinpackWeights()) == 0


def test_binpack_weights_from_volcano_arguments() -> None:
    arguments = Arguments(
        {
            "binpack.weight": 10,
            "binpack.cpu": 5,
            "binpack.memory": 1,
            "binpack.resources": "nvidia.com/gpu, example.com/foo",
            "binpack.resources.nvidia.com/gpu": 2,
        }
    )
    weights = BinpackWeights.from_arguments(arguments)
    assert weights.weight == 10
    assert weights.resources == {"cpu": 5, "memory": 1, "nvidia.com/gpu": 2, "example.com/foo": 1}
    assert BinpackWeights.from_arguments(Arguments({})) == BinpackWeights()
    negative = BinpackWeights.from_arguments(
        Arguments({"binpack.cpu": -3, "binpack.resources": ["x/y"], "binpack.resources.x/y": -1})
    )
    assert negative.resources == {"cpu": 1, "memory": 1, "x/y": 1}


# -- through the framework -----------------------------------------------------------------------


def session_with(config_text: str, nodes: dict[str, NodeInfo]) -> Session:
    ssn = Session(ClusterSnapshot(nodes=nodes), load_config_text(config_text), default_registry())
    ssn.open()
    return ssn


def test_plugins_register_node_order_on_a_session() -> None:
    node = make_node("n", cpu="4", memory="8Gi")
    task = make_task(cpu="1", memory="2Gi")
    text = "actions: allocate\ntiers:\n- plugins:\n  - name: nodeorder\n  - name: binpack\n"
    assert session_with(text, {"n": node}).node_order(task, node) == 175 + 25
    weighted = text.replace("name: binpack\n", "name: binpack\n    arguments: {binpack.weight: 0}\n")
    assert session_with(weighted, {"n": node}).node_order(task, node) == 175
    no_order = text.replace("name: nodeorder\n", "name: nodeorder\n    enableNodeOrder: false\n")
    assert session_with(no_order, {"n": node}).node_order(task, node) == 25


def test_taint_toleration_batch_score_on_a_session() -> None:
    clean, spot = make_node("clean", cpu="4"), make_node("spot", cpu="4")
    spot.taints = (Taint("spot", "yes", "PreferNoSchedule"),)
    text = "actions: allocate\ntiers:\n- plugins:\n  - name: nodeorder\n    arguments: {tainttoleration.weight: 2}\n"
    ssn = session_with(text, {"clean": clean, "spot": spot})
    assert ssn.batch_node_order(make_task(cpu="1"), [clean, spot]).tolist() == [200.0, 0.0]
    off = text.replace("tainttoleration.weight: 2", "tainttoleration.weight: 0")
    unweighted = session_with(off, {"clean": clean, "spot": spot})
    assert unweighted.batch_node_order(make_task(cpu="1"), [clean, spot]).tolist() == [0.0, 0.0]


def test_builders_keep_their_arguments() -> None:
    assert build_binpack(Arguments({"binpack.weight": 4})).weights.weight == 4
    assert build_nodeorder(Arguments({"mostrequested.weight": 2})).weights.most_requested == 2


def placement(config_text: str) -> str:
    busy = make_node("busy", cpu="8", memory="16Gi")
    busy.add_task(make_task("running", cpu="4", memory="8Gi"))
    busy.tasks["running"].status = TaskStatus.RUNNING
    nodes = {"busy": busy, "idle": make_node("idle", cpu="8", memory="16Gi")}
    task = make_task("pod", cpu="1", memory="1Gi")
    job = JobInfo(uid=task.job_id, namespace="default", name="pod", tasks={task.uid: task})
    result = run_session(
        ClusterSnapshot(nodes=nodes, jobs={job.uid: job}), load_config_text(config_text), default_registry()
    )
    [request] = result.bind_requests
    return request.node_name


def test_nodeorder_spreads_and_binpack_packs_in_a_session() -> None:
    header = "actions: allocate\ntiers:\n- plugins:\n  - name: predicates\n"
    assert placement(header + "  - name: nodeorder\n") == "idle"
    assert placement(header + "  - name: binpack\n") == "busy"
    heavy_binpack = header + "  - name: nodeorder\n  - name: binpack\n    arguments: {binpack.weight: 10}\n"
    assert placement(heavy_binpack) == "busy"


def placed_among(nodes: dict[str, NodeInfo], config_text: str) -> list[str]:
    task = make_task("pod", cpu="1", memory="1Gi")
    job = JobInfo(uid=task.job_id, namespace="default", name="pod", tasks={task.uid: task})
    result = run_session(
        ClusterSnapshot(nodes=nodes, jobs={job.uid: job}), load_config_text(config_text), default_registry()
    )
    return [request.node_name for request in result.bind_requests]


def test_a_tainted_node_found_by_the_scan_is_scored_lower_in_a_session() -> None:
    """The allocate action's candidates (found by the predicate scan, with their node index) are
    checked for taints on the index's array: a PreferNoSchedule node loses to a clean one that
    comes after it in name order; untainted, the two tie and the name order decides."""
    text = "actions: allocate\ntiers:\n- plugins:\n  - name: predicates\n  - name: nodeorder\n"

    def two_nodes(tainted: bool) -> dict[str, NodeInfo]:
        nodes = {name: make_node(name, cpu="8", memory="16Gi") for name in ("a-spot", "b-clean")}
        if tainted:
            nodes["a-spot"].taints = (Taint("spot", "yes", "PreferNoSchedule"),)
        return nodes

    assert placed_among(two_nodes(tainted=True), text) == ["b-clean"]
    assert placed_among(two_nodes(tainted=False), text) == ["a-spot"]
