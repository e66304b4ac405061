"""Time Cache.snapshot() on the benchmark's cluster with its pods already bound.

The cluster and pods are those of hack/bench.py (bench_workload.generate_cluster and
generate_workload, same seed). Pods are bound greedily, first node where their CPU and GPU
requests still fit, as running pods with spec.nodeName set; pods that fit nowhere stay pending
(they still reach the snapshot's jobs). Then, per round, one bound pod on one node is changed (a
label, as a watch MODIFIED event would bring) and `cache.snapshot()` is timed; a round with no
change is timed too. The first snapshot (every node built) is reported apart.

    .venv/bin/python hack/bench_snapshot.py --nodes 1000 --pods 10000 --rounds 30
"""

from __future__ import annotations

import argparse
import copy
import gc
import statistics
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_workload import GPU, SCHEDULER_NAME, generate_cluster, generate_workload  # type: ignore[import-not-found]

from numasched.api.quantity import parse_quantity
from numasched.cache.cache import Cache
from numasched.cache.events import EventType, ObjectEvent


def _requests(pod: Mapping[str, Any]) -> tuple[float, float]:
    """CPU and GPUs the pod asks for (0 for a best-effort pod)."""
    resources = pod["spec"]["containers"][0].get("resources", {}).get("requests", {})
    return float(parse_quantity(resources.get("cpu", "0"))), float(parse_quantity(resources.get(GPU, "0")))


def _free_per_node(nodes: list[Any]) -> dict[str, list[float]]:
    free: dict[str, list[float]] = {}
    for generated in nodes:
        allocatable = generated.node["status"]["allocatable"]
        cpus, gpus = parse_quantity(allocatable["cpu"]), parse_quantity(allocatable.get(GPU, "0"))
        free[generated.name] = [float(cpus), float(gpus)]
    return free


def _bound(pod: Mapping[str, Any], node_name: str) -> dict[str, Any]:
    bound = copy.deepcopy(dict(pod))
    bound["spec"]["nodeName"] = node_name
    bound["status"] = {"phase": "Running"}
    return bound


def build_cache(node_count: int, pod_count: int, seed: int) -> tuple[Cache, list[dict[str, Any]], int]:
    """The cache with every node, its Numatopology, and the pods (bound where they fit); the bound
    pods, and how many pods stayed pending."""
    cache = Cache((SCHEDULER_NAME,))
    nodes = generate_cluster(node_count, seed)
    for generated in nodes:
        cache.apply(ObjectEvent("Node", EventType.ADDED, generated.node))
        cache.apply(ObjectEvent("Numatopology", EventType.ADDED, generated.numatopology))
    free = _free_per_node(nodes)
    names = list(free)
    bound_pods: list[dict[str, Any]] = []
    pending = 0
    start = 0
    for arrival in generate_workload(pod_count, seed):
        for obj in arrival.objects:
            if obj["kind"] != "Pod":
                cache.apply(ObjectEvent(obj["kind"], EventType.ADDED, obj))
                continue
            cpu, gpus = _requests(obj)
            placed = ""
            for offset in range(len(names)):
                name = names[(start + offset) % len(names)]
                if free[name][0] >= cpu and free[name][1] >= gpus:
                    free[name][0] -= cpu
                    free[name][1] -= gpus
                    placed = name
                    # The next pod starts looking at the next node: spreads pods as a real mix would.
                    start = (start + offset + 1) % len(names)
                    break
            if placed:
                pod = _bound(obj, placed)
                bound_pods.append(pod)
            else:
                pod = obj
                pending += 1
            cache.apply(ObjectEvent("Pod", EventType.ADDED, pod))
    if cache.problems:
        raise RuntimeError(f"objects refused: {list(cache.problems.items())[:3]}")
    return cache, bound_pods, pending


def _timed_snapshot(cache: Cache) -> tuple[float, float]:
    """Wall-clock and CPU seconds of one snapshot (CPU time is what to compare on a shared machine)."""
    started, started_cpu = time.perf_counter(), time.process_time()
    cache.snapshot()
    return time.perf_counter() - started, time.process_time() - started_cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    started = time.perf_counter()
    cache, bound_pods, pending = build_cache(args.nodes, args.pods, args.seed)
    load_s = time.perf_counter() - started
    if not bound_pods:
        parser.error("no pod could be bound; nothing to change between snapshots")
    # The garbage of loading is collected now, not inside the first timing. The collector stays on,
    # as in the scheduler's loop while it takes a snapshot (it freezes the heap only afterwards).
    gc.collect()
    first_s = _timed_snapshot(cache)
    unchanged: list[tuple[float, float]] = []
    one_changed: list[tuple[float, float]] = []
    for round_index in range(args.rounds):
        unchanged.append(_timed_snapshot(cache))
        pod = copy.deepcopy(bound_pods[(round_index * 7919) % len(bound_pods)])
        pod["metadata"]["labels"]["bench.numasched.io/round"] = str(round_index)
        cache.apply(ObjectEvent("Pod", EventType.MODIFIED, pod))
        one_changed.append(_timed_snapshot(cache))
    print(
        f"{args.nodes} nodes, {args.pods} pods ({len(bound_pods)} bound, {pending} pending), seed {args.seed}; "
        f"cache loaded in {load_s:.2f} s"
    )
    print(f"first snapshot:           {first_s[0] * 1000:8.1f} ms wall, {first_s[1] * 1000:8.1f} ms CPU")
    for label, times in (("no change", unchanged), ("1 node changed", one_changed)):
        for kind, values in (("wall", [wall for wall, _ in times]), ("CPU", [cpu for _, cpu in times])):
            print(
                f"snapshot, {label + ',':15s} {kind:4s}: median {statistics.median(values) * 1000:8.1f} ms, "
                f"min {min(values) * 1000:8.1f} ms, max {max(values) * 1000:8.1f} ms ({len(values)} rounds)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
