"""Volcano issue #4998 end to end: YAML objects shaped as Volcano's resource-exporter writes them
(numares.<r>.allocatable lists the FREE ids) go through SimCluster and the real scheduler loop;
the expected placements are written out by hand."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
import yaml

from numasched.api.allocation import ALLOCATION_ANNOTATION, VOLCANO_DECISION_ANNOTATION, allocation_from_json
from numasched.api.idset import IdSet
from numasched.cache.cache import Cache
from numasched.cache.simcluster import SimCluster
from numasched.conf.loader import load_config_text
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.simulate import simulate
from numasched.scheduler.simulate_report import build_report, report_document

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
"""

GPU = "nvidia.com/gpu"


def node_yaml(name: str) -> str:
    return f"""
apiVersion: v1
kind: Node
metadata:
  name: {name}
status:
  capacity: {{cpu: "16", memory: 64Gi, pods: "110", nvidia.com/gpu: "8"}}
  allocatable: {{cpu: "16", memory: 64Gi, pods: "110", nvidia.com/gpu: "8"}}
  conditions: [{{type: Ready, status: "True"}}]
"""


def numatopology_yaml(name: str, free_gpus: str, pod_allocations: str = "[]") -> str:
    """16 CPUs (0-7 on NUMA 0, 8-15 on NUMA 1), GPUs 0-3 on NUMA 0 and 4-7 on NUMA 1."""
    cpu_detail = ", ".join(f'"{cpu}": {{numa: {cpu // 8}, socket: 0, core: {cpu}}}' for cpu in range(16))
    gpu_detail = ", ".join(f'"{gpu}": {{numa: {gpu // 4}}}' for gpu in range(8))
    return f"""
apiVersion: nodeinfo.volcano.sh/v1alpha1
kind: Numatopology
metadata:
  name: {name}
spec:
  policies: {{CPUManagerPolicy: static, TopologyManagerPolicy: single-numa-node}}
  cpuDetail: {{{cpu_detail}}}
  gpuDetail: {{{gpu_detail}}}
  numares:
    cpu: {{allocatable: "0-15", capacity: 16}}
    nvidia.com/gpu: {{allocatable: "{free_gpus}", capacity: 8}}
  podAllocations: {pod_allocations}
"""


def holder_yaml(name: str, node: str, gpus: int = 4) -> str:
    """A pod bound by the default scheduler that holds GPUs and says nothing about which."""
    return f"""
apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default, uid: uid-{name}}}
spec:
  schedulerName: default-scheduler
  nodeName: {node}
  containers:
  - name: main
    resources:
      requests: {{cpu: 500m, memory: 1Gi, nvidia.com/gpu: "{gpus}"}}
      limits: {{cpu: 500m, memory: 1Gi, nvidia.com/gpu: "{gpus}"}}
status: {{phase: Running}}
"""


TRAIN = """
apiVersion: v1
kind: Pod
metadata: {name: train, namespace: default}
spec:
  schedulerName: numasched
  containers:
  - name: main
    resources:
      requests: {cpu: "2", memory: 2Gi, nvidia.com/gpu: "4"}
      limits: {cpu: "2", memory: 2Gi, nvidia.com/gpu: "4"}
"""


def listed(holder: str) -> str:
    """Volcano's podAllocations entry for the holder (a quantity for GPUs: no ids)."""
    return json.dumps(
        [
            {
                "uid": f"uid-{holder}",
                "name": holder,
                "namespace": "default",
                "containerAllocations": [{"name": "main", "allocations": {GPU: "4"}}],
            }
        ]
    )


def run(*documents: str, config_text: str = CONFIG) -> SimCluster:
    cluster = SimCluster(Cache())
    cluster.load_text("---".join(documents), "test")
    assert not cluster.load_problems
    registry = default_registry()
    config = load_config_text(config_text, "test", registry.known_plugin_names(), registry.known_action_names())
    anyio.run(lambda: simulate(cluster, config, registry, max_cycles=5, progress=False))
    return cluster


def placement(cluster: SimCluster, name: str) -> tuple[str, dict[str, Any]]:
    pod = cluster.objects["Pod"][f"default/{name}"]
    return str(pod["spec"].get("nodeName", "")), pod["metadata"].get("annotations", {})


def failed_scheduling(cluster: SimCluster, name: str) -> str:
    messages = [e.message for e in cluster.events if e.name == f"default/{name}" and e.reason == "FailedScheduling"]
    return messages[-1] if messages else ""


def test_the_4998_node_never_receives_the_pod_alone() -> None:
    cluster = run(node_yaml("node-a"), numatopology_yaml("node-a", "0-2,7"), holder_yaml("busy-a", "node-a"), TRAIN)
    node, _ = placement(cluster, "train")
    assert node == ""
    reason = failed_scheduling(cluster, "train")
    assert "nvidia.com/gpu 4 cannot be aligned on 1 NUMA node (free per NUMA: 0->3, 1->1" in reason
    assert "4 nvidia.com/gpu held by pods whose ids are unknown (default/busy-a)" in reason


def test_the_pod_goes_where_the_report_accounts_for_the_holder() -> None:
    # node-b: the holder sits on GPUs 4-7, the exporter lists it, GPUs 0-3 are free.
    cluster = run(
        node_yaml("node-a"),
        numatopology_yaml("node-a", "0-2,7"),
        holder_yaml("busy-a", "node-a"),
        node_yaml("node-b"),
        numatopology_yaml("node-b", "0-3", listed("busy-b")),
        holder_yaml("busy-b", "node-b"),
        TRAIN,
    )
    node, annotations = placement(cluster, "train")
    assert node == "node-b"
    allocation = allocation_from_json(annotations[ALLOCATION_ANNOTATION])
    assert allocation.devices(GPU) == {"0", "1", "2", "3"}
    assert allocation.numa().ids() == [0]
    assert allocation.cpus().is_subset(IdSet(range(8))) and len(allocation.cpus()) == 2
    decision = json.loads(annotations[VOLCANO_DECISION_ANNOTATION])
    assert set(decision["numa"]) == {"0"} and decision["numa"]["0"][GPU] == "0,1,2,3"


def test_an_unlisted_holder_leaves_the_numa_node_chosen_but_no_gpu_ids() -> None:
    # All 8 GPUs look free, but an unlisted holder of 4 could hold all of NUMA 0 or all of NUMA 1:
    # no NUMA node is sure to have even 2 free.
    two_gpus = TRAIN.replace('nvidia.com/gpu: "4"', 'nvidia.com/gpu: "2"').replace("train", "small")
    cluster = run(node_yaml("node-c"), numatopology_yaml("node-c", "0-7"), holder_yaml("busy-c", "node-c"), two_gpus)
    assert placement(cluster, "small")[0] == ""
    assert "4 nvidia.com/gpu held by pods whose ids are unknown (default/busy-c)" in failed_scheduling(cluster, "small")
    # An unlisted holder of 1 GPU leaves at least 3 sure on each NUMA node: a 2-GPU pod fits on
    # one NUMA node, and the binding names that NUMA node but no GPU ids (the kubelet picks them).
    cluster = run(
        node_yaml("node-d"), numatopology_yaml("node-d", "0-7"), holder_yaml("busy-d", "node-d", gpus=1), two_gpus
    )
    node, annotations = placement(cluster, "small")
    assert node == "node-d"
    allocation = allocation_from_json(annotations[ALLOCATION_ANNOTATION])
    assert allocation.devices(GPU) == frozenset()
    assert allocation.numa().ids() == [0]
    assert allocation.cpus().is_subset(IdSet(range(8))) and len(allocation.cpus()) == 2
    decision = json.loads(annotations[VOLCANO_DECISION_ANNOTATION])
    assert set(decision["numa"]) == {"0"} and GPU not in decision["numa"]["0"]


@pytest.mark.parametrize(("choice", "expected_node"), [("refuse-pinned", ""), ("allow", "bare")])
def test_nodes_without_topology_are_listed_and_governed(choice: str, expected_node: str) -> None:
    config = CONFIG + f"    arguments:\n      unknown-topology: {choice}\n"
    cluster = run(node_yaml("bare"), TRAIN, config_text=config)
    assert placement(cluster, "train")[0] == expected_node
    if not expected_node:
        assert (
            "1 node(s) had no usable NUMA topology (missing); pod needs 2 exclusive CPUs and 4 nvidia.com/gpu, "
            "which unknown-topology: refuse-pinned keeps off such nodes"
        ) in failed_scheduling(cluster, "train")
    document = report_document(build_report(cluster, cycles=1, seconds=0.0))
    assert document["nodesWithoutTopology"] == [{"node": "bare", "topology": "missing"}]


def test_yaml_documents_parse() -> None:
    # The fixtures above are YAML a person could kubectl apply: each one loads on its own.
    for text in (node_yaml("n"), numatopology_yaml("n", "0-2,7", listed("h")), holder_yaml("h", "n"), TRAIN):
        assert isinstance(yaml.safe_load(text), dict)
