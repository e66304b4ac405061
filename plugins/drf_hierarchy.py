"""Hierarchical DRF (Volcano's drf with `enableHierarchy: true`; pkg/scheduler/plugins/drf/drf.go on
master of 2026-08).

The tree comes from the Queue annotations, not from spec.parent: `volcano.sh/hierarchy` names the
queue's path from the root ("root/eng/dev") and `volcano.sh/hierarchy-weights` the weight of each
level ("1/2/8"; a weight below 1, or one that cannot be read, is 1). Each job hangs under the last
node of its queue's path, with weight 1. Bottom up:

- a job is saturated when it holds all it asks for of some resource it holds, or asks for a
  resource the cluster has no more of (a resource is demanded while the cluster's allocated
  stays below its total);
- a node with children scales each non-saturated child with a share to the smallest dominant
  share among those children (allocated x smallest / child's share), keeps saturated children as
  they are, sums them, and takes that sum's dominant share; it is saturated when every child is.

Queue order walks two queues' paths from the root: at the first level where they differ, a
saturated node goes after one that is not, then the lower share / weight goes first.
"""

from __future__ import annotations

import copy

import attrs

from numasched.api.resource import Resource
from numasched.plugins import queue_share as qs

# Volcano's minResource: a dimension below it counts as absent (Resource.ResourceNames).
_MIN_RESOURCE = 0.1


def resource_names(resource: Resource) -> list[str]:
    return [name for name in qs.names(resource) if qs.amount(resource, name) >= _MIN_RESOURCE]


def dominant_share(allocated: Resource, total: Resource) -> float:
    """Volcano's calculateShare: the largest allocated / total over the cluster's resources."""
    result = 0.0
    for name in resource_names(total):
        result = max(result, qs.amount(allocated, name) / qs.amount(total, name))
    return result


def job_saturated(allocated: Resource, request: Resource, demanding: set[str]) -> bool:
    """Volcano's resourceSaturated."""
    for name in resource_names(allocated):
        held, asked = qs.amount(allocated, name), qs.amount(request, name)
        if held != 0 and asked != 0 and held >= asked:
            return True
        if name not in demanding and asked != 0:
            return True
    return False


def parse_weight(text: str) -> float:
    """A level's weight as Volcano reads it: a float, at least 1 (what does not parse is 0, so 1)."""
    try:
        weight = float(text)
    except ValueError:
        return 1.0
    return weight if weight >= 1 else 1.0


@attrs.define(slots=True)
class HNode:
    name: str
    weight: float
    allocated: Resource
    request: Resource = attrs.field(factory=Resource)
    share: float = 0.0
    saturated: bool = False
    # None: a job (a leaf).
    children: dict[str, HNode] | None = None


@attrs.define(slots=True)
class HdrfTree:
    total: Resource
    root: HNode = attrs.field(factory=lambda: HNode("root", 1.0, Resource(), children={}))

    def place_job(self, job_uid: str, allocated: Resource, request: Resource, hierarchy: str, weights: str) -> None:
        """Volcano's buildHierarchy: the path's nodes made as needed, the job (re)placed under it."""
        paths, levels = hierarchy.split("/"), weights.split("/")
        node = self.root
        for index in range(1, len(paths)):
            assert node.children is not None
            child = node.children.get(paths[index])
            if child is None:
                weight = parse_weight(levels[index]) if index < len(levels) else 1.0
                child = HNode(paths[index], weight, Resource(), children={})
                node.children[paths[index]] = child
            node = child
        assert node.children is not None
        node.children[job_uid] = HNode(job_uid, 1.0, allocated, request)

    def leaf(self, job_uid: str, hierarchy: str) -> HNode | None:
        node: HNode | None = self.root
        for name in [*hierarchy.split("/")[1:], job_uid]:
            if node is None or node.children is None:
                return None
            node = node.children.get(name)
        return node

    def update(self, total_allocated: Resource) -> None:
        """Volcano's UpdateHierarchicalShare over the whole tree."""
        demanding = {
            name
            for name in resource_names(self.total)
            if qs.amount(total_allocated, name) < qs.amount(self.total, name)
        }
        self._update(self.root, demanding)

    def _update(self, node: HNode, demanding: set[str]) -> None:
        if node.children is None:
            node.share = dominant_share(node.allocated, self.total)
            node.saturated = job_saturated(node.allocated, node.request, demanding)
            return
        smallest = 1.0
        for child in node.children.values():
            self._update(child, demanding)
            if child.share != 0 and not child.saturated:
                smallest = min(smallest, dominant_share(child.allocated, self.total))
        allocated = Resource()
        saturated = True
        for child in node.children.values():
            if not child.saturated:
                saturated = False
            if child.share != 0:
                allocated.add(
                    child.allocated if child.saturated else qs.scaled(child.allocated, smallest / child.share)
                )
        node.allocated = allocated
        node.share = dominant_share(allocated, self.total)
        node.saturated = saturated

    def compare_queues(self, first: str, second: str) -> float:
        """Volcano's compareQueues over two hierarchy paths: < 0 when the first goes first."""
        first_node, second_node = self.root, self.root
        first_path, second_path = first.split("/"), second.split("/")
        depth = min(len(first_path), len(second_path))
        for index in range(depth):
            if not first_node.saturated and second_node.saturated:
                return -1.0
            if first_node.saturated and not second_node.saturated:
                return 1.0
            first_ratio = first_node.share / first_node.weight
            second_ratio = second_node.share / second_node.weight
            if first_ratio != second_ratio:
                return first_ratio - second_ratio
            if index < depth - 1:
                first_next = (first_node.children or {}).get(first_path[index + 1])
                second_next = (second_node.children or {}).get(second_path[index + 1])
                if first_next is None or second_next is None:
                    # A level with no job under it yet: nothing to weigh (Volcano would fail here).
                    return 0.0
                first_node, second_node = first_next, second_next
        return 0.0

    def clone(self) -> HdrfTree:
        return HdrfTree(self.total, copy.deepcopy(self.root))
