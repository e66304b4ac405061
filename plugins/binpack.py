"""binpack: prefer the node the task fills most (Volcano's binpack plugin).

For each resource the task requests and the configuration weighs, the share of the node's
allocatable that would be in use after placing the task, times that resource's weight; the
weighted mean, scaled to 0-100, times binpack.weight. A node without room for a weighed resource
scores 0. Arguments (Volcano's names):

    binpack.weight: 10                      # the plugin's weight (default 1; 0 turns it off)
    binpack.cpu: 5                          # CPU's weight (default 1)
    binpack.memory: 1                       # memory's weight (default 1)
    binpack.resources: nvidia.com/gpu, example.com/foo
    binpack.resources.nvidia.com/gpu: 2     # a listed resource's weight (default 1)

Resources not listed (and not CPU or memory) do not count. A negative weight falls back to 1, as
in Volcano.
"""

from __future__ import annotations

from collections.abc import Hashable

import attrs
import structlog

from numasched.api.node import NodeInfo
from numasched.api.resource import CPU, MEMORY, Resource
from numasched.api.task import TaskInfo
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.equivalence import resource_key
from numasched.scheduler.framework.session import Session

PLUGIN_NAME = "binpack"

BINPACK_WEIGHT = "binpack.weight"
BINPACK_CPU = "binpack.cpu"
BINPACK_MEMORY = "binpack.memory"
BINPACK_RESOURCES = "binpack.resources"
BINPACK_RESOURCE_PREFIX = BINPACK_RESOURCES + "."

MAX_NODE_SCORE = 100
# Below this a requested amount counts as not requested (Volcano's minResource, in its units).
_MIN_REQUEST = 0.1

_log = structlog.get_logger(__name__)


@attrs.frozen(slots=True)
class BinpackWeights:
    weight: int = 1
    # Resource name → its weight; CPU and memory are always present.
    resources: dict[str, int] = attrs.field(factory=lambda: {CPU: 1, MEMORY: 1})

    @classmethod
    def from_arguments(cls, arguments: Arguments) -> BinpackWeights:
        resources: dict[str, int] = {}
        for name in arguments.get_list(BINPACK_RESOURCES, []):
            resources[name] = _non_negative(arguments, BINPACK_RESOURCE_PREFIX + name)
        resources[CPU] = _non_negative(arguments, BINPACK_CPU)
        resources[MEMORY] = _non_negative(arguments, BINPACK_MEMORY)
        return cls(weight=arguments.get_int(BINPACK_WEIGHT, 1), resources=resources)


def _non_negative(arguments: Arguments, key: str) -> int:
    value = arguments.get_int(key, 1)
    if value < 0:
        _log.warning("negative binpack weight, using 1", plugin=PLUGIN_NAME, key=key, value=value)
        return 1
    return value


def resource_binpack_score(requested: float, capacity: float, used: float, weight: int) -> float | None:
    """weight * the node's share of this resource in use after placing the request; None when the
    node has no room for it."""
    if capacity == 0 or weight == 0:
        return 0.0
    after = requested + used
    if after > capacity:
        return None
    return after * weight / capacity


WeighedRequest = tuple[tuple[str, float, int], ...]


def weighed_requests(request: Resource, weights: BinpackWeights) -> WeighedRequest:
    """(resource, amount, weight) for each resource the request asks for and the configuration
    weighs, CPU and memory first."""
    weighed: list[tuple[str, float, int]] = []
    for name in (CPU, MEMORY, *request.scalars):
        amount = request.get(name)
        if amount < _MIN_REQUEST:
            continue
        resource_weight = weights.resources.get(name)
        if resource_weight is not None:
            weighed.append((name, amount, resource_weight))
    return tuple(weighed)


def weighed_binpack_score(weighed: WeighedRequest, allocatable: Resource, used: Resource, plugin_weight: int) -> float:
    """binpack_score for a request already reduced by weighed_requests."""
    total = 0.0
    weight_sum = 0
    for name, amount, resource_weight in weighed:
        score = resource_binpack_score(amount, allocatable.get(name), used.get(name), resource_weight)
        if score is None:
            return 0.0
        total += score
        weight_sum += resource_weight
    if weight_sum > 0:
        total /= weight_sum
    return total * MAX_NODE_SCORE * plugin_weight


def binpack_score(request: Resource, allocatable: Resource, used: Resource, weights: BinpackWeights) -> float:
    """0 to 100 * weights.weight; higher for the node the request leaves fuller."""
    return weighed_binpack_score(weighed_requests(request, weights), allocatable, used, weights.weight)


def task_binpack_score(task: TaskInfo, node: NodeInfo, weights: BinpackWeights) -> float:
    return binpack_score(task.resreq, node.allocatable, node.used, weights)


class BinpackPlugin:
    name = PLUGIN_NAME

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments
        self.weights = BinpackWeights.from_arguments(arguments)

        # Task uid -> its weighed requests: a task's requests do not change within a session, and
        # it is scored against every candidate node.
        self._weighed: dict[str, WeighedRequest] = {}

    def score(self, task: TaskInfo, node: NodeInfo) -> float:
        weighed = self._weighed.get(task.uid)
        if weighed is None:
            weighed = self._weighed[task.uid] = weighed_requests(task.resreq, self.weights)
        return weighed_binpack_score(weighed, node.allocatable, node.used, self.weights.weight)

    def equivalence_key(self, task: TaskInfo) -> Hashable:
        """The score reads the pod's steady-state requests."""
        return resource_key(task.resreq)

    def on_session_open(self, ssn: Session) -> None:
        self._weighed.clear()
        if self.weights.weight != 0:
            ssn.add_node_order_fn(self.name, self.score)

    def on_session_close(self, ssn: Session) -> None:
        self._weighed.clear()


def build(arguments: Arguments) -> BinpackPlugin:
    return BinpackPlugin(arguments)
