"""Seeded cluster and workload generators for the benchmark (hack/bench.py).

Nodes are drawn from the machine shapes in tests/fixtures/machines/ and published exactly as the
exporter would (numasched.cache.machine_shapes.machine_objects), with the kubelet's Topology
Manager policy mixed across best-effort, restricted and single-numa-node.

Pods come from a fixed mix: Guaranteed CPU-pinned services, GPU inference pods, gang training
jobs (PodGroups of scheduling.volcano.sh/v1beta1) and best-effort pods; they arrive in batches.
The same seed always gives the same objects, so every scheduler configuration sees the same
cluster and the same arrivals.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import yaml

from numasched.api.topology import TopologyPolicy, TopologyScope
from numasched.cache.machine_shapes import machine_objects

SCHEDULER_NAME = "numasched"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
GPU = "nvidia.com/gpu"
NIC = "rdma/hca"
POLICIES = (TopologyPolicy.BEST_EFFORT, TopologyPolicy.RESTRICTED, TopologyPolicy.SINGLE_NUMA_NODE)

# Share of pods by kind. With these shares the GPU demand is about 1.25 times what the generated
# clusters hold and the CPU demand about half, so GPU pods queue while services still fit.
DEFAULT_MIX: Mapping[str, float] = {"service": 0.50, "inference": 0.15, "training": 0.10, "best-effort": 0.25}
# Named mixes, so that quality can be compared on more than one kind of cluster load.
MIXES: Mapping[str, Mapping[str, float]] = {
    "balanced": DEFAULT_MIX,
    "cpu-pinned": {"service": 0.80, "inference": 0.0, "training": 0.0, "best-effort": 0.20},
    "gpu-heavy": {"service": 0.20, "inference": 0.35, "training": 0.35, "best-effort": 0.10},
}
# Mean pods per arrival of each kind: an arrival of a gang job brings 2-16 pods.
_PODS_PER_ARRIVAL: Mapping[str, float] = {"service": 1.0, "inference": 1.0, "training": 9.0, "best-effort": 1.0}
KINDS = tuple(DEFAULT_MIX)


def machines_dir() -> Path:
    return Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "machines"


def load_machines(directory: Path | None = None) -> list[Mapping[str, Any]]:
    """Every machine shape in the fixtures directory, sorted by name."""
    folder = directory or machines_dir()
    shapes: list[Mapping[str, Any]] = []
    for path in sorted(folder.glob("*.yaml")):
        loaded = yaml.safe_load(path.read_text())
        if not isinstance(loaded, Mapping) or "numa_nodes" not in loaded:
            raise ValueError(f"{path.name}: not a machine shape (no numa_nodes)")
        shapes.append(loaded)
    if not shapes:
        raise ValueError(f"no machine shapes (*.yaml) in {folder}")
    return shapes


@attrs.frozen(slots=True)
class GeneratedNode:
    name: str
    machine: str
    policy: TopologyPolicy
    node: dict[str, Any]
    numatopology: dict[str, Any]


def generate_cluster(
    node_count: int, seed: int, machines: Sequence[Mapping[str, Any]] | None = None
) -> list[GeneratedNode]:
    """node_count nodes, each a random machine shape with a random kubelet topology policy."""
    shapes = list(machines) if machines is not None else load_machines()
    rng = random.Random(f"cluster-{seed}")
    width = len(str(max(node_count - 1, 0)))
    nodes: list[GeneratedNode] = []
    for index in range(node_count):
        machine = rng.choice(shapes)
        policy = rng.choice(POLICIES)
        name = f"node-{index:0{width}d}"
        node, numatopology = machine_objects(
            machine, name, topology_policy=policy, topology_scope=TopologyScope.CONTAINER
        )
        nodes.append(GeneratedNode(name, str(machine.get("machine", "")), policy, node, numatopology))
    return nodes


def _quantities(cpu: int, memory_gib: int, gpus: int = 0, nics: int = 0) -> dict[str, str]:
    amounts = {"cpu": str(cpu), "memory": f"{memory_gib}Gi"}
    if gpus:
        amounts[GPU] = str(gpus)
    if nics:
        amounts[NIC] = str(nics)
    return amounts


def pod_object(
    name: str,
    kind: str,
    sequence: int,
    resources: Mapping[str, str] | None,
    *,
    group: str | None = None,
) -> dict[str, Any]:
    """A pending pod of our scheduler; requests equal limits (Guaranteed) unless resources is None."""
    container: dict[str, Any] = {"name": "main", "image": "registry.example/bench:1"}
    if resources is not None:
        container["resources"] = {"requests": dict(resources), "limits": dict(resources)}
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": "bench",
        "uid": f"bench-{name}",
        "labels": {"bench.numasched.io/kind": kind},
        "creationTimestamp": _timestamp(sequence),
    }
    if group is not None:
        metadata["annotations"] = {GROUP_ANNOTATION: group}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"schedulerName": SCHEDULER_NAME, "containers": [container]},
        "status": {"phase": "Pending"},
    }


def pod_group_object(name: str, members: int, sequence: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "bench", "creationTimestamp": _timestamp(sequence)},
        "spec": {"minMember": members, "queue": "default"},
    }


def _timestamp(sequence: int) -> str:
    # One second per arrival keeps FIFO order among equal-priority jobs, as in a real cluster.
    hours, rest = divmod(sequence, 3600)
    minutes, seconds = divmod(rest, 60)
    days, hours = divmod(hours, 24)
    return f"2026-01-{1 + days:02d}T{hours:02d}:{minutes:02d}:{seconds:02d}Z"


@attrs.frozen(slots=True)
class Arrival:
    """One unit of work: a single pod, or a gang job (its PodGroup and pods)."""

    kind: str
    objects: tuple[dict[str, Any], ...]

    @property
    def pod_count(self) -> int:
        return sum(1 for obj in self.objects if obj["kind"] == "Pod")


def _service(rng: random.Random, index: int, sequence: int) -> Arrival:
    cpu = rng.choice((2, 4, 4, 8, 8, 16, 32))
    name = f"svc-{index}"
    return Arrival("service", (pod_object(name, "service", sequence, _quantities(cpu, 2 * cpu)),))


def _inference(rng: random.Random, index: int, sequence: int) -> Arrival:
    gpus = rng.choice((1, 1, 2))
    name = f"infer-{index}"
    return Arrival("inference", (pod_object(name, "inference", sequence, _quantities(4 * gpus, 32 * gpus, gpus)),))


def _training(rng: random.Random, index: int, sequence: int, limit: int) -> Arrival:
    members = min(rng.randint(2, 16), max(limit, 2))
    gpus = rng.choice((4, 8))
    # One job in three wants a GPUDirect RDMA NIC per GPU.
    nics = gpus if rng.random() < 1 / 3 else 0
    group = f"train-{index}"
    resources = _quantities(4 * gpus, 16 * gpus, gpus, nics)
    pods = tuple(
        pod_object(f"{group}-{member}", "training", sequence, resources, group=group) for member in range(members)
    )
    return Arrival("training", (pod_group_object(group, members, sequence), *pods))


def _best_effort(index: int, sequence: int) -> Arrival:
    return Arrival("best-effort", (pod_object(f"be-{index}", "best-effort", sequence, None),))


def generate_workload(pod_count: int, seed: int, mix: Mapping[str, float] = DEFAULT_MIX) -> list[Arrival]:
    """Arrivals adding up to exactly pod_count pods, in arrival order."""
    unknown = set(mix) - set(KINDS)
    if unknown:
        raise ValueError(f"unknown workload kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
    total = sum(mix.values())
    if total <= 0:
        raise ValueError("the workload mix has no positive share")
    rng = random.Random(f"workload-{seed}")
    kinds = list(mix)
    weights = [mix[kind] / total / _PODS_PER_ARRIVAL[kind] for kind in kinds]
    arrivals: list[Arrival] = []
    placed = 0
    counters = dict.fromkeys(kinds, 0)
    while placed < pod_count:
        kind = rng.choices(kinds, weights)[0]
        left = pod_count - placed
        if kind == "training" and left < 2:
            kind = "service"
        index = counters.get(kind, 0)
        counters[kind] = index + 1
        sequence = len(arrivals)
        if kind == "service":
            arrival = _service(rng, index, sequence)
        elif kind == "inference":
            arrival = _inference(rng, index, sequence)
        elif kind == "training":
            arrival = _training(rng, index, sequence, left)
        else:
            arrival = _best_effort(index, sequence)
        arrivals.append(arrival)
        placed += arrival.pod_count
    return arrivals


def batches(arrivals: Sequence[Arrival], count: int) -> Iterator[list[Arrival]]:
    """The arrivals split into `count` consecutive batches of about equal pod counts."""
    if count < 1:
        raise ValueError(f"batch count must be at least 1, got {count}")
    total = sum(arrival.pod_count for arrival in arrivals)
    target = total / count
    current: list[Arrival] = []
    pods = 0
    emitted = 0
    for arrival in arrivals:
        current.append(arrival)
        pods += arrival.pod_count
        if pods >= target * (emitted + 1) and emitted < count - 1:
            yield current
            current = []
            emitted += 1
    if current:
        yield current
