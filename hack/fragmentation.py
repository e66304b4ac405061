"""GPU fragmentation on DGX-1 (V100 hybrid cube-mesh) nodes under a churning stream of requests.

A seeded stream of 1/2/4/8-GPU requests arrives, one per step, each staying a random number of
steps. Every device-choice policy sees the same stream on its own copy of the cluster, with the
same node choice (best fit: the fitting node with the fewest free GPUs) and the same kubelet NUMA
hint, so only the choice of devices differs:

- ours:       the numa-aware device provider (kubelet hint, then link- and fragmentation-aware set)
- first-fit:  the lowest free device ids, ignoring NUMA and links
- numa-only:  the kubelet without a topology-aware device plugin: the hint's NUMA nodes first,
              lowest ids within them

Measured after the stream, and averaged over every step of it, then over the seeds: how many 8-GPU pods and how many
2-GPU pods on an NV2 pair (two NVLinks) could still be placed, how many requests found no node,
and the NVLinks joining the GPUs of the 2-GPU and 4-GPU pods that were placed.

    .venv/bin/python hack/fragmentation.py --seeds 10 --nodes 8 --requests 1000
"""

from __future__ import annotations

import argparse
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from numasched.api.numamask import NumaMask
from numasched.api.topology import DeviceGroup, NumaTopology
from numasched.cache.device_topology import machine_device_topology
from numasched.plugins.numaaware.providers.device import allocate_devices, device_hint_table, split_by_affinity
from numasched.plugins.numaaware.providers.device_sets import pair_weight

GPU = "nvidia.com/gpu"
MACHINE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "machines" / "dgx1-v100.yaml"
SIZES = (1, 2, 4, 8)
SIZE_WEIGHTS = (0.4, 0.3, 0.2, 0.1)
# Steps a pod stays: uniform in 1..MAX_DURATION, which keeps a cluster of GPUs about 75% busy.
MAX_DURATION = 36

Policy = Callable[[NumaTopology, tuple[str, ...], int], tuple[str, ...]]


def machine_topology(path: Path = MACHINE, node_name: str = "dgx1") -> NumaTopology:
    machine = yaml.safe_load(path.read_text())
    groups, links = machine_device_topology(machine)
    numa_ids = tuple(int(numa["id"]) for numa in machine["numa_nodes"])
    return NumaTopology(node_name=node_name, numa_ids=numa_ids, devices=groups, links=links)


def _best_affinity(group: DeviceGroup, topology: NumaTopology, free: tuple[str, ...], count: int) -> NumaMask | None:
    hints = device_hint_table(group, topology.numa_ids, free, count)
    if not hints:
        return None
    preferred = [hint for hint in hints if hint.preferred]
    return (preferred or hints)[0].affinity


def ours(topology: NumaTopology, free: tuple[str, ...], count: int) -> tuple[str, ...]:
    group = topology.devices[GPU]
    return allocate_devices(GPU, count, _best_affinity(group, topology, free, count), topology, free)


def first_fit(topology: NumaTopology, free: tuple[str, ...], count: int) -> tuple[str, ...]:
    order = {device.id: index for index, device in enumerate(topology.devices[GPU].devices)}
    return tuple(sorted(free, key=order.__getitem__)[:count])


def numa_only(topology: NumaTopology, free: tuple[str, ...], count: int) -> tuple[str, ...]:
    group = topology.devices[GPU]
    order = {device.id: index for index, device in enumerate(group.devices)}
    aligned, unaligned, without = split_by_affinity(group, free, _best_affinity(group, topology, free, count))
    ranked = [*sorted(aligned, key=order.__getitem__), *sorted(unaligned, key=order.__getitem__), *without]
    return tuple(sorted(ranked[:count], key=order.__getitem__))


POLICIES: dict[str, Policy] = {"ours": ours, "first-fit": first_fit, "numa-only": numa_only}


@dataclass(frozen=True)
class Request:
    size: int
    duration: int


def request_stream(seed: int, count: int) -> list[Request]:
    rng = random.Random(seed)
    return [Request(rng.choices(SIZES, SIZE_WEIGHTS)[0], rng.randint(1, MAX_DURATION)) for _ in range(count)]


@dataclass
class Outcome:
    eight_gpu_left: int = 0
    nv2_pairs_left: int = 0
    mean_eight_gpu_left: float = 0.0
    mean_nv2_pairs_left: float = 0.0
    rejected: int = 0
    pair_nvlinks: list[int] = field(default_factory=list)
    quad_nvlinks: list[int] = field(default_factory=list)

    @property
    def mean_pair_nvlinks(self) -> float:
        return sum(self.pair_nvlinks) / len(self.pair_nvlinks) if self.pair_nvlinks else 0.0

    @property
    def mean_quad_nvlinks(self) -> float:
        return sum(self.quad_nvlinks) / len(self.quad_nvlinks) if self.quad_nvlinks else 0.0


def _nvlinks(topology: NumaTopology, ids: Sequence[str]) -> int:
    group = topology.devices[GPU]
    return sum(
        pair_weight(topology, (GPU, group.by_id[first]), (GPU, group.by_id[second])).nvlinks
        for index, first in enumerate(ids)
        for second in ids[index + 1 :]
    )


def nv2_pair_placements(topology: NumaTopology, free: Sequence[str]) -> int:
    """How many 2-GPU pods could still each get an NV2 pair on one NUMA node at once (a maximum
    matching): the placement the kubelet prefers for them (a single NUMA node) with both links."""
    group = topology.devices[GPU]
    ids = list(free)
    edges = {
        (first, second)
        for index, first in enumerate(ids)
        for second in ids[index + 1 :]
        if group.by_id[first].numa == group.by_id[second].numa
        and pair_weight(topology, (GPU, group.by_id[first]), (GPU, group.by_id[second])).nvlinks >= 2
    }

    def matching(remaining: tuple[str, ...]) -> int:
        if len(remaining) < 2:
            return 0
        head, rest = remaining[0], remaining[1:]
        best = matching(rest)
        for partner in rest:
            if (head, partner) in edges or (partner, head) in edges:
                best = max(best, 1 + matching(tuple(device for device in rest if device != partner)))
        return best

    return matching(tuple(ids))


def simulate(policy: Policy, topology: NumaTopology, nodes: int, stream: Sequence[Request]) -> Outcome:
    all_ids = tuple(device.id for device in topology.devices[GPU].devices)
    free: list[set[str]] = [set(all_ids) for _ in range(nodes)]
    order = {device_id: index for index, device_id in enumerate(all_ids)}
    running: list[tuple[int, int, tuple[str, ...]]] = []  # (end step, node, devices)
    outcome = Outcome()
    eight_total = nv2_total = 0
    for step, request in enumerate(stream):
        still: list[tuple[int, int, tuple[str, ...]]] = []
        for end, node, ids in running:
            if end <= step:
                free[node] |= set(ids)
            else:
                still.append((end, node, ids))
        running = still
        fitting = [node for node in range(nodes) if len(free[node]) >= request.size]
        if not fitting:
            outcome.rejected += 1
        else:
            node = min(fitting, key=lambda candidate: (len(free[candidate]), candidate))
            ids = policy(topology, tuple(sorted(free[node], key=order.__getitem__)), request.size)
            free[node] -= set(ids)
            running.append((step + request.duration, node, ids))
            if request.size == 2:
                outcome.pair_nvlinks.append(_nvlinks(topology, ids))
            elif request.size == 4:
                outcome.quad_nvlinks.append(_nvlinks(topology, ids))
        eight = sum(1 for node_free in free if len(node_free) == len(all_ids))
        nv2 = sum(nv2_pair_placements(topology, sorted(node_free, key=order.__getitem__)) for node_free in free)
        eight_total += eight
        nv2_total += nv2
        outcome.eight_gpu_left, outcome.nv2_pairs_left = eight, nv2
    steps = max(1, len(stream))
    outcome.mean_eight_gpu_left = eight_total / steps
    outcome.mean_nv2_pairs_left = nv2_total / steps
    return outcome


@dataclass(frozen=True)
class Summary:
    """Outcomes of one policy averaged over the seeds."""

    eight_gpu_left: float
    nv2_pairs_left: float
    mean_eight_gpu_left: float
    mean_nv2_pairs_left: float
    rejected: float
    pair_nvlinks: float
    quad_nvlinks: float


def summarize(outcomes: Sequence[Outcome]) -> Summary:
    def mean(values: Sequence[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    return Summary(
        eight_gpu_left=mean([outcome.eight_gpu_left for outcome in outcomes]),
        nv2_pairs_left=mean([outcome.nv2_pairs_left for outcome in outcomes]),
        mean_eight_gpu_left=mean([outcome.mean_eight_gpu_left for outcome in outcomes]),
        mean_nv2_pairs_left=mean([outcome.mean_nv2_pairs_left for outcome in outcomes]),
        rejected=mean([outcome.rejected for outcome in outcomes]),
        pair_nvlinks=mean([nvlinks for outcome in outcomes for nvlinks in outcome.pair_nvlinks]),
        quad_nvlinks=mean([nvlinks for outcome in outcomes for nvlinks in outcome.quad_nvlinks]),
    )


def run_benchmark(seeds: Sequence[int], nodes: int, requests: int) -> dict[str, Summary]:
    """Every policy on the same streams (one per seed); outcomes averaged over the seeds."""
    topology = machine_topology()
    streams = [request_stream(seed, requests) for seed in seeds]
    return {
        name: summarize([simulate(policy, topology, nodes, stream) for stream in streams])
        for name, policy in POLICIES.items()
    }


def markdown_table(results: dict[str, Summary]) -> str:
    header = (
        "| device choice | 8-GPU placements left | NV2-pair placements left | 8-GPU placements (mean over the run) "
        "| NV2-pair placements (mean over the run) | rejected requests | NVLinks per 2-GPU pod "
        "| NVLinks per 4-GPU pod |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|"
    )
    rows = [
        f"| {name} | {result.eight_gpu_left:.2f} | {result.nv2_pairs_left:.2f} | {result.mean_eight_gpu_left:.2f} "
        f"| {result.mean_nv2_pairs_left:.2f} | {result.rejected:.1f} | {result.pair_nvlinks:.2f} "
        f"| {result.quad_nvlinks:.2f} |"
        for name, result in results.items()
    ]
    return "\n".join([header, *rows])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, default=10, help="run seeds 1..N and average")
    parser.add_argument("--nodes", type=int, default=8)
    parser.add_argument("--requests", type=int, default=1000)
    options = parser.parse_args(argv)
    seeds = list(range(1, options.seeds + 1))
    results = run_benchmark(seeds, options.nodes, options.requests)
    print(
        f"`python hack/fragmentation.py --seeds {options.seeds} --nodes {options.nodes} --requests {options.requests}`"
    )
    print(
        f"({options.nodes} dgx1-v100 nodes; {options.requests} requests of 1/2/4/8 GPUs weighted "
        f"{'/'.join(str(weight) for weight in SIZE_WEIGHTS)}, each staying 1-{MAX_DURATION} steps; "
        f"averaged over seeds 1-{options.seeds})\n"
    )
    print(markdown_table(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
