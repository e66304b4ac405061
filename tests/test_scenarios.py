"""Scenarios: the real scheduler loop on clusters built from the machine fixtures, asserting exact
placements (and exact reasons when there is none)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import anyio
import pytest
from conftest import load_machine

from numasched.api.allocation import (
    ALLOCATION_ANNOTATION,
    ContainerAllocation,
    PodAllocation,
    allocation_from_json,
    allocation_to_json,
)
from numasched.api.idset import IdSet
from numasched.api.topology import TopologyPolicy, TopologyScope
from numasched.cache.cache import Cache
from numasched.cache.machine_shapes import machine_objects
from numasched.cache.simcluster import SimCluster
from numasched.conf.loader import load_config_text
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.loop import schedule_cycle
from numasched.scheduler.simulate import simulate

CONFIG = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
  - name: nodeorder
  - name: numa-aware
    arguments:
      weight: 10
      devices: ["nvidia.com/gpu", "rdma/hca"]
"""


def pod(
    name: str,
    *,
    cpu: int | str = 2,
    gpu: int = 0,
    nic: int = 0,
    node: str = "",
    allocation: PodAllocation | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": str(cpu), "memory": "4Gi"}
    if gpu:
        requests["nvidia.com/gpu"] = str(gpu)
    if nic:
        requests["rdma/hca"] = str(nic)
    metadata: dict[str, Any] = {"name": name, "namespace": "default", "annotations": dict(annotations or {})}
    if allocation is not None:
        metadata["annotations"][ALLOCATION_ANNOTATION] = allocation_to_json(allocation)
    spec: dict[str, Any] = {
        "schedulerName": "numasched",
        "containers": [{"name": "main", "resources": {"requests": requests, "limits": dict(requests)}}],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def holding(node: str, name: str, gpus: Iterable[str] = (), cpus: str = "") -> dict[str, Any]:
    """A pod already running on `node` that holds these GPUs and CPUs."""
    gpu_ids = tuple(gpus)
    allocation = PodAllocation(
        (ContainerAllocation("main", IdSet.parse(cpus), devices={"nvidia.com/gpu": gpu_ids} if gpu_ids else {}),)
    )
    # Without pinned CPUs of its own the holder runs in the shared pool (half a CPU): a Guaranteed
    # pod with whole CPUs and no cpuset would hold CPUs whose ids nobody knows.
    cpu_count: int | str = len(IdSet.parse(cpus)) or "500m"
    return pod(name, cpu=cpu_count, gpu=len(gpu_ids), node=node, allocation=allocation)


def cluster_of(
    nodes: list[tuple[str, str, TopologyPolicy]],
    pods: list[dict[str, Any]],
    scope: TopologyScope = TopologyScope.CONTAINER,
) -> SimCluster:
    cluster = SimCluster(Cache())
    for node_name, machine, policy in nodes:
        node, topology = machine_objects(load_machine(machine), node_name, topology_policy=policy, topology_scope=scope)
        cluster.add(node)
        cluster.add(topology)
    for obj in pods:
        cluster.add(obj)
    return cluster


def run(cluster: SimCluster) -> None:
    registry = default_registry()
    config = load_config_text(CONFIG, "test", registry.known_plugin_names(), registry.known_action_names())
    anyio.run(lambda: simulate(cluster, config, registry, max_cycles=20, progress=False))


def placed(cluster: SimCluster, name: str) -> tuple[str, PodAllocation | None]:
    obj = cluster.objects["Pod"][f"default/{name}"]
    node = obj["spec"].get("nodeName", "")
    text = obj["metadata"].get("annotations", {}).get(ALLOCATION_ANNOTATION)
    return node, allocation_from_json(text) if text and node else None


def reason(cluster: SimCluster, name: str) -> str:
    messages = [e.message for e in cluster.events if e.name == f"default/{name}" and e.reason == "FailedScheduling"]
    return messages[-1] if messages else ""


def test_volcano_issue_4998_four_gpus_go_where_one_numa_node_has_them() -> None:
    # Node A: GPUs 0-2 and 7 free (3 + 1 across NUMA nodes); node B: GPUs 0-3 free on NUMA 0.
    cluster = cluster_of(
        [("node-a", "pcie-8gpu-2numa", TopologyPolicy.SINGLE_NUMA_NODE)] * 1
        + [("node-b", "pcie-8gpu-2numa", TopologyPolicy.SINGLE_NUMA_NODE)],
        [
            holding("node-a", "busy-a", gpus=["3", "4", "5", "6"]),
            holding("node-b", "busy-b", gpus=["4", "5", "6", "7"]),
            pod("train", cpu=8, gpu=4),
        ],
    )
    run(cluster)
    node, allocation = placed(cluster, "train")
    assert node == "node-b"
    assert allocation is not None
    assert allocation.devices("nvidia.com/gpu") == {"0", "1", "2", "3"}
    assert allocation.numa().ids() == [0]
    assert all(cpu < 32 or 64 <= cpu < 96 for cpu in allocation.cpus())


def test_cpus_and_gpus_land_on_the_same_numa_node() -> None:
    cluster = cluster_of(
        [("dgx", "dgx1-v100", TopologyPolicy.SINGLE_NUMA_NODE)],
        [holding("dgx", "busy", gpus=["0", "1", "2"]), pod("infer", cpu=8, gpu=2)],
    )
    run(cluster)
    node, allocation = placed(cluster, "infer")
    assert node == "dgx" and allocation is not None
    # NUMA 0 has one free GPU left, so both GPUs and all CPUs go to NUMA 1, as an NV2 pair (4-7 or 5-6).
    assert allocation.numa().ids() == [1]
    assert allocation.devices("nvidia.com/gpu") in ({"4", "7"}, {"5", "6"})
    numa1 = IdSet.parse("20-39,60-79")
    assert allocation.cpus().is_subset(numa1) and len(allocation.cpus()) == 8


@pytest.mark.parametrize(
    ("policy", "admitted"),
    [
        (TopologyPolicy.BEST_EFFORT, True),
        (TopologyPolicy.RESTRICTED, False),
        (TopologyPolicy.SINGLE_NUMA_NODE, False),
    ],
)
def test_a_pod_that_fits_only_across_numa_nodes(policy: TopologyPolicy, admitted: bool) -> None:
    # Two GPUs busy on each NUMA node: four GPUs fit only across both, although one NUMA node
    # could hold four; the kubelet's hint is not preferred, so only best-effort admits it.
    cluster = cluster_of(
        [("l40s", "pcie-8gpu-2numa", policy)],
        [holding("l40s", "busy", gpus=["0", "1", "4", "5"]), pod("wide", cpu=4, gpu=4)],
    )
    run(cluster)
    node, allocation = placed(cluster, "wide")
    if admitted:
        assert node == "l40s" and allocation is not None
        assert allocation.devices("nvidia.com/gpu") == {"2", "3", "6", "7"}
    else:
        assert node == ""
        message = reason(cluster, "wide")
        assert message.startswith("0/1 nodes are available: 1 ")
        assert "nvidia.com/gpu 4" in message and "free per NUMA: 0->2, 1->2" in message, message


def test_a_burst_in_one_cycle_never_assigns_a_cpu_or_device_twice() -> None:
    pods = [pod(f"svc-{i}", cpu=2 + i % 3, gpu=i % 2) for i in range(60)]
    cluster = cluster_of(
        [
            ("dgx", "dgx1-v100", TopologyPolicy.SINGLE_NUMA_NODE),
            ("hgx", "hgx-h100", TopologyPolicy.RESTRICTED),
        ],
        pods,
    )
    registry = default_registry()
    config = load_config_text(CONFIG, "test", registry.known_plugin_names(), registry.known_action_names())
    anyio.run(lambda: schedule_cycle(cluster.cache, config, registry, cluster, cluster))
    seen_cpus: dict[str, set[int]] = {}
    seen_gpus: dict[str, set[str]] = {}
    bound = 0
    for i in range(60):
        node, allocation = placed(cluster, f"svc-{i}")
        if not node:
            continue
        bound += 1
        assert allocation is not None
        cpus = set(allocation.cpus())
        gpus = set(allocation.devices("nvidia.com/gpu"))
        assert not cpus & seen_cpus.setdefault(node, set()), f"svc-{i} reuses CPUs on {node}"
        assert not gpus & seen_gpus.setdefault(node, set()), f"svc-{i} reuses GPUs on {node}"
        seen_cpus[node] |= cpus
        seen_gpus[node] |= gpus
    # 16 GPUs for 30 GPU pods: all CPU-only pods and 16 GPU pods fit in the one cycle.
    assert bound == 46


def test_gpu_and_nic_pairs_share_a_pcie_switch_on_hgx() -> None:
    cluster = cluster_of(
        [("hgx", "hgx-h100", TopologyPolicy.SINGLE_NUMA_NODE)],
        [holding("hgx", "busy", gpus=["0"]), pod("rdma", cpu=16, gpu=2, nic=2)],
    )
    run(cluster)
    node, allocation = placed(cluster, "rdma")
    assert node == "hgx" and allocation is not None
    gpus = sorted(allocation.devices("nvidia.com/gpu"))
    nics = sorted(allocation.devices("rdma/hca"))
    assert [f"mlx5_{g}" for g in gpus] == nics
    assert allocation.numa().count() == 1


def test_the_bundled_example_places_what_it_should(capsys: pytest.CaptureFixture[str]) -> None:
    from numasched.cli import main

    assert main(["simulate", "--output", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    pods = {p["name"]: p for p in report["pods"]}
    assert pods["rdma-finetune-0"]["node"] == "hgx-1"
    assert pods["rdma-finetune-0"]["devices"] == {
        "nvidia.com/gpu": ["0", "1", "2", "3"],
        "rdma/hca": ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"],
    }
    assert {pods["llm-train-0"]["node"], pods["llm-train-1"]["node"]} == {"hgx-0", "a100-0"}
    assert all(pods[f"too-big-{i}"]["status"] == "Unschedulable" for i in range(4))
    assert pods["typo-svc"]["reason"] == (
        "pod default/typo-svc: annotation volcano.sh/numa-topology-policy: unknown topology policy "
        "'singel-numa-node'; valid values: none, best-effort, restricted, single-numa-node"
    )
    assert pods["strict-svc"]["status"] == "Bound" and len(pods["strict-svc"]["numa"]) == 1
    assert report["summary"]["bound"] == 25 and report["problems"] == []


def test_between_admitting_nodes_the_better_linked_gpu_set_wins() -> None:
    # Both nodes can give two GPUs on NUMA 0; on node-a only an NV1 pair is left (0-1), on node-b
    # an NV2 pair (2-3). Equal otherwise, node-a would win the tie by name.
    busy_numa1 = ["4", "5", "6", "7"]
    cluster = cluster_of(
        [
            ("node-a", "dgx1-v100", TopologyPolicy.SINGLE_NUMA_NODE),
            ("node-b", "dgx1-v100", TopologyPolicy.SINGLE_NUMA_NODE),
        ],
        [
            holding("node-a", "busy-a", gpus=["2", "3", *busy_numa1]),
            holding("node-b", "busy-b", gpus=["0", "1", *busy_numa1]),
            pod("pair", cpu=4, gpu=2),
        ],
    )
    run(cluster)
    node, allocation = placed(cluster, "pair")
    assert node == "node-b"
    assert allocation is not None and allocation.devices("nvidia.com/gpu") == {"2", "3"}


def test_replicas_of_one_shape_see_what_the_previous_replica_took() -> None:
    # 38 + 40 free CPUs on two NUMA nodes: two 24-CPU replicas fit, one per NUMA node; the third,
    # identical in shape, still fits by count (30 free) but on no single NUMA node, and must not
    # reuse an earlier replica's admission of the node.
    cluster = cluster_of(
        [("dgx", "dgx1-v100", TopologyPolicy.SINGLE_NUMA_NODE)],
        [pod(f"r-{i}", cpu=24) for i in range(3)],
    )
    registry = default_registry()
    config = load_config_text(CONFIG, "test", registry.known_plugin_names(), registry.known_action_names())
    anyio.run(lambda: schedule_cycle(cluster.cache, config, registry, cluster, cluster))
    numa = []
    for name in ("r-0", "r-1"):
        node, allocation = placed(cluster, name)
        assert node == "dgx" and allocation is not None and len(allocation.cpus()) == 24
        numa.append(allocation.numa().ids())
    assert sorted(numa) == [[0], [1]]
    assert placed(cluster, "r-2") == ("", None)
    assert "cpu 24 cannot be aligned on 1 NUMA node" in reason(cluster, "r-2")
