"""The benchmark's generators, its kubelet-replay quality metrics and its decision timer."""

from __future__ import annotations

import importlib
import json
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from numasched.api.allocation import ALLOCATION_ANNOTATION, ContainerAllocation, PodAllocation, allocation_to_json
from numasched.api.idset import IdSet
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo
from numasched.api.topology import TopologyPolicy
from numasched.cache.cache import Cache
from numasched.cache.machine_shapes import machine_objects
from numasched.cache.simcluster import SimCluster

HACK = Path(__file__).resolve().parent.parent / "hack"
MACHINES = Path(__file__).resolve().parent / "fixtures" / "machines"


@pytest.fixture
def hack(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.syspath_prepend(str(HACK))
    yield
    for name in ("bench_workload", "bench_quality", "bench_run"):
        sys.modules.pop(name, None)


def hack_module(name: str) -> Any:
    return importlib.import_module(name)


def machine(name: str) -> Mapping[str, Any]:
    loaded: Mapping[str, Any] = yaml.safe_load((MACHINES / f"{name}.yaml").read_text())
    return loaded


# -- generators -----------------------------------------------------------------------------------


def test_workload_has_exact_pod_count_and_is_seeded(hack: None) -> None:
    generate_workload = hack_module("bench_workload").generate_workload

    first = generate_workload(300, seed=7)
    again = generate_workload(300, seed=7)
    other = generate_workload(300, seed=8)
    pods = [obj for arrival in first for obj in arrival.objects if obj["kind"] == "Pod"]
    assert len(pods) == 300
    assert len({pod["metadata"]["name"] for pod in pods}) == 300
    assert [a.objects for a in first] == [a.objects for a in again]
    assert [a.objects for a in first] != [a.objects for a in other]
    assert {arrival.kind for arrival in first} <= {"service", "inference", "training", "best-effort"}


def test_gang_jobs_are_podgroups_with_matching_members(hack: None) -> None:
    group_annotation = hack_module("bench_workload").GROUP_ANNOTATION
    generate_workload = hack_module("bench_workload").generate_workload

    arrivals = [a for a in generate_workload(400, seed=3) if a.kind == "training"]
    assert arrivals
    for arrival in arrivals:
        group, *pods = arrival.objects
        assert group["kind"] == "PodGroup"
        assert group["apiVersion"] == "scheduling.volcano.sh/v1beta1"
        assert group["spec"]["minMember"] == len(pods) >= 2
        for pod in pods:
            assert pod["metadata"]["annotations"][group_annotation] == group["metadata"]["name"]
            requests = pod["spec"]["containers"][0]["resources"]["requests"]
            assert requests["nvidia.com/gpu"] in ("4", "8")
            assert requests == pod["spec"]["containers"][0]["resources"]["limits"]


def test_mixes_shape_the_workload(hack: None) -> None:
    mixes = hack_module("bench_workload").MIXES
    generate_workload = hack_module("bench_workload").generate_workload

    kinds = Counter(a.kind for a in generate_workload(200, seed=1, mix=mixes["cpu-pinned"]))
    assert set(kinds) <= {"service", "best-effort"}
    with pytest.raises(ValueError, match="unknown workload kinds"):
        generate_workload(10, seed=1, mix={"batch": 1.0})


def test_batches_keep_order_and_cover_everything(hack: None) -> None:
    batches = hack_module("bench_workload").batches
    generate_workload = hack_module("bench_workload").generate_workload

    arrivals = generate_workload(500, seed=2)
    split = list(batches(arrivals, 10))
    assert [a for batch in split for a in batch] == arrivals
    assert 2 <= len(split) <= 10
    with pytest.raises(ValueError):
        list(batches(arrivals, 0))


def test_cluster_mixes_policies_and_shapes(hack: None) -> None:
    policies = hack_module("bench_workload").POLICIES
    generate_cluster = hack_module("bench_workload").generate_cluster

    nodes = generate_cluster(30, seed=5)
    assert len({node.name for node in nodes}) == 30
    assert {node.policy for node in nodes} == set(policies)
    assert len({node.machine for node in nodes}) >= 3
    for node in nodes:
        policies = node.numatopology["spec"]["policies"]
        assert policies["TopologyManagerPolicy"] == node.policy.value
        assert node.node["metadata"]["name"] == node.numatopology["metadata"]["name"] == node.name


# -- quality --------------------------------------------------------------------------------------


def bound_pod(
    name: str, node: str, requests: Mapping[str, str], decision: PodAllocation | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": "bench", "uid": f"uid-{name}"}
    if decision is not None:
        metadata["annotations"] = {ALLOCATION_ANNOTATION: allocation_to_json(decision)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "schedulerName": "numasched",
            "nodeName": node,
            "containers": [{"name": "main", "resources": {"requests": dict(requests), "limits": dict(requests)}}],
        },
        "status": {"phase": "Running"},
    }


def cluster_with(shape: str, policy: TopologyPolicy, pods: list[dict[str, Any]]) -> ClusterSnapshot:
    cache = Cache(("numasched",))
    sim = SimCluster(cache)
    node, topology = machine_objects(machine(shape), "n0", topology_policy=policy)
    sim.add(node)
    sim.add(topology)
    for pod in pods:
        sim.add(pod)
    assert not sim.load_problems
    return cache.snapshot()


def gpus(*ids: str, cpus: str = "") -> PodAllocation:
    return PodAllocation((ContainerAllocation("main", IdSet.parse(cpus), None, {"nvidia.com/gpu": ids}),))


def pending_task(name: str, gpu_count: int, cpu: int) -> TaskInfo:
    pod = bound_pod(name, "", {"cpu": str(cpu), "memory": "1Gi", "nvidia.com/gpu": str(gpu_count)})
    del pod["spec"]["nodeName"]
    pod["status"] = {"phase": "Pending"}
    snapshot = cluster_with("pcie-8gpu-2numa", TopologyPolicy.RESTRICTED, [pod])
    return next(task for job in snapshot.jobs.values() for task in job.tasks.values())


def test_kubelet_rejects_what_single_numa_node_cannot_align(hack: None) -> None:
    evaluate = hack_module("bench_quality").evaluate

    # 8 GPUs span both NUMA nodes of an HGX: single-numa-node refuses it; 4 GPUs fit one.
    pods = [
        bound_pod("wide", "n0", {"cpu": "8", "memory": "8Gi", "nvidia.com/gpu": "8"}),
        bound_pod("half", "n0", {"cpu": "8", "memory": "8Gi", "nvidia.com/gpu": "4"}),
    ]
    report = evaluate(cluster_with("hgx-h100", TopologyPolicy.SINGLE_NUMA_NODE, pods), ["bench/wide", "bench/half"], [])
    assert report.placed == 2
    assert report.rejected == 1
    assert "bench/wide" in report.rejection_examples[0]
    # Under best-effort the wide pod is admitted (and then holds every GPU).
    report = evaluate(cluster_with("hgx-h100", TopologyPolicy.BEST_EFFORT, pods[:1]), ["bench/wide"], [])
    assert (report.placed, report.rejected) == (1, 0)


def test_kubelet_state_follows_bind_order(hack: None) -> None:
    evaluate = hack_module("bench_quality").evaluate

    # Under restricted, each 4-GPU pod is aligned on a NUMA node; a third cannot be.
    pods = [bound_pod(f"p{i}", "n0", {"cpu": "4", "memory": "1Gi", "nvidia.com/gpu": "3"}) for i in range(3)]
    order = ["bench/p0", "bench/p1", "bench/p2"]
    report = evaluate(cluster_with("pcie-8gpu-2numa", TopologyPolicy.RESTRICTED, pods), order, [])
    assert (report.placed, report.rejected) == (3, 1)
    assert report.rejection_examples[0].startswith("bench/p2")


def test_nvlink_and_span_are_judged_on_the_decision(hack: None) -> None:
    evaluate = hack_module("bench_quality").evaluate

    request = {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "2"}
    pods = [
        # GPUs 0 and 6 of a DGX-1 have no NVLink between them and sit on different NUMA nodes.
        bound_pod("far", "n0", request, gpus("0", "6")),
        # 1 and 2 are joined by two NVLinks on NUMA 0.
        bound_pod("near", "n0", request, gpus("1", "2")),
    ]
    report = evaluate(cluster_with("dgx1-v100", TopologyPolicy.BEST_EFFORT, pods), ["bench/far", "bench/near"], [])
    assert report.rejected == 0
    assert report.gpu_set_pods == 2
    assert report.nvlink_missed == 1
    assert report.span_excess == 1
    assert report.decision_conflicts == 0


def test_conflicting_decisions_are_counted(hack: None) -> None:
    evaluate = hack_module("bench_quality").evaluate

    request = {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}
    pods = [bound_pod("a", "n0", request, gpus("3")), bound_pod("b", "n0", request, gpus("3"))]
    report = evaluate(cluster_with("hgx-h100", TopologyPolicy.BEST_EFFORT, pods), ["bench/a", "bench/b"], [])
    assert report.decision_conflicts == 1


def test_stranded_gpus_against_pending_requests(hack: None) -> None:
    evaluate = hack_module("bench_quality").evaluate

    request = {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "3"}
    pods = [
        bound_pod("left", "n0", request, gpus("0", "1", "2")),
        bound_pod("right", "n0", request, gpus("4", "5", "6")),
    ]
    snapshot = cluster_with("pcie-8gpu-2numa", TopologyPolicy.RESTRICTED, pods)
    order = ["bench/left", "bench/right"]
    # GPUs 3 and 7 are free, one per NUMA node: a pending 2-GPU pod can use neither aligned.
    report = evaluate(snapshot, order, [pending_task("pair", 2, 2)])
    assert (report.free_gpus, report.stranded_gpus) == (2, 2)
    report = evaluate(snapshot, order, [pending_task("single", 1, 2)])
    assert (report.free_gpus, report.stranded_gpus) == (2, 0)
    report = evaluate(snapshot, order, [])
    assert report.stranded_gpus is None


# -- the run itself ---------------------------------------------------------------------------------


def test_small_run_measures_decisions_and_restores_the_scheduler(hack: None, tmp_path: Path) -> None:
    import numasched.scheduler.actions.allocate as allocate_action
    from numasched.scheduler.framework.statement import Statement

    original = (allocate_action.feasible_nodes, Statement.allocate)
    RunSpec = hack_module("bench_run").RunSpec
    percentile = hack_module("bench_run").percentile
    run = hack_module("bench_run").run

    progress = tmp_path / "progress.json"
    result = run(RunSpec(4, 24, "numasched", batches=2), progress=progress)
    assert result.finished
    assert result.submitted_pods == 24
    assert 0 < result.bound <= 24
    assert result.bound + result.pending == 24
    assert result.decisions >= result.bound
    assert 0 < result.decision_p50_ms <= result.decision_p99_ms
    assert result.quality is not None and result.quality.placed == result.bound
    assert result.quality.rejected == 0
    assert json.loads(progress.read_text())["spec"]["config"] == "numasched"
    assert (allocate_action.feasible_nodes, Statement.allocate) == original
    assert percentile([], 0.5) == 0.0
    assert percentile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.0
    assert percentile([float(i) for i in range(1, 101)], 0.99) == 99.0


def test_phase_breakdown_accounts_the_cycle(hack: None, capsys: pytest.CaptureFixture[str]) -> None:
    phases = hack_module("bench_phases")
    try:
        assert phases.main(["--nodes", "8"]) == 0
    finally:
        sys.modules.pop("bench_phases", None)
    lines = capsys.readouterr().out.splitlines()
    rows = {
        line.split("|")[1].strip(): line.split("|")[2:-1]
        for line in lines
        if line.startswith("| ") and "---" not in line
    }
    cycle = float(rows["cycle"][0])
    assert cycle > 0
    parts = ["snapshot", "session open", "job order", "predicate scan (feasible_nodes)", "node choice (choose_node)"]
    # The phases are disjoint parts of the cycles (placing runs inside none of them).
    assert sum(float(rows[name][0]) for name in parts) + float(rows["placing (Statement.allocate)"][0]) <= cycle * 1.01
    assert int(rows["predicate scan (feasible_nodes)"][2].replace(",", "")) > 0
    import numasched.plugins.numaaware.plugin as numa_plugin_module
    import numasched.scheduler.actions.allocate as allocate_module

    assert allocate_module.feasible_nodes.__name__ == "feasible_nodes"  # the timers are gone again
    assert vars(numa_plugin_module)["allocate_admitted"].__name__ == "allocate_admitted"
    assert "numa-aware's ids (allocate_admitted)" in rows
