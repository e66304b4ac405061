"""Write a fragmented GPU cluster as YAML dumps, for `numasched defrag` (docs/defrag.md, tests).

DGX-1 nodes (8 V100, 4 per NUMA node) under a topology manager policy (restricted by default),
each NUMA node holding 1 to 3 busy GPUs in pods of 1 or 2 GPUs and 2 pinned CPUs, as a cluster
looks after a churn of small jobs placed by a scheduler that did not care about fragmentation: no
NUMA node has 4 GPUs free and no node 8, though half the GPUs are idle. The pods are bound
(spec.nodeName, Running) and carry the numasched.io/allocation annotation naming their CPUs and
GPUs, so the ledger knows which ids are busy. They belong to ReplicaSets (ownerReferences), in
three apps: `serving` (covered by a PodDisruptionBudget, maxUnavailable 1), `batch-a`, `batch-b`;
about one pod in six has the `high-priority` class (1000). With --pending, pods asking for
4 GPUs and 32 CPUs wait (the first named infer-4gpu).

    .venv/bin/python hack/gen_fragmented_cluster.py --seed 1 --nodes 6 --out-dir tests/fixtures/defrag
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

import yaml

from numasched.api.idset import IdSet
from numasched.api.topology import TopologyPolicy
from numasched.cache.machine_shapes import machine_objects, reserved_cpus_for

ROOT = Path(__file__).resolve().parent.parent
MACHINE = ROOT / "tests" / "fixtures" / "machines" / "dgx1-v100.yaml"
GPU = "nvidia.com/gpu"
APPS = ("serving", "batch-a", "batch-b")
HIGH_PRIORITY = "high-priority"
CPUS_PER_POD = 2


def _pod(name: str, app: str, node: str, cpus: list[int], gpus: list[str], numa: int, high: bool) -> dict[str, Any]:
    allocation = {
        "containers": {
            "main": {"cpuset": IdSet(cpus).format(), "numa": [numa], "devices": {GPU: gpus}},
        }
    }
    resources = {"cpu": str(len(cpus)), "memory": "8Gi", GPU: str(len(gpus))}
    spec: dict[str, Any] = {
        "schedulerName": "numasched",
        "nodeName": node,
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": resources, "limits": resources}}],
    }
    if high:
        spec["priorityClassName"] = HIGH_PRIORITY
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "labels": {"app": app},
            "annotations": {"numasched.io/allocation": json.dumps(allocation, separators=(",", ":"))},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{app}-rs",
                    "uid": f"rs-{app}",
                    "controller": True,
                }
            ],
        },
        "spec": spec,
        "status": {"phase": "Running"},
    }


def pending_pod(name: str) -> dict[str, Any]:
    resources = {"cpu": "32", "memory": "64Gi", GPU: "4"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "inference"}},
        "spec": {
            "schedulerName": "numasched",
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": resources, "limits": resources}}
            ],
        },
        "status": {"phase": "Pending"},
    }


def fragmented_cluster(
    seed: int, nodes: int, *, policy: TopologyPolicy = TopologyPolicy.RESTRICTED, pending: int = 0
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(cluster documents, workload documents) of a seeded fragmented cluster."""
    rng = random.Random(seed)
    machine = yaml.safe_load(MACHINE.read_text())
    reserved = reserved_cpus_for(machine, 2)
    numa_cpus = {
        int(numa["id"]): [cpu for cpu in IdSet.parse(str(numa["cpus"])) if cpu not in reserved]
        for numa in machine["numa_nodes"]
    }
    numa_gpus: dict[int, list[str]] = {}
    for device in machine["devices"][GPU]:
        numa_gpus.setdefault(int(device["numa"]), []).append(str(device["id"]))
    cluster: list[dict[str, Any]] = []
    workload: list[dict[str, Any]] = [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": HIGH_PRIORITY},
            "value": 1000,
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "serving", "namespace": "default"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "serving"}}},
        },
    ]
    count = 0
    for index in range(nodes):
        node_name = f"dgx-{index}"
        node, topology = machine_objects(machine, node_name, topology_policy=policy)
        cluster.extend([node, topology])
        for numa, gpus in sorted(numa_gpus.items()):
            busy = rng.choice((1, 2, 3))
            chosen = rng.sample(gpus, busy)
            free_cpus = list(numa_cpus[numa])
            while chosen:
                size = min(len(chosen), rng.choice((1, 2)))
                taken, chosen = sorted(chosen[:size]), chosen[size:]
                cpus, free_cpus = free_cpus[:CPUS_PER_POD], free_cpus[CPUS_PER_POD:]
                name = f"job-{count:03d}"
                count += 1
                workload.append(_pod(name, rng.choice(APPS), node_name, cpus, taken, numa, high=rng.random() < 1 / 6))
    for index in range(pending):
        workload.append(pending_pod("infer-4gpu" if index == 0 else f"infer-4gpu-{index}"))
    return cluster, workload


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--nodes", type=int, default=6)
    parser.add_argument("--policy", choices=[policy.value for policy in TopologyPolicy], default="restricted")
    parser.add_argument("--pending", type=int, default=1, help="4-GPU pods waiting (the first is infer-4gpu)")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "tests" / "fixtures" / "defrag")
    args = parser.parse_args()
    cluster, workload = fragmented_cluster(
        args.seed, args.nodes, policy=TopologyPolicy(args.policy), pending=args.pending
    )
    args.out_dir.mkdir(parents=True, exist_ok=True)
    header = (
        f"# Generated by hack/gen_fragmented_cluster.py --seed {args.seed} --nodes {args.nodes} "
        f"--policy {args.policy} --pending {args.pending}; do not edit by hand.\n"
    )
    (args.out_dir / "cluster.yaml").write_text(header + yaml.safe_dump_all(cluster, sort_keys=False, width=120))
    (args.out_dir / "workload.yaml").write_text(header + yaml.safe_dump_all(workload, sort_keys=False, width=120))


if __name__ == "__main__":
    main()
