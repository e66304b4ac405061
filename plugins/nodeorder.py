"""nodeorder: score nodes by how their CPU and memory would be used (Volcano's nodeorder plugin).

Scores are kube-scheduler's, each 0-100, multiplied by its weight and summed:
- leastrequested (NodeResourcesFit LeastAllocated): the emptier node wins;
- mostrequested (NodeResourcesFit MostAllocated): the fuller node wins (off by default);
- balancedresource (NodeResourcesBalancedAllocation): the node whose CPU and memory fractions
  stay closest to each other wins;
- tainttoleration (TaintToleration): the fewer PreferNoSchedule taints the pod does not tolerate,
  the higher, relative to the worst candidate node (a batch score).
CPU and memory weigh the same, as kube-scheduler's default resource list has them. The least and
most requested scores count a container with no request as 100m CPU and 200Mi memory (kube-
scheduler's non-zero requests), so best-effort pods still spread; the balanced score counts
requests as they are.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

import attrs
import numpy as np

from numasched.api.node import NodeInfo, Taint
from numasched.api.task import TaskInfo, Toleration
from numasched.plugins.predicates import tolerates
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.equivalence import Candidates, Floats
from numasched.scheduler.framework.session import Session

PLUGIN_NAME = "nodeorder"

LEAST_REQUESTED_WEIGHT = "leastrequested.weight"
MOST_REQUESTED_WEIGHT = "mostrequested.weight"
BALANCED_RESOURCE_WEIGHT = "balancedresource.weight"
TAINT_TOLERATION_WEIGHT = "tainttoleration.weight"
PREFER_NO_SCHEDULE = "PreferNoSchedule"

MAX_NODE_SCORE = 100
# kube-scheduler's stand-ins for a container that requests nothing.
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
# CPU and memory weigh the same, as in kube-scheduler's default resource list.
_CPU_AND_MEMORY_WEIGHTS = (1, 1)


@attrs.frozen(slots=True)
class NodeOrderWeights:
    least_requested: int = 1
    balanced_resource: int = 1
    most_requested: int = 0
    taint_toleration: int = 1

    @classmethod
    def from_arguments(cls, arguments: Arguments) -> NodeOrderWeights:
        return cls(
            least_requested=arguments.get_int(LEAST_REQUESTED_WEIGHT, 1),
            balanced_resource=arguments.get_int(BALANCED_RESOURCE_WEIGHT, 1),
            most_requested=arguments.get_int(MOST_REQUESTED_WEIGHT, 0),
            taint_toleration=arguments.get_int(TAINT_TOLERATION_WEIGHT, 1),
        )

    def any_resource_score(self) -> bool:
        return any((self.least_requested, self.balanced_resource, self.most_requested))


# -- per-resource scores (integer arithmetic, as kube-scheduler's int64) ------------------------


def least_requested_score(requested: int, capacity: int) -> int:
    """100 for an empty resource, 0 for a full (or overfull) one."""
    if capacity <= 0 or requested > capacity:
        return 0
    return ((capacity - requested) * MAX_NODE_SCORE) // capacity


def most_requested_score(requested: int, capacity: int) -> int:
    """100 for a full resource; non-zero defaults may push requested past capacity, which counts
    as full."""
    if capacity <= 0:
        return 0
    return (min(requested, capacity) * MAX_NODE_SCORE) // capacity


def weighted_resource_score(
    requested: Sequence[int],
    allocatable: Sequence[int],
    weights: Sequence[int],
    score: Callable[[int, int], int],
) -> int:
    """The weighted mean of a per-resource score, over resources the node has any of."""
    total = weight_sum = 0
    for wanted, capacity, weight in zip(requested, allocatable, weights, strict=True):
        if capacity == 0:
            continue
        total += score(wanted, capacity) * weight
        weight_sum += weight
    return total // weight_sum if weight_sum else 0


def balanced_resource_score(requested: Sequence[float], allocatable: Sequence[float]) -> int:
    """100 * (1 - the standard deviation of the used fractions); resources the node lacks are
    left out, and a fraction above 1 counts as 1."""
    fractions = [
        min(wanted / capacity, 1.0) for wanted, capacity in zip(requested, allocatable, strict=True) if capacity
    ]
    deviation = 0.0
    if len(fractions) == 2:
        deviation = abs(fractions[0] - fractions[1]) / 2
    elif len(fractions) > 2:
        mean = sum(fractions) / len(fractions)
        deviation = math.sqrt(sum((fraction - mean) ** 2 for fraction in fractions) / len(fractions))
    return int((1 - deviation) * MAX_NODE_SCORE)


def intolerable_prefer_no_schedule(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> int:
    """How many PreferNoSchedule taints none of the pod's tolerations (with no effect, or that
    effect) covers."""
    relevant = [toleration for toleration in tolerations if toleration.effect in ("", PREFER_NO_SCHEDULE)]
    return sum(
        1
        for taint in taints
        if taint.effect == PREFER_NO_SCHEDULE and not any(tolerates(toleration, taint) for toleration in relevant)
    )


def reverse_normalized(counts: Mapping[str, int]) -> dict[str, int]:
    """kube-scheduler's DefaultNormalizeScore with reverse: the highest count scores 0, none scores
    100; with no counts at all every node scores 100."""
    highest = max(counts.values(), default=0)
    if highest == 0:
        return {name: MAX_NODE_SCORE for name in counts}
    return {name: MAX_NODE_SCORE - (MAX_NODE_SCORE * count) // highest for name, count in counts.items()}


def taint_toleration_scores(task: TaskInfo, nodes: Sequence[NodeInfo]) -> dict[str, int]:
    # Most nodes have no taints at all; they count 0 without looking at the tolerations.
    return reverse_normalized(
        {
            node.name: intolerable_prefer_no_schedule(node.taints, task.tolerations) if node.taints else 0
            for node in nodes
        }
    )


# -- requests ------------------------------------------------------------------------------------


def _non_zero(milli_cpu: float, memory: float) -> tuple[int, int]:
    return (
        round(milli_cpu) if milli_cpu > 0 else DEFAULT_MILLI_CPU_REQUEST,
        round(memory) if memory > 0 else DEFAULT_MEMORY_REQUEST,
    )


def non_zero_request(task: TaskInfo) -> tuple[int, int]:
    """(milli-CPU, memory bytes) the task counts for in the least / most requested scores.

    Per container, a missing request is the default; then kube-scheduler's pod sum: regular
    containers and sidecars add up, and each init container runs beside the sidecars started
    before it, so the pod needs the larger of the two.
    """
    if not task.containers:
        return _non_zero(task.init_resreq.milli_cpu, task.init_resreq.memory)
    running_cpu = running_memory = 0
    sidecar_cpu = sidecar_memory = 0
    init_cpu = init_memory = 0
    for container in task.containers:
        cpu, memory = _non_zero(container.requests.milli_cpu, container.requests.memory)
        if not container.init:
            running_cpu += cpu
            running_memory += memory
        elif container.sidecar:
            running_cpu += cpu
            running_memory += memory
            sidecar_cpu += cpu
            sidecar_memory += memory
            init_cpu = max(init_cpu, sidecar_cpu)
            init_memory = max(init_memory, sidecar_memory)
        else:
            init_cpu = max(init_cpu, cpu + sidecar_cpu)
            init_memory = max(init_memory, memory + sidecar_memory)
    return max(running_cpu, init_cpu), max(running_memory, init_memory)


def node_non_zero_requested(
    node: NodeInfo, request_of: Callable[[TaskInfo], tuple[int, int]] = non_zero_request
) -> tuple[int, int]:
    """The non-zero requests of every task the node holds."""
    cpu = memory = 0
    for task in node.tasks.values():
        task_cpu, task_memory = request_of(task)
        cpu += task_cpu
        memory += task_memory
    return cpu, memory


# -- the node's score ----------------------------------------------------------------------------


def node_score(
    task: TaskInfo,
    node: NodeInfo,
    weights: NodeOrderWeights,
    request_of: Callable[[TaskInfo], tuple[int, int]] = non_zero_request,
    node_requested: Callable[[NodeInfo], tuple[int, int]] | None = None,
) -> float:
    """The weighted sum of the enabled scores for placing task on node. node_requested, when
    given, answers node_non_zero_requested(node, request_of) (a session keeps it per node)."""
    # weighted_resource_score and balanced_resource_score over (CPU, memory) with equal weights,
    # written out: this runs for every candidate node of every task.
    score = 0.0
    if weights.least_requested or weights.most_requested:
        task_cpu, task_memory = request_of(task)
        if node_requested is None:
            node_cpu, node_memory = node_non_zero_requested(node, request_of)
        else:
            node_cpu, node_memory = node_requested(node)
        requested_cpu, requested_memory = node_cpu + task_cpu, node_memory + task_memory
        cpu_capacity, memory_capacity = round(node.allocatable.milli_cpu), round(node.allocatable.memory)
        counted = (cpu_capacity != 0) + (memory_capacity != 0)
        if weights.least_requested:
            least = 0
            if cpu_capacity != 0:
                least += least_requested_score(requested_cpu, cpu_capacity)
            if memory_capacity != 0:
                least += least_requested_score(requested_memory, memory_capacity)
            score += (least // counted if counted else 0) * weights.least_requested
        if weights.most_requested:
            most = 0
            if cpu_capacity != 0:
                most += most_requested_score(requested_cpu, cpu_capacity)
            if memory_capacity != 0:
                most += most_requested_score(requested_memory, memory_capacity)
            score += (most // counted if counted else 0) * weights.most_requested
    if weights.balanced_resource:
        used_cpu = node.used.milli_cpu + task.init_resreq.milli_cpu
        used_memory = node.used.memory + task.init_resreq.memory
        cpu_allocatable, memory_allocatable = node.allocatable.milli_cpu, node.allocatable.memory
        if cpu_allocatable and memory_allocatable:
            deviation = abs(min(used_cpu / cpu_allocatable, 1.0) - min(used_memory / memory_allocatable, 1.0)) / 2
            balanced = int((1 - deviation) * MAX_NODE_SCORE)
        else:
            # One resource or none: no spread to measure.
            balanced = MAX_NODE_SCORE
        score += balanced * weights.balanced_resource
    return score


class NodeOrderPlugin:
    name = PLUGIN_NAME

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments
        self.weights = NodeOrderWeights.from_arguments(arguments)
        # A task's requests do not change within a session; a node may hold many tasks.
        self._requests: dict[str, tuple[int, int]] = {}
        # Node name -> (generation, non-zero CPU, non-zero memory) of what the node holds: every
        # candidate node is scored for every task, and the sum holds while the node is unchanged.
        self._node_requested: dict[str, tuple[int, int, int]] = {}

    def _request_of(self, task: TaskInfo) -> tuple[int, int]:
        request = self._requests.get(task.uid)
        if request is None:
            request = self._requests[task.uid] = non_zero_request(task)
        return request

    def _requested_on(self, node: NodeInfo) -> tuple[int, int]:
        cached = self._node_requested.get(node.name)
        if cached is not None and cached[0] == node.generation:
            return cached[1], cached[2]
        cpu, memory = node_non_zero_requested(node, self._request_of)
        self._node_requested[node.name] = (node.generation, cpu, memory)
        return cpu, memory

    def score(self, task: TaskInfo, node: NodeInfo) -> float:
        return node_score(task, node, self.weights, self._request_of, self._requested_on)

    def batch_score(self, task: TaskInfo, nodes: Sequence[NodeInfo]) -> dict[str, float] | Floats:
        weight = self.weights.taint_toleration
        tainted = nodes.any_tainted() if isinstance(nodes, Candidates) else any(node.taints for node in nodes)
        if not tainted:
            # No candidate has a taint: every one scores the top (reverse_normalized of zeros).
            return np.full(len(nodes), float(MAX_NODE_SCORE * weight))
        return {name: float(score * weight) for name, score in taint_toleration_scores(task, nodes).items()}

    def equivalence_key(self, task: TaskInfo) -> Hashable:
        """node_score reads the pod's requests (in every class key) and their non-zero form."""
        return self._request_of(task)

    def on_session_open(self, ssn: Session) -> None:
        self._requests.clear()
        self._node_requested.clear()
        if self.weights.any_resource_score():
            ssn.add_node_order_fn(self.name, self.score)
        if self.weights.taint_toleration:
            ssn.add_batch_node_order_fn(self.name, self.batch_score)

    def on_session_close(self, ssn: Session) -> None:
        self._requests.clear()
        self._node_requested.clear()


def build(arguments: Arguments) -> NodeOrderPlugin:
    return NodeOrderPlugin(arguments)
