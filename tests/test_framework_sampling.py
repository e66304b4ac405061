"""Feasible-node sampling in the allocate action: how many nodes a task's predicate scan visits,
where the next scan starts, that a task finding nothing was checked against every node, and the
`configurations` knobs that set it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from structlog.testing import capture_logs

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo, TaskStatus
from numasched.cache.cache import Cache
from numasched.cache.events import EventType, ObjectEvent
from numasched.conf.loader import load_config_text
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.plugins.binpack import BinpackPlugin, task_binpack_score
from numasched.plugins.nodeorder import (
    NodeOrderPlugin,
    NodeOrderWeights,
    balanced_resource_score,
    least_requested_score,
    most_requested_score,
    node_score,
    non_zero_request,
    weighted_resource_score,
)
from numasched.scheduler.actions.allocate import (
    MINIMUM_FEASIBLE_NODES,
    MINIMUM_PERCENTAGE_NODES_TO_FIND,
    PERCENTAGE_NODES_TO_FIND,
    AllocateAction,
    SamplingOptions,
    ScanFailures,
    feasible_nodes,
    sampling_options,
)
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.registry import Registry
from numasched.scheduler.framework.session import Session
from numasched.scheduler.framework.statement import Statement
from numasched.scheduler.framework.status import SUCCESS, Status, StatusCode
from numasched.scheduler.loop import run_session

GPU = "nvidia.com/gpu"

NODE_OBJECT: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {"name": "n1"},
    "status": {
        "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
        "conditions": [{"type": "Ready", "status": "True"}],
    },
}
POD_OBJECT: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p1", "namespace": "default", "uid": "uid-p1"},
    "spec": {"schedulerName": "numasched", "containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}]},
    "status": {"phase": "Pending"},
}


def node(index: int, *, gpus: int = 8, zone: str = "a") -> NodeInfo:
    result = NodeInfo.create(f"n{index:04d}", Resource(milli_cpu=64000, memory=512e9, scalars={GPU: gpus * 1000.0}))
    result.labels = {"zone": zone}
    return result


def task(uid: str, job: str, *, gpus: int = 1, ts: float = 0.0) -> TaskInfo:
    request = Resource(milli_cpu=1000, memory=1e9, scalars={GPU: gpus * 1000.0})
    return TaskInfo(
        uid=uid,
        namespace="ns",
        name=uid,
        job_id=job,
        resreq=request,
        init_resreq=request.clone(),
        creation_timestamp=ts,
    )


def single_pod_jobs(count: int, *, gpus: int = 1) -> list[JobInfo]:
    jobs = []
    for index in range(count):
        job = JobInfo(uid=f"j{index:03d}", namespace="ns", name=f"j{index:03d}", creation_timestamp=index)
        job.add_task(task(f"t{index:03d}", job.uid, gpus=gpus, ts=index))
        jobs.append(job)
    return jobs


class CountingPredicate:
    """Counts the nodes it is asked about; passes nodes in zone "a" only."""

    name = "counting"

    def __init__(self, arguments: Arguments) -> None:
        self.visits: Counter[str] = Counter()

    def on_session_open(self, ssn: Session) -> None:
        def predicate(task: TaskInfo, node: NodeInfo) -> Status:
            self.visits[node.name] += 1
            if node.labels.get("zone") == "a":
                return SUCCESS
            return Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, "node(s) are in the wrong zone")

        ssn.add_predicate_fn(self.name, predicate)

    def on_session_close(self, ssn: Session) -> None:
        return None


def counting_registry() -> tuple[Registry, CountingPredicate]:
    registry = default_registry()
    plugin = CountingPredicate(Arguments())
    registry.register_plugin("counting", lambda arguments: plugin)
    return registry, plugin


def sampling_config(**arguments: Any) -> SchedulerConfig:
    tiers = (
        Tier((PluginOption("priority"), PluginOption("gang"))),
        Tier((PluginOption("counting"), PluginOption("nodeorder"))),
    )
    configurations = {"allocate": dict(arguments)} if arguments else {}
    return SchedulerConfig(actions=("enqueue", "allocate", "backfill"), tiers=tiers, configurations=configurations)


def open_session(nodes: list[NodeInfo], jobs: list[JobInfo], **arguments: Any) -> tuple[Session, CountingPredicate]:
    registry, plugin = counting_registry()
    snapshot = ClusterSnapshot(nodes={n.name: n for n in nodes}, jobs={j.uid: j for j in jobs})
    ssn = Session(snapshot, sampling_config(**arguments), registry)
    ssn.open()
    return ssn, plugin


# --- how many nodes to find -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("total", "expected"),
    [
        (0, 0),
        (1, 1),
        (100, 100),  # up to minimumFeasibleNodes: every node
        (150, 100),  # 49% is 73, raised to the minimum of 100
        (300, 144),  # 50 - 2 = 48%
        (1000, 420),  # 50 - 8 = 42%
        (5000, 500),  # 50 - 40 = 10%
        (6000, 300),  # 50 - 48 = 2%, raised to the minimum percentage of 5%
        (10000, 500),  # the adaptive percentage is negative: 5%
    ],
)
def test_adaptive_number_of_nodes_to_find(total: int, expected: int) -> None:
    assert SamplingOptions().nodes_to_find(total) == expected


def test_configured_percentage_and_minimums() -> None:
    assert SamplingOptions(percentage=10).nodes_to_find(5000) == 500
    assert SamplingOptions(percentage=10).nodes_to_find(500) == 100  # 50, raised to 100
    assert SamplingOptions(percentage=100).nodes_to_find(5000) == 5000
    assert SamplingOptions(minimum_feasible_nodes=10, percentage=10).nodes_to_find(200) == 20
    assert SamplingOptions(minimum_feasible_nodes=10, minimum_percentage=30).nodes_to_find(3000) == 900
    assert SamplingOptions(minimum_feasible_nodes=5000).nodes_to_find(4000) == 4000


@given(
    total=st.integers(0, 20000),
    minimum_nodes=st.integers(1, 3000),
    minimum_percentage=st.integers(0, 100),
    percentage=st.integers(0, 100),
)
def test_nodes_to_find_stays_within_the_cluster_and_above_the_minimum(
    total: int, minimum_nodes: int, minimum_percentage: int, percentage: int
) -> None:
    found = SamplingOptions(minimum_nodes, minimum_percentage, percentage).nodes_to_find(total)
    assert 0 <= found <= total
    assert found >= min(total, minimum_nodes)


# --- the scan -------------------------------------------------------------------------------------


def test_a_scan_stops_once_enough_nodes_passed_and_the_next_starts_where_it_stopped() -> None:
    nodes = [node(i) for i in range(300)]
    ssn, plugin = open_session(nodes, [])
    pending = task("t", "j")
    first = feasible_nodes(ssn, pending, nodes, check_resources=True, nodes_to_find=144)
    assert [n.name for n in first] == [n.name for n in nodes[:144]]
    assert sum(plugin.visits.values()) == 144
    assert ssn.node_scan_offset == 144
    second = feasible_nodes(ssn, pending, nodes, check_resources=True, nodes_to_find=144)
    assert [n.name for n in second] == [n.name for n in nodes[144:288]]
    third = feasible_nodes(ssn, pending, nodes, check_resources=True, nodes_to_find=144)
    # It wraps around the end of the node list.
    assert [n.name for n in third] == [n.name for n in nodes[288:] + nodes[:132]]
    assert ssn.node_scan_offset == 132


def test_scans_visit_every_node_equally_often() -> None:
    nodes = [node(i) for i in range(300)]
    ssn, plugin = open_session(nodes, [])
    for index in range(25):
        feasible_nodes(ssn, task(f"t{index}", "j"), nodes, check_resources=True, nodes_to_find=144)
    # 25 scans of 144 nodes each = 3,600 visits = 12 per node.
    assert set(plugin.visits.values()) == {12}


def test_failing_nodes_count_as_visited_and_the_offset_moves_past_them() -> None:
    nodes = [node(i, zone="a" if i % 3 == 0 else "b") for i in range(300)]
    ssn, plugin = open_session(nodes, [])
    found = feasible_nodes(ssn, task("t", "j"), nodes, check_resources=True, nodes_to_find=10)
    assert [n.name for n in found] == [nodes[i].name for i in range(0, 30, 3)]
    # Visited nodes 0..27; the next scan starts at 28.
    assert sum(plugin.visits.values()) == 28
    assert ssn.node_scan_offset == 28


def test_a_task_that_fits_nowhere_was_checked_against_every_node() -> None:
    nodes = [node(i) for i in range(300)]
    ssn, _ = open_session(nodes, [])
    ssn.node_scan_offset = 77
    too_big = task("big", "j", gpus=9)
    assert feasible_nodes(ssn, too_big, nodes, check_resources=True, nodes_to_find=144) == []
    assert ssn.fit_error_message(too_big) == "0/300 nodes are available: 300 Insufficient nvidia.com/gpu."
    # A full circle leaves the offset where it was.
    assert ssn.node_scan_offset == 77


def test_fewer_feasible_nodes_than_wanted_means_every_node_was_visited() -> None:
    nodes = [node(i, zone="a" if i in (5, 250) else "b") for i in range(300)]
    ssn, plugin = open_session(nodes, [])
    ssn.node_scan_offset = 100
    found = feasible_nodes(ssn, task("t", "j"), nodes, check_resources=True, nodes_to_find=144)
    assert [n.name for n in found] == ["n0250", "n0005"]
    assert sum(plugin.visits.values()) == 300
    assert set(plugin.visits) == {n.name for n in nodes}


def test_without_a_number_to_find_the_scan_visits_all_in_order_and_leaves_the_offset() -> None:
    nodes = [node(i) for i in range(300)]
    ssn, plugin = open_session(nodes, [])
    ssn.node_scan_offset = 42
    found = feasible_nodes(ssn, task("t", "j"), nodes, check_resources=True)
    assert found == nodes
    assert set(plugin.visits.values()) == {1}
    assert ssn.node_scan_offset == 42


# --- through the allocate action -----------------------------------------------------------------


def test_allocate_evaluates_the_sampled_number_of_nodes_per_task() -> None:
    nodes = [node(i) for i in range(1000)]
    registry, plugin = counting_registry()
    snapshot = ClusterSnapshot(nodes={n.name: n for n in nodes}, jobs={j.uid: j for j in single_pod_jobs(5)})
    result = run_session(snapshot, sampling_config(), registry)
    assert len(result.bind_requests) == 5
    # 42% of 1,000 per task, each scan going on where the previous stopped.
    assert sum(plugin.visits.values()) == 5 * 420
    assert set(plugin.visits.values()) == {2, 3}


def test_configured_knobs_change_how_many_nodes_are_evaluated() -> None:
    nodes = [node(i) for i in range(200)]
    registry, plugin = counting_registry()
    snapshot = ClusterSnapshot(nodes={n.name: n for n in nodes}, jobs={j.uid: j for j in single_pod_jobs(3)})
    config = sampling_config(**{MINIMUM_FEASIBLE_NODES: 10, PERCENTAGE_NODES_TO_FIND: 10})
    result = run_session(snapshot, config, registry)
    assert len(result.bind_requests) == 3
    assert sum(plugin.visits.values()) == 3 * 20
    assert sorted(plugin.visits) == [n.name for n in nodes[:60]]


def test_small_clusters_are_scanned_in_full() -> None:
    nodes = [node(i) for i in range(100)]
    registry, plugin = counting_registry()
    snapshot = ClusterSnapshot(nodes={n.name: n for n in nodes}, jobs={j.uid: j for j in single_pod_jobs(3)})
    run_session(snapshot, sampling_config(), registry)
    assert set(plugin.visits.values()) == {3}


def test_unschedulable_message_counts_all_nodes_on_a_sampled_cluster() -> None:
    nodes = [node(i) for i in range(1000)]
    registry, _ = counting_registry()
    jobs = single_pod_jobs(3)
    big = JobInfo(uid="big", namespace="ns", name="big", creation_timestamp=99)
    big.add_task(task("big", "big", gpus=9, ts=99))
    snapshot = ClusterSnapshot(nodes={n.name: n for n in nodes}, jobs={j.uid: j for j in [*jobs, big]})
    result = run_session(snapshot, sampling_config(), registry)
    assert result.fit_errors == {"big": "0/1000 nodes are available: 1000 Insufficient nvidia.com/gpu."}


def test_a_gang_is_placed_whole_on_a_sampled_cluster_or_not_at_all() -> None:
    # 300 nodes, only 8 of them (spread over the list) in the zone the predicate accepts.
    zone_a = {3, 50, 99, 140, 180, 222, 260, 299}
    nodes = [node(i, zone="a" if i in zone_a else "b") for i in range(300)]
    registry, _ = counting_registry()

    def gang(size: int) -> JobInfo:
        job = JobInfo(
            uid="train", namespace="ns", name="train", min_available=size, has_pod_group=True, pod_group_phase="Inqueue"
        )
        for index in range(size):
            job.add_task(task(f"w{index}", "train", gpus=8, ts=index))
        return job

    whole = gang(8)
    result = run_session(
        ClusterSnapshot(nodes={n.name: n for n in nodes}, jobs={"train": whole}), sampling_config(), registry
    )
    assert sorted(request.node_name for request in result.bind_requests) == [f"n{i:04d}" for i in sorted(zone_a)]

    nodes = [node(i, zone="a" if i in zone_a else "b") for i in range(300)]
    too_big = gang(9)
    result = run_session(
        ClusterSnapshot(nodes={n.name: n for n in nodes}, jobs={"train": too_big}), sampling_config(), registry
    )
    assert result.bind_requests == ()
    assert all(t.status is TaskStatus.PENDING for t in too_big.tasks.values())
    assert result.fit_errors["w8"] == (
        "0/300 nodes are available: 292 node(s) are in the wrong zone, 8 Insufficient nvidia.com/gpu."
    )


# --- configuration -------------------------------------------------------------------------------


def test_sampling_options_read_integers_and_numeric_strings() -> None:
    options, problems = sampling_options(
        {MINIMUM_FEASIBLE_NODES: "50", MINIMUM_PERCENTAGE_NODES_TO_FIND: 10.0, PERCENTAGE_NODES_TO_FIND: 0}
    )
    assert problems == []
    assert options == SamplingOptions(50, 10, 0)
    assert sampling_options({}) == (SamplingOptions(), [])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {MINIMUM_FEASIBLE_NODES: 0},
            "minimumFeasibleNodes: 0 is out of range, expected at least 1; using 100",
        ),
        (
            {MINIMUM_FEASIBLE_NODES: "many"},
            "minimumFeasibleNodes: expected a whole number at least 1, got 'many'; using 100",
        ),
        (
            {PERCENTAGE_NODES_TO_FIND: 101},
            "percentageNodesToFind: 101 is out of range, expected from 0 to 100; using 0",
        ),
        (
            {PERCENTAGE_NODES_TO_FIND: 12.5},
            "percentageNodesToFind: expected a whole number from 0 to 100, got 12.5; using 0",
        ),
        (
            {MINIMUM_PERCENTAGE_NODES_TO_FIND: -1},
            "minimumPercentageNodesToFind: -1 is out of range, expected from 0 to 100; using 5",
        ),
        (
            {MINIMUM_PERCENTAGE_NODES_TO_FIND: True},
            "minimumPercentageNodesToFind: expected a whole number from 0 to 100, got True; using 5",
        ),
        (
            {"minimumFeasibleNode": 10},
            "unknown argument 'minimumFeasibleNode' (known: minimumFeasibleNodes, minimumPercentageNodesToFind, "
            "percentageNodesToFind); ignored",
        ),
    ],
)
def test_bad_sampling_values_are_named_and_fall_back_to_the_default(arguments: dict[str, Any], message: str) -> None:
    options, problems = sampling_options(arguments)
    assert problems == [message]
    assert options == SamplingOptions()


def test_one_bad_knob_keeps_the_others() -> None:
    options, problems = sampling_options({MINIMUM_FEASIBLE_NODES: -5, PERCENTAGE_NODES_TO_FIND: 20})
    assert options == SamplingOptions(minimum_feasible_nodes=100, percentage=20)
    assert len(problems) == 1


def test_the_action_reports_a_bad_value_once_per_configuration() -> None:
    action = AllocateAction()
    registry, _ = counting_registry()
    nodes = [node(i) for i in range(3)]

    def session(config: SchedulerConfig) -> Session:
        return Session(ClusterSnapshot(nodes={n.name: n for n in nodes}), config, registry)

    bad = sampling_config(**{PERCENTAGE_NODES_TO_FIND: "half"})
    with capture_logs() as logs:
        assert action.sampling(session(bad)) == SamplingOptions()
        assert action.sampling(session(bad)) == SamplingOptions()
        assert action.sampling(session(sampling_config(**{PERCENTAGE_NODES_TO_FIND: 30}))) == SamplingOptions(
            percentage=30
        )
    warnings = [entry for entry in logs if entry["log_level"] == "warning"]
    assert len(warnings) == 1
    assert warnings[0]["problem"].startswith("percentageNodesToFind: expected a whole number")


def test_the_knobs_load_from_a_volcano_configuration_file() -> None:
    text = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: predicates
configurations:
- name: allocate
  arguments:
    minimumFeasibleNodes: 50
    minimumPercentageNodesToFind: 10
    percentageNodesToFind: 20
"""
    config = load_config_text(text, "test.conf")
    options, problems = sampling_options(config.configurations["allocate"])
    assert problems == []
    assert options == SamplingOptions(50, 10, 20)


# --- per-session caches that sampling relies on ----------------------------------------------------


def test_a_snapshot_task_changed_by_the_session_leaves_the_cache_alone() -> None:
    cache = Cache(("numasched",))
    cache.apply(ObjectEvent("Node", EventType.ADDED, NODE_OBJECT))
    cache.apply(ObjectEvent("Pod", EventType.ADDED, POD_OBJECT))
    first = cache.snapshot()
    [task_in_session] = [t for job in first.jobs.values() for t in job.tasks.values()]
    task_in_session.status = TaskStatus.ALLOCATED
    task_in_session.node_name = "n1"
    task_in_session.fit_error = "changed"
    [again] = [t for job in cache.snapshot().jobs.values() for t in job.tasks.values()]
    assert again is not task_in_session
    assert (again.status, again.node_name, again.fit_error) == (TaskStatus.PENDING, "", "")
    assert again.resreq == task_in_session.resreq


def test_nodeorder_scores_follow_allocations_made_in_the_session() -> None:
    nodes = [node(i) for i in range(3)]
    jobs = single_pod_jobs(4)
    ssn, _ = open_session(nodes, jobs)
    plugin = ssn.plugins["nodeorder"]
    assert isinstance(plugin, NodeOrderPlugin)
    probe = task("probe", "probe", gpus=1)
    statement = Statement(ssn)
    for job in jobs:
        before = {n.name: plugin.score(probe, n) for n in nodes}
        [pending] = job.tasks.values()
        statement.allocate(pending, nodes[0])
        fresh = {n.name: node_score(probe, n, plugin.weights) for n in nodes}
        assert {n.name: plugin.score(probe, n) for n in nodes} == fresh
        assert fresh["n0000"] < before["n0000"]
    statement.discard()
    assert {n.name: plugin.score(probe, n) for n in nodes} == {
        n.name: node_score(probe, n, plugin.weights) for n in nodes
    }


def test_binpack_plugin_scores_as_the_plain_function_across_nodes() -> None:
    arguments = Arguments({"binpack.resources": GPU, f"binpack.resources.{GPU}": 3, "binpack.cpu": 2}, plugin="binpack")
    plugin = BinpackPlugin(arguments)
    nodes = [node(i, gpus=i % 9) for i in range(20)]
    for index, used in enumerate(nodes):
        used.used = Resource(milli_cpu=1000.0 * index, memory=1e10 * (index % 5), scalars={GPU: 1000.0 * (index % 3)})
    probes = [task("a", "j", gpus=0), task("b", "j", gpus=1), task("c", "j", gpus=4)]
    for probe in probes:
        for candidate in nodes:
            assert plugin.score(probe, candidate) == task_binpack_score(probe, candidate, plugin.weights)


@given(
    allocatable=st.tuples(st.integers(0, 128_000), st.integers(0, 2**40)),
    used=st.tuples(st.integers(0, 256_000), st.integers(0, 2**41)),
    requested=st.tuples(st.integers(0, 64_000), st.integers(0, 2**38)),
    weights=st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
)
def test_node_score_matches_the_generic_per_resource_scores(
    allocatable: tuple[int, int], used: tuple[int, int], requested: tuple[int, int], weights: tuple[int, int, int]
) -> None:
    scored = NodeInfo.create("n", Resource(milli_cpu=allocatable[0], memory=allocatable[1]))
    scored.used = Resource(milli_cpu=used[0], memory=used[1])
    probe = TaskInfo(
        uid="p",
        namespace="ns",
        name="p",
        job_id="p",
        resreq=Resource(milli_cpu=requested[0], memory=requested[1]),
        init_resreq=Resource(milli_cpu=requested[0], memory=requested[1]),
    )
    least, balanced, most = weights
    task_request = non_zero_request(probe)
    node_request = (used[0] // 2, used[1] // 2)
    total = (node_request[0] + task_request[0], node_request[1] + task_request[1])
    capacity = (round(scored.allocatable.milli_cpu), round(scored.allocatable.memory))
    expected = 0.0
    if least or most:
        expected += least * weighted_resource_score(total, capacity, (1, 1), least_requested_score)
        expected += most * weighted_resource_score(total, capacity, (1, 1), most_requested_score)
    if balanced:
        fractions_used = (used[0] + requested[0], used[1] + requested[1])
        expected += balanced * balanced_resource_score(
            fractions_used, (scored.allocatable.milli_cpu, scored.allocatable.memory)
        )
    actual = node_score(
        probe, scored, NodeOrderWeights(least, balanced, most), non_zero_request, lambda _: node_request
    )
    assert actual == expected


def test_fit_errors_are_kept_as_recorded_and_merged_in_order_when_read() -> None:
    ssn = Session(ClusterSnapshot(nodes={}), sampling_config(), counting_registry()[0])
    pod = task("t", "j")
    wrong_zone = Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, "node(s) are in the wrong zone")
    full = Status.unschedulable("Insufficient cpu")
    names = np.array(["n1", "n2"], dtype=object)
    reasons = np.empty(2, dtype=object)
    reasons[0], reasons[1] = (wrong_zone,), (full,)
    scan = ScanFailures(names, reasons)
    assert len(scan) == 2 and dict(scan) == {"n1": (wrong_zone,), "n2": (full,)} and scan["n2"] == (full,)
    assert list(scan.items()) == [("n1", (wrong_zone,)), ("n2", (full,))] and list(scan.keys()) == ["n1", "n2"]
    assert list(scan.values()) == [(wrong_zone,), (full,)] and "n3" not in scan
    ssn.record_fit_errors(pod, scan)
    ssn.record_fit_errors(pod, {"n2": (wrong_zone,), "n3": (full,)})
    merged = {"n1": (wrong_zone,), "n2": (full, wrong_zone), "n3": (full,)}
    assert ssn.fit_errors_of("t") == merged
    # Read twice, and through the mapping of every task, the same; a reader's copy is its own.
    ssn.fit_errors_of("t")["n1"] = (full,)
    assert ssn.fit_errors == {"t": merged}
    assert ssn.fit_errors_of("other") == {}
    assert ssn.fit_error_message(pod).startswith("0/0 nodes are available")
