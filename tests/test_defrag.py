"""`numasched defrag`: plans on generated fragmented clusters, checked by applying them in the
simulator and counting the free aligned blocks with a count written here (from the pods' specs and
allocation annotations and the machine's layout, not through the scheduler); PodDisruptionBudgets,
priorities, the shape syntax and the command line."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from conftest import load_hack_module
from hypothesis import given, settings
from hypothesis import strategies as st

from numasched.api.idset import IdSet
from numasched.api.resource import Resource
from numasched.api.task import TaskInfo, TaskStatus
from numasched.api.topology import TopologyPolicy
from numasched.cache.cache import Cache
from numasched.cache.convert_pdb import ConversionError
from numasched.cache.eviction import EvictRequest, EvictStatus
from numasched.cache.sim_evictor import SimEvictor
from numasched.cache.simcluster import SimCluster
from numasched.cli import build_parser
from numasched.cli_exit_codes import EXIT_INPUT, EXIT_OK, EXIT_USAGE
from numasched.logconfig import configure_logging
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.defrag import (
    DefragOptions,
    Plan,
    ShapeError,
    defrag_in_cache,
    disruptions_left,
    parse_shape,
)
from numasched.scheduler.defrag_command import budget_for_eviction, read_budgets, run_defrag
from numasched.scheduler.simulate import load_config, simulate

GEN = load_hack_module("gen_fragmented_cluster")
GPU = "nvidia.com/gpu"
SHAPE_8 = "8xnvidia.com/gpu"
# The DGX-1 layout (tests/fixtures/machines/dgx1-v100.yaml): GPUs 0-3 on NUMA 0, 4-7 on NUMA 1;
# CPUs 0-19,40-59 on NUMA 0 and 20-39,60-79 on NUMA 1. machine_objects reserves 2 CPUs, the first
# core of socket 0: CPUs 0 and 40.
GPUS_ON = {0: {"0", "1", "2", "3"}, 1: {"4", "5", "6", "7"}}
CPUS_ON = {0: set(range(0, 20)) | set(range(40, 60)), 1: set(range(20, 40)) | set(range(60, 80))}
RESERVED = {0, 40}


@pytest.fixture(autouse=True)
def quiet_logs() -> None:
    # As the command line sets it up: warnings only, on stderr (stdout is the plan).
    configure_logging("warning", "console")


def registry_and_config() -> tuple[Any, Any]:
    registry = default_registry()
    return registry, load_config(None, registry)


def load(documents: Sequence[Mapping[str, Any]]) -> SimCluster:
    cluster = SimCluster(Cache(("numasched",)))
    for document in documents:
        cluster.add(document)
    assert not cluster.load_problems, cluster.load_problems
    return cluster


def held_ids(cluster: SimCluster) -> dict[str, tuple[set[int], set[str]]]:
    """Per node: the CPUs and GPUs the bound pods' allocation annotations name."""
    held: dict[str, tuple[set[int], set[str]]] = {name: (set(), set()) for name in cluster.objects["Node"]}
    for pod in cluster.pods():
        node = pod["spec"].get("nodeName")
        text = (pod["metadata"].get("annotations") or {}).get("numasched.io/allocation")
        if not node or not text:
            continue
        for container in json.loads(text)["containers"].values():
            held[node][0].update(IdSet.parse(container.get("cpuset", "")))
            held[node][1].update(container.get("devices", {}).get(GPU, []))
    return held


def gpus_requested(cluster: SimCluster) -> dict[str, int]:
    used = {name: 0 for name in cluster.objects["Node"]}
    for pod in cluster.pods():
        node = pod["spec"].get("nodeName")
        if node:
            for container in pod["spec"]["containers"]:
                used[node] += int(container["resources"]["limits"].get(GPU, 0))
    return used


def independent_blocks(cluster: SimCluster, shape: str) -> int:
    """Free blocks under the restricted policy, counted from the objects alone.

    8 GPUs: a node whose pods request no GPU at all (the block spans both NUMA nodes, which
    restricted admits since no fewer NUMA nodes hold 8 GPUs). 4 GPUs and 32 pinned CPUs: per NUMA
    node, as many as both its free GPUs (by 4) and its free CPUs (by 32) allow (restricted wants
    the narrowest hint, one NUMA node, for both)."""
    if shape == "8xnvidia.com/gpu":
        return sum(1 for used in gpus_requested(cluster).values() if used == 0)
    assert shape == "4xnvidia.com/gpu,32xcpu"
    total = 0
    for cpus, gpus in held_ids(cluster).values():
        for numa in (0, 1):
            free_gpus = len(GPUS_ON[numa] - gpus)
            free_cpus = len(CPUS_ON[numa] - RESERVED - cpus)
            total += min(free_gpus // 4, free_cpus // 32)
    return total


def every_node_pinned(workload: Sequence[Mapping[str, Any]]) -> bool:
    """Every node holds a pod that may not move (the high-priority class) or two pods of the
    serving budget, which lets one go: no node can be emptied for an 8-GPU block."""
    high: set[str] = set()
    serving: dict[str, int] = {}
    nodes: set[str] = set()
    for pod in workload:
        if pod["kind"] != "Pod":
            continue
        node = pod["spec"]["nodeName"]
        nodes.add(node)
        if pod["spec"].get("priorityClassName") == GEN.HIGH_PRIORITY:
            high.add(node)
        if pod["metadata"]["labels"]["app"] == "serving":
            serving[node] = serving.get(node, 0) + 1
    return all(node in high or serving.get(node, 0) >= 2 for node in nodes)


async def apply_in_simulation(cluster: SimCluster, plan: Plan, config: Any, registry: Any) -> None:
    """Apply the plan move by move, as --apply does: evict the pod, let its controller's
    replacement (the same spec, pinned by a hostname nodeSelector to the destination the plan
    predicts) be scheduled, check it landed there, then the next move."""
    evictor = SimEvictor(cluster)
    for move in plan.moves:
        original = cluster.objects["Pod"][move.pod]
        nodes = cluster.cache.snapshot().nodes.values()
        task = next(task for node in nodes for task in node.tasks.values() if task.uid == move.uid)
        outcome = await evictor.evict(EvictRequest(task, move.node, "defrag test"))
        assert outcome.status is EvictStatus.EVICTED
        replacement = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": original["metadata"]["name"] + "-r",
                "namespace": original["metadata"]["namespace"],
                "labels": dict(original["metadata"].get("labels") or {}),
                "ownerReferences": original["metadata"].get("ownerReferences"),
            },
            "spec": {
                **{key: value for key, value in original["spec"].items() if key != "nodeName"},
                "nodeSelector": {"kubernetes.io/hostname": move.destination},
            },
        }
        cluster.add(replacement)
        await simulate(cluster, config, registry, max_cycles=5, progress=False)
        assert cluster.objects["Pod"][f"{move.pod}-r"]["spec"].get("nodeName") == move.destination, move


def plan_for(cluster: SimCluster, shape: str, **options: Any) -> Plan:
    registry, config = registry_and_config()
    budgets = [budget_for_eviction(obj)[0] for obj in cluster.objects["PodDisruptionBudget"].values()]
    return defrag_in_cache(
        cluster.cache,
        config,
        registry,
        parse_shape(shape),
        scheduler_name="numasched",
        budgets=budgets,
        options=DefragOptions(**options),
    )


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("shape", ["8xnvidia.com/gpu", "4xnvidia.com/gpu,32xcpu"])
def test_applying_the_plan_frees_exactly_the_promised_blocks(seed: int, shape: str) -> None:
    cluster_docs, workload = GEN.fragmented_cluster(seed, 6)
    cluster = load([*cluster_docs, *workload])
    plan = plan_for(cluster, shape)
    before = independent_blocks(cluster, shape)
    assert plan.blocks_before == before == 0  # the generator leaves no block of either shape
    if shape == "8xnvidia.com/gpu" and every_node_pinned(workload):
        assert plan.freed == 0 and not plan.moves
        return
    assert plan.freed > 0 and plan.moves
    registry, config = registry_and_config()
    anyio.run(apply_in_simulation, cluster, plan, config, registry)
    assert independent_blocks(cluster, shape) == before + plan.freed
    # No plan considered with fewer moves frees as many blocks.
    assert not [option for option in plan.considered if option.moves < len(plan.moves) and option.freed >= plan.freed]
    assert any(option.moves == len(plan.moves) and option.freed == plan.freed for option in plan.considered)
    # Stranded GPUs: free GPUs outside any block, counted here from the objects.
    per_block = 8 if shape.startswith("8x") else 4
    free_gpus = sum(8 - used for used in gpus_requested(cluster).values())
    assert plan.stranded_after[GPU] == free_gpus - per_block * (before + plan.freed)


def test_priorities_and_budgets_are_respected() -> None:
    cluster_docs, workload = GEN.fragmented_cluster(1, 6)
    cluster = load([*cluster_docs, *workload])
    high = {
        f"default/{pod['metadata']['name']}"
        for pod in workload
        if pod["kind"] == "Pod" and pod["spec"].get("priorityClassName") == GEN.HIGH_PRIORITY
    }
    serving = {
        f"default/{pod['metadata']['name']}"
        for pod in workload
        if pod["kind"] == "Pod" and pod["metadata"]["labels"]["app"] == "serving"
    }
    assert high and len(serving) > 1
    for shape in ("8xnvidia.com/gpu", "4xnvidia.com/gpu,32xcpu"):
        plan = plan_for(cluster, shape)
        moved = {move.pod for move in plan.moves}
        assert not moved & high
        assert len(moved & serving) <= 1  # the budget's maxUnavailable
        assert plan.kept["priority above --max-priority"] >= 1
        # Raising --max-priority to the class's value lets those pods move.
        raised = plan_for(cluster, shape, max_priority=1000)
        assert "priority above --max-priority" not in raised.kept


def test_a_budget_allowing_nothing_keeps_its_pods() -> None:
    cluster_docs, workload = GEN.fragmented_cluster(2, 6)
    for document in workload:
        if document["kind"] == "PodDisruptionBudget":
            document["spec"] = {"minAvailable": "100%", "selector": {"matchLabels": {"app": "serving"}}}
    cluster = load([*cluster_docs, *workload])
    plan = plan_for(cluster, "8xnvidia.com/gpu")
    serving = {
        f"default/{pod['metadata']['name']}"
        for pod in workload
        if pod["kind"] == "Pod" and pod["metadata"]["labels"]["app"] == "serving"
    }
    assert not {move.pod for move in plan.moves} & serving


@pytest.mark.parametrize(("namespace", "moves"), [("default", False), ("elsewhere", True)])
def test_an_empty_selector_covers_every_pod_of_its_namespace(namespace: str, moves: bool) -> None:
    """policy/v1 (and so the Eviction API --apply goes through): an empty selector selects all
    pods of the budget's namespace; every generated pod is in "default"."""
    cluster_docs, workload = GEN.fragmented_cluster(1, 6)
    for document in workload:
        if document["kind"] == "PodDisruptionBudget":
            document["metadata"]["namespace"] = namespace
            document["spec"] = {"selector": {}, "maxUnavailable": 0}
    cluster = load([*cluster_docs, *workload])
    assert bool(plan_for(cluster, SHAPE_8).moves) is moves


def test_max_moves_bounds_the_plan_and_blocks_stop_early() -> None:
    cluster_docs, workload = GEN.fragmented_cluster(3, 6)
    cluster = load([*cluster_docs, *workload])
    full = plan_for(cluster, "4xnvidia.com/gpu,32xcpu")
    one = plan_for(cluster, "4xnvidia.com/gpu,32xcpu", wanted_blocks=1)
    assert one.freed >= 1 and len(one.moves) <= len(full.moves)
    # The cheapest single block: no considered plan frees one with fewer moves.
    assert all(option.moves >= len(one.moves) for option in one.considered if option.freed >= 1)
    capped = plan_for(cluster, "4xnvidia.com/gpu,32xcpu", max_moves=1)
    assert len(capped.moves) <= 1


def test_bare_pods_daemonsets_and_gang_members_stay() -> None:
    cluster_docs, workload = GEN.fragmented_cluster(1, 6)
    pods = [document for document in workload if document["kind"] == "Pod"]
    for pod in pods:
        if pod["metadata"]["labels"]["app"] == "batch-a":
            del pod["metadata"]["ownerReferences"]
        elif pod["metadata"]["labels"]["app"] == "batch-b":
            pod["metadata"]["ownerReferences"][0]["kind"] = "DaemonSet"
    cluster = load([*cluster_docs, *workload])
    plan = plan_for(cluster, "8xnvidia.com/gpu")
    apps = {f"default/{p['metadata']['name']}": p["metadata"]["labels"]["app"] for p in pods}
    assert {apps[move.pod] for move in plan.moves} <= {"serving"}
    assert plan.kept["no controller (an eviction would delete it)"] >= 1
    assert plan.kept["DaemonSet pod"] >= 1


@pytest.mark.parametrize(
    ("text", "amounts"),
    [
        ("8xnvidia.com/gpu", (("nvidia.com/gpu", "8"),)),
        ("4xnvidia.com/gpu,32xcpu", (("nvidia.com/gpu", "4"), ("cpu", "32"))),
        ("2 x nvidia.com/gpu, 64Gixmemory", (("nvidia.com/gpu", "2"), ("memory", "64Gi"))),
    ],
)
def test_shapes_are_read(text: str, amounts: tuple[tuple[str, str], ...]) -> None:
    assert parse_shape(text).amounts == amounts


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("8", "is not COUNTxRESOURCE"),
        ("xnvidia.com/gpu", "is not COUNTxRESOURCE"),
        ("0xnvidia.com/gpu", "must be more than 0"),
        ("4xcpu,2xcpu", "cpu is given twice"),
        ("4Qxcpu", "is not a quantity"),
    ],
)
def test_bad_shapes_are_named(text: str, says: str) -> None:
    with pytest.raises(ShapeError, match=says):
        parse_shape(text)


def pods(namespace: str, labels: dict[str, str], running: int, bound: int = 0) -> list[TaskInfo]:
    """Placed pods: `running` of them running (healthy), `bound` bound but not yet running."""
    made: list[TaskInfo] = []
    for index in range(running + bound):
        name = f"{namespace}-{'-'.join(labels.values())}-{index}"
        task = TaskInfo(name, namespace, name, "job", Resource(), Resource(), labels=dict(labels))
        task.status = TaskStatus.RUNNING if index < running else TaskStatus.BOUND
        made.append(task)
    return made


@pytest.mark.parametrize(
    ("spec", "status", "matched", "healthy", "allowed"),
    [
        ({"minAvailable": 2}, None, 4, 4, 2),
        ({"minAvailable": "50%"}, None, 3, 3, 1),  # ceil(1.5) = 2 must stay
        ({"maxUnavailable": 1}, None, 4, 4, 1),
        ({"maxUnavailable": "30%"}, None, 4, 3, 1),  # desired 4 - ceil(1.2) = 2; 3 healthy
        ({"maxUnavailable": 1}, None, 4, 3, 0),  # one is bound, not running yet: already down
        # policy/v1 defaults neither field: the controller then wants none healthy.
        ({}, None, 3, 3, 3),
        ({"maxUnavailable": 1}, {"disruptionsAllowed": 0}, 4, 4, 0),  # the controller's count wins
        ({"minAvailable": 4}, {"disruptionsAllowed": 2}, 4, 4, 2),  # ... both ways
        ({"minAvailable": "lots"}, None, 4, 4, 0),  # unreadable: nothing allowed
        ({"minAvailable": "lots"}, {"disruptionsAllowed": 3}, 4, 4, 0),  # ... whatever the status says
        ({"minAvailable": "2"}, None, 4, 4, 0),  # a quoted number is not an intstr the controller reads
        ({"minAvailable": 1, "maxUnavailable": 1}, None, 4, 4, 0),
        ({"minAvailable": 1}, {"disruptionsAllowed": -1}, 4, 4, 0),
    ],
)
def test_budget_arithmetic(
    spec: dict[str, Any], status: dict[str, Any] | None, matched: int, healthy: int, allowed: int
) -> None:
    obj: dict[str, Any] = {
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "b", "namespace": "ns"},
        "spec": {**spec, "selector": {"matchLabels": {"app": "x"}}},
    }
    if status is not None:
        obj["status"] = status
    budget, _ = budget_for_eviction(obj)
    # Pods of other apps, and of the app in another namespace, count for nothing.
    tasks = [
        *pods("ns", {"app": "x"}, healthy, matched - healthy),
        *pods("ns", {"app": "y"}, 5),
        *pods("o", {"app": "x"}, 5),
    ]
    assert disruptions_left([budget], tasks) == {"ns/b": allowed}


def budget_object(spec: Any) -> dict[str, Any]:
    return {"kind": "PodDisruptionBudget", "metadata": {"name": "b", "namespace": "ns"}, "spec": spec}


def test_budget_selectors() -> None:
    budget, problems = budget_for_eviction(
        budget_object(
            {
                "selector": {
                    "matchLabels": {"app": "x"},
                    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}],
                }
            }
        )
    )
    assert problems == []
    assert budget.matches("ns", {"app": "x", "tier": "a"})
    assert not budget.matches("ns", {"app": "x", "tier": "c"})
    assert not budget.matches("other", {"app": "x", "tier": "a"})
    # policy/v1: an empty selector selects every pod of the namespace, a missing (null) one none.
    empties: list[dict[str, Any]] = [{}, {"matchLabels": {}, "matchExpressions": []}]
    for empty in empties:
        everything, problems = budget_for_eviction(budget_object({"selector": empty, "maxUnavailable": 1}))
        assert problems == [] and everything.matches("ns", {}) and everything.matches("ns", {"app": "y"})
        assert not everything.matches("other", {})
        assert everything.disruptions_allowed is None  # computed from the pods, as for any budget
    for missing in ({}, {"selector": None, "minAvailable": 1}):
        nothing, problems = budget_for_eviction(budget_object(missing))
        assert problems == [] and not nothing.matches("ns", {})


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"selector": {"matchExpressions": [{"key": "k", "operator": "Near"}]}}, "spec.selector.matchExpressions[0]"),
        ({"selector": "app=x", "maxUnavailable": 1}, "spec.selector"),
        ({"selector": {"matchLabels": ["app"]}}, "spec.selector.matchLabels"),
        ("app=x", "spec"),
    ],
)
def test_a_selector_that_cannot_be_read_holds_the_whole_namespace(
    spec: Any, field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Which pods such a budget means cannot be told: none of its namespace moves."""
    budget, problems = budget_for_eviction(budget_object(spec))
    assert problems and problems[0].startswith(field), problems
    assert budget.matches("ns", {}) and budget.matches("ns", {"app": "x"}) and not budget.matches("other", {})
    assert disruptions_left([budget], pods("ns", {"app": "x"}, 4)) == {"ns/b": 0}
    read_budgets([budget_object(spec)])
    assert "For defrag it allows no disruption: all pods of namespace ns stay" in capsys.readouterr().err


def test_a_budget_without_a_name_is_named_and_skipped(capsys: pytest.CaptureFixture[str]) -> None:
    nameless = {"kind": "PodDisruptionBudget", "metadata": {"namespace": "ns"}, "spec": {}}
    with pytest.raises(ConversionError, match=r"metadata\.name is missing"):
        budget_for_eviction(nameless)
    read = read_budgets([nameless, budget_object({"selector": {}, "maxUnavailable": 0})])
    assert [budget.key for budget in read] == ["ns/b"]
    assert "PodDisruptionBudget <unknown>: metadata.name is missing; skipped" in capsys.readouterr().err


def _write_dump(tmp_path: Any, seed: int) -> tuple[str, str]:
    cluster_docs, workload = GEN.fragmented_cluster(seed, 6, policy=TopologyPolicy.RESTRICTED, pending=1)
    cluster_file, workload_file = tmp_path / "cluster.yaml", tmp_path / "workload.yaml"
    cluster_file.write_text(yaml.safe_dump_all(cluster_docs))
    workload_file.write_text(yaml.safe_dump_all(workload))
    return str(cluster_file), str(workload_file)


def _run(*argv: str) -> int:
    arguments = ["defrag", *argv]
    return int(anyio.run(run_defrag, build_parser(arguments).parse_args(arguments)))


def test_the_command_prints_a_json_plan(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    cluster_file, workload_file = _write_dump(tmp_path, 1)
    code = _run(
        "--shape", "8xnvidia.com/gpu", "--shape", "4xnvidia.com/gpu,32xcpu",
        "--cluster", cluster_file, "--workload", workload_file, "--output", "json",
    )  # fmt: skip
    assert code == EXIT_OK
    document = json.loads(capsys.readouterr().out)
    assert document["kind"] == "DefragPlan"
    assert [plan["shape"] for plan in document["plans"]] == ["8xnvidia.com/gpu", "4xnvidia.com/gpu,32xcpu"]
    for plan in document["plans"]:
        assert plan["blocksFreed"] == plan["blocksAfter"] - plan["blocksBefore"] > 0
        assert [move["step"] for move in plan["moves"]] == list(range(1, len(plan["moves"]) + 1))
        assert all(move["from"] != move["to"] for move in plan["moves"])


def test_the_table_names_the_moves(tmp_path: Any, capsys: pytest.CaptureFixture[str]) -> None:
    cluster_file, workload_file = _write_dump(tmp_path, 2)
    assert _run("--shape", "8xnvidia.com/gpu", "--cluster", cluster_file, "--workload", workload_file) == EXIT_OK
    out = capsys.readouterr().out
    assert "shape 8xnvidia.com/gpu: 0 free block(s) now" in out
    assert "EVICT POD" in out and "PREDICTED TO" in out


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--shape", "eight GPUs"], "is not COUNTxRESOURCE"),
        (["--shape", "8xnvidia.com/gpu", "--apply"], "--apply needs --kubeconfig"),
        (["--shape", "8xnvidia.com/gpu", "--max-moves", "0"], "--max-moves must be at least 1"),
        (["--shape", "8xnvidia.com/gpu", "--blocks", "0"], "--blocks must be at least 1"),
    ],
)
def test_bad_command_lines_are_usage_errors(argv: list[str], says: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(*argv) == EXIT_USAGE
    assert says in capsys.readouterr().err


def test_the_documented_dump_is_the_generators_output() -> None:
    """tests/fixtures/defrag (docs/defrag.md, docs/explain.md) is what the generator writes."""
    cluster_docs, workload = GEN.fragmented_cluster(1, 6, pending=1)
    fixtures = Path(__file__).parent / "fixtures" / "defrag"
    for name, documents in (("cluster.yaml", cluster_docs), ("workload.yaml", workload)):
        stored = [document for document in yaml.safe_load_all((fixtures / name).read_text()) if document]
        assert stored == documents, f"regenerate {name}: hack/gen_fragmented_cluster.py --seed 1 --nodes 6"


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(
    spec=st.dictionaries(st.sampled_from(["selector", "minAvailable", "maxUnavailable", "junk"]), _JSON, max_size=3),
    status=_JSON,
    labels=st.dictionaries(st.sampled_from(["app", "tier"]), st.sampled_from(["x", "a"]), max_size=2),
)
def test_any_budget_object_is_read_without_raising(spec: Any, status: Any, labels: dict[str, str]) -> None:
    budget, problems = budget_for_eviction(budget_object(spec) | {"status": status})
    allowed = disruptions_left([budget], pods("ns", labels, 2, 1))["ns/b"]
    assert allowed >= 0
    if problems:
        assert allowed == 0
    budget.matches("ns", labels)


def test_an_unreadable_budget_is_named_and_keeps_its_pods(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cluster_docs, workload = GEN.fragmented_cluster(1, 6)
    for document in workload:
        if document["kind"] == "PodDisruptionBudget":
            document["spec"] = {"maxUnavailable": "one", "selector": {"matchLabels": {"app": "serving"}}}
    cluster_file, workload_file = tmp_path / "cluster.yaml", tmp_path / "workload.yaml"
    cluster_file.write_text(yaml.safe_dump_all(cluster_docs))
    workload_file.write_text(yaml.safe_dump_all(workload))
    code = _run(
        "--shape", SHAPE_8, "--cluster", str(cluster_file), "--workload", str(workload_file), "--output", "json"
    )
    captured = capsys.readouterr()
    assert code == EXIT_OK
    assert "PodDisruptionBudget default/serving: spec.maxUnavailable: expected a non-negative integer" in captured.err
    assert "'one'" in captured.err and "the pods it selects stay where they are" in captured.err
    serving = {f"default/{p['metadata']['name']}" for p in workload if p.get("kind") == "Pod"
               and p["metadata"]["labels"]["app"] == "serving"}  # fmt: skip
    assert not {move["pod"] for move in json.loads(captured.out)["plans"][0]["moves"]} & serving


def test_a_missing_input_file_is_an_input_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run("--shape", SHAPE_8, "--cluster", str(tmp_path / "absent.yaml")) == EXIT_INPUT
    assert "absent.yaml" in capsys.readouterr().err


def test_a_cluster_without_the_resource_has_no_plan(capsys: pytest.CaptureFixture[str]) -> None:
    # The bundled example has no amd.com/gpu at all: nothing to free, nothing to move.
    assert _run("--shape", "2xamd.com/gpu", "--output", "json") == EXIT_OK
    plan = json.loads(capsys.readouterr().out)["plans"][0]
    assert plan["blocksBefore"] == plan["blocksAfter"] == 0 and plan["moves"] == []


@pytest.mark.parametrize("references", [7, {"kind": "ReplicaSet", "controller": True}, ["x"], [{"controller": "yes"}]])
def test_malformed_owner_references_keep_the_pod(references: Any) -> None:
    cluster_docs, workload = GEN.fragmented_cluster(1, 6)
    pods = [document for document in workload if document["kind"] == "Pod"]
    for pod in pods:
        pod["metadata"]["ownerReferences"] = references
    cluster = load([*cluster_docs, *workload])
    plan = plan_for(cluster, SHAPE_8)
    assert not plan.moves
    assert plan.kept["no controller (an eviction would delete it)"] == sum(
        1 for pod in pods if pod["spec"].get("priorityClassName") != GEN.HIGH_PRIORITY
    )
