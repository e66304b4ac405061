"""`numasched explain`: per-node verdicts, the NUMA picture, what-if and the grouped summary.

The oracles are the fixtures' own facts (which GPU ids are free on which NUMA node, written in the
fixture by hand) and arithmetic on the pods' requests, never the module under test.
"""

from __future__ import annotations

import copy
import itertools
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from numasched.cache.cache import Cache
from numasched.cache.simcluster import SimCluster
from numasched.cli import main
from numasched.cli_exit_codes import EXIT_INPUT, EXIT_OK
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.explain import explain_pod
from numasched.scheduler.simulate import load_config

FIXTURES = Path(__file__).parent / "fixtures" / "thirdparty" / "volcano-issue-4998"
NODE_KEYS = {"node", "fits", "plugin", "reason", "policy", "numa", "whatIf", "whatIfNote", "unknownHeld", "hints"}


def _explain_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code = main(["explain", *argv, "--output", "json"])
    assert code == EXIT_OK
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


def _by_node(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {entry["node"]: entry for entry in document["nodes"]}


def _issue_4998_args() -> list[str]:
    return ["--cluster", str(FIXTURES / "cluster.yaml"), "--workload", str(FIXTURES / "workload.yaml")]


def test_gpus_split_across_numa_nodes_are_named_per_numa_node(capsys: pytest.CaptureFixture[str]) -> None:
    """Volcano #4998: on gpu-a the free GPUs are 0,1,2 (NUMA 0) and 7 (NUMA 1) per the fixture's
    notes; a 4-GPU pod under single-numa-node fits on neither NUMA node."""
    document = _explain_json(capsys, "default/train-4gpu-again", *_issue_4998_args())
    gpu_a = _by_node(document)["gpu-a"]
    assert gpu_a["fits"] is False
    assert gpu_a["plugin"] == "numa-aware"
    assert "nvidia.com/gpu" in gpu_a["reason"]
    assert gpu_a["policy"]["topologyManagerPolicy"] == "single-numa-node"
    per_numa = {
        view["numa"]: {resource["resource"]: resource for resource in view["resources"]} for view in gpu_a["numa"]
    }
    assert per_numa[0]["nvidia.com/gpu"]["freeIds"] == ["0", "1", "2"]
    assert per_numa[1]["nvidia.com/gpu"]["freeIds"] == ["7"]
    assert all(per_numa[numa]["nvidia.com/gpu"]["requested"] == 4 for numa in (0, 1))
    assert not any(view["holdsAll"] for view in gpu_a["numa"])
    # The fixture's holder-a holds four GPUs that no source names.
    assert gpu_a["unknownHeld"] == {"nvidia.com/gpu": {"count": 4, "pods": ["default/holder-a"]}}
    # Its twin took gpu-b's four NUMA-0 GPUs; that pod's departure would let this one in.
    assert _by_node(document)["gpu-b"]["whatIf"] == ["default/train-4gpu"]


def test_the_table_names_the_numa_node_and_the_missing_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "train-4gpu-again", *_issue_4998_args()]) == EXIT_OK
    out = capsys.readouterr().out
    assert "numa0 nvidia.com/gpu 3/4" in out
    assert "numa1 nvidia.com/gpu 1/4" in out


def test_a_pod_that_fits_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    document = _explain_json(capsys, "default/train-4gpu", "--as-is", *_issue_4998_args())
    nodes = _by_node(document)
    assert nodes["gpu-b"]["fits"] is True
    assert nodes["gpu-b"]["reason"] == ""
    assert nodes["gpu-a"]["fits"] is False
    assert document["summary"] == "1/2 nodes can take the pod"
    # gpu-b's free GPUs are 0-3, all on NUMA 0 (the fixture's notes): the device provider's best
    # hint is NUMA 0, preferred.
    (gpu_hint,) = [hint for hint in nodes["gpu-b"]["hints"] if hint["resource"] == "nvidia.com/gpu"]
    assert gpu_hint["best"] == "0 (preferred)"
    assert document["placedOn"] is None


def test_a_placed_pod_is_judged_as_if_pending(capsys: pytest.CaptureFixture[str]) -> None:
    document = _explain_json(capsys, "default/train-4gpu", *_issue_4998_args())
    assert document["placedOn"] == "gpu-b"
    assert _by_node(document)["gpu-b"]["fits"] is True


def test_json_shape(capsys: pytest.CaptureFixture[str]) -> None:
    document = _explain_json(capsys, "default/too-big-0")
    assert set(document) == {"pod", "placedOn", "prePredicate", "summary", "nodes"}
    assert document["pod"] == "default/too-big-0"
    assert len(document["nodes"]) == 7
    for entry in document["nodes"]:
        assert set(entry) == NODE_KEYS
        assert isinstance(entry["fits"], bool)
        assert entry["whatIf"] is None or all(isinstance(key, str) and "/" in key for key in entry["whatIf"])
        for view in entry["numa"] or []:
            assert set(view) == {"numa", "holdsAll", "resources"}
            for resource in view["resources"]:
                assert {"resource", "free", "requested"} <= set(resource)


def test_unknown_pod_is_an_input_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "default/no-such-pod"]) == EXIT_INPUT
    assert "default/no-such-pod" in capsys.readouterr().err


def test_bad_policy_annotation_is_refused_before_any_node(capsys: pytest.CaptureFixture[str]) -> None:
    document = _explain_json(capsys, "default/typo-svc")
    assert document["prePredicate"]["passed"] is False
    assert "singel-numa-node" in document["summary"]
    assert document["nodes"] == []


# -- what-if on a node full of small pods --------------------------------------------------------

NODE_CPUS = 10


def _node(name: str, cpus: int, gpus: int = 0, taint: bool = False) -> dict[str, Any]:
    resources = {"cpu": str(cpus), "memory": "64Gi", "pods": "110"}
    if gpus:
        resources["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {}
    if taint:
        spec["taints"] = [{"key": "dedicated", "value": "other", "effect": "NoSchedule"}]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": spec,
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pod(name: str, cpus: int, node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "numasched",
        "containers": [{"name": "main", "image": "pause", "resources": {"requests": {"cpu": str(cpus)}}}],
    }
    status: dict[str, Any] = {"phase": "Pending"}
    if node:
        spec["nodeName"] = node
        status = {"phase": "Running"}
    metadata = {"name": name, "namespace": "default"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


SMALL_PODS = {"p1": 1, "p2": 2, "p3": 3, "p4": 4}


def _explain_objects(objects: list[dict[str, Any]], pod: str, *, with_what_if: bool = True) -> dict[str, Any]:
    registry = default_registry()
    config = load_config(None, registry)
    cache = Cache(("numasched",))
    cluster = SimCluster(cache)
    for obj in objects:
        cluster.add(obj)
    return explain_pod(cache, config, registry, "default", pod, with_what_if=with_what_if)


def _fewest_pods_freeing(needed: int) -> int:
    """Independent oracle: the size of the smallest subset of SMALL_PODS freeing `needed` CPUs."""
    for size in range(1, len(SMALL_PODS) + 1):
        if any(sum(combo) >= needed for combo in itertools.combinations(SMALL_PODS.values(), size)):
            return size
    raise AssertionError("no subset frees enough")


@pytest.mark.parametrize("wanted", [4, 6, 8, 10])
def test_what_if_is_smallest_and_minimal(wanted: int) -> None:
    objects = [_node("full", NODE_CPUS)] + [_pod(name, cpus, "full") for name, cpus in SMALL_PODS.items()]
    objects.append(_pod("wants", wanted))
    verdict = _explain_objects(objects, "wants")["nodes"][0]
    assert verdict["fits"] is False
    found = [key.split("/")[1] for key in verdict["whatIf"]]
    freed = sum(SMALL_PODS[name] for name in found)
    # Enough room once they leave (the node is full: free CPUs are what departs).
    assert freed >= wanted
    assert len(found) == _fewest_pods_freeing(wanted)
    # Minimal: without any one of them, the room is too small.
    for name in found:
        assert freed - SMALL_PODS[name] < wanted


def test_what_if_reports_no_set_when_the_node_is_too_small() -> None:
    objects = [_node("full", NODE_CPUS), _pod("p1", 4, "full"), _pod("wants", NODE_CPUS + 1)]
    verdict = _explain_objects(objects, "wants")["nodes"][0]
    assert verdict["whatIf"] is None
    assert verdict["whatIfNote"]


# -- the grouped summary at 1,000 identical nodes ------------------------------------------------


def _gpu_a_copies(count: int) -> list[dict[str, Any]]:
    """gpu-a of the #4998 fixture (free GPUs split 3 + 1 over two NUMA nodes), renamed."""
    documents = [doc for doc in yaml.safe_load_all((FIXTURES / "cluster.yaml").read_text()) if doc]
    node = next(doc for doc in documents if doc["kind"] == "Node" and doc["metadata"]["name"] == "gpu-a")
    topology = next(doc for doc in documents if doc["kind"] == "Numatopology" and doc["metadata"]["name"] == "gpu-a")
    objects: list[dict[str, Any]] = []
    for index in range(count):
        name = f"gpu-a-{index:04d}"
        for template in (node, topology):
            obj = copy.deepcopy(template)
            obj["metadata"]["name"] = name
            obj["metadata"].setdefault("labels", {})["kubernetes.io/hostname"] = name
            objects.append(obj)
    return objects


def test_summary_groups_one_line_per_reason_at_1000_nodes() -> None:
    objects = _gpu_a_copies(600) + [_node(f"small-{index:04d}", 32, gpus=2) for index in range(400)]
    workload = [doc for doc in yaml.safe_load_all((FIXTURES / "workload.yaml").read_text()) if doc]
    pod = next(doc for doc in workload if doc["metadata"]["name"] == "train-4gpu-again")
    document = _explain_objects([*objects, pod], "train-4gpu-again", with_what_if=False)
    assert len(document["nodes"]) == 1000
    summary = document["summary"]
    head = "0/1000 nodes are available: "
    assert summary.startswith(head)
    numa_reasons = {entry["reason"] for entry in document["nodes"] if entry["node"].startswith("gpu-a-")}
    assert len(numa_reasons) == 1, "identical nodes must give one reason (no node name in it)"
    (numa_reason,) = numa_reasons
    assert "gpu-a" not in numa_reason
    assert summary == f"{head}600 {numa_reason}, 400 Insufficient nvidia.com/gpu."


def test_the_scheduler_failed_scheduling_message_groups_at_1000_nodes() -> None:
    """What the scheduler itself reports (not explain) for the same cluster: one entry per reason."""
    from numasched.scheduler.simulate import simulate
    from numasched.scheduler.simulate_report import build_report

    registry = default_registry()
    config = load_config(None, registry)
    cluster = SimCluster(Cache(("numasched",)))
    for obj in _gpu_a_copies(1000):
        cluster.add(obj)
    workload = [doc for doc in yaml.safe_load_all((FIXTURES / "workload.yaml").read_text()) if doc]
    cluster.add(next(doc for doc in workload if doc["metadata"]["name"] == "train-4gpu-again"))
    anyio.run(lambda: simulate(cluster, config, registry, max_cycles=2, progress=False))
    report = build_report(cluster, cycles=1, seconds=0.0)
    (pod,) = [pod for pod in report.pods if pod.name == "train-4gpu-again"]
    message = pod.reason
    assert message.startswith("0/1000 nodes are available: 1000 ")
    assert message.count("nodes are available") == 1
    assert "gpu-a-" not in message


# -- what-if under single-numa-node: only departures on one NUMA node count ----------------------

# GPU ids per NUMA node on the fixture's machine (its notes: 0-3 on NUMA 0, 4-7 on NUMA 1).
GPU_NUMA = {str(gpu): 0 if gpu < 4 else 1 for gpu in range(8)}
FILLERS = {"g2a": 2, "g2b": 2, "g1a": 1, "g1b": 1, "g1c": 1}


def _gpu_pod(name: str, gpus: int) -> dict[str, Any]:
    amounts = {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "numasched",
            "containers": [
                {"name": "main", "image": "pause", "resources": {"requests": amounts, "limits": dict(amounts)}}
            ],
        },
    }


def _frees_one_numa_node(free_ids: set[str], placed: dict[str, list[str]], leaving: tuple[str, ...]) -> bool:
    """Oracle: 4 GPUs free on one NUMA node once these pods leave (CPUs are plentiful here)."""
    ids = set(free_ids) | {gpu for name in leaving for gpu in placed[name]}
    return any(sum(1 for gpu in ids if GPU_NUMA[gpu] == numa) >= 4 for numa in (0, 1))


def test_what_if_counts_only_departures_that_align() -> None:
    from numasched.scheduler.simulate import simulate
    from numasched.scheduler.simulate_report import build_report

    (node, topology) = _gpu_a_copies(1)
    topology["spec"]["numares"]["nvidia.com/gpu"]["allocatable"] = "0-7"
    topology["spec"]["numares"]["cpu"]["allocatable"] = "0-31"
    registry = default_registry()
    config = load_config(None, registry)
    cache = Cache(("numasched",))
    cluster = SimCluster(cache)
    for obj in (node, topology, *(_gpu_pod(name, gpus) for name, gpus in FILLERS.items())):
        cluster.add(obj)
    anyio.run(lambda: simulate(cluster, config, registry, max_cycles=5, progress=False))
    report = build_report(cluster, cycles=1, seconds=0.0)
    placed = {pod.name: list(pod.devices.get("nvidia.com/gpu", ())) for pod in report.pods if pod.status == "Bound"}
    assert set(placed) == set(FILLERS)
    free_ids = set(GPU_NUMA) - {gpu for ids in placed.values() for gpu in ids}
    cluster.add(_gpu_pod("wants-4", 4))

    verdict = explain_pod(cache, config, registry, "default", "wants-4")["nodes"][0]
    assert verdict["fits"] is False
    found = tuple(key.split("/")[1] for key in verdict["whatIf"])
    assert _frees_one_numa_node(free_ids, placed, found)
    fewest = next(
        size
        for size in range(1, len(placed) + 1)
        if any(_frees_one_numa_node(free_ids, placed, combo) for combo in itertools.combinations(placed, size))
    )
    assert len(found) == fewest
    for name in found:
        assert not _frees_one_numa_node(free_ids, placed, tuple(other for other in found if other != name))


def test_explain_pod_takes_the_cache_or_a_snapshot_of_it() -> None:
    """The console takes the snapshot on its event loop and explains it in a worker thread."""
    objects = [_node("full", NODE_CPUS)] + [_pod(name, cpus, "full") for name, cpus in SMALL_PODS.items()]
    objects.append(_pod("wants", 6))
    registry = default_registry()
    config = load_config(None, registry)
    cache = Cache(("numasched",))
    cluster = SimCluster(cache)
    for obj in objects:
        cluster.add(obj)
    from_snapshot = explain_pod(cache.snapshot(), config, registry, "default", "wants")
    assert from_snapshot == explain_pod(cache, config, registry, "default", "wants")
    assert from_snapshot["nodes"][0]["whatIf"] is not None
