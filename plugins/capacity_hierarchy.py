"""Hierarchical queues for the capacity plugin (Volcano's capacity with `enableHierarchy: true`).

Modelled on volcano-sh/volcano master of 2026-08 (pkg/scheduler/plugins/capacity/capacity.go,
buildHierarchicalQueueAttrs and checkHierarchicalQueue). Every queue hangs under its spec.parent,
or under the root queue `root` when it names none; the root exists whether or not a Queue object
names it. Top-down from the root:

- a child's deserved is at least its guarantee;
- a child inherits from its parent the capability it leaves unset: CPU or memory 0 / absent, and
  each scalar it does not name;
- the root's capability is its spec.capability, else unlimited (users bound resources with their
  own queues, not the root); its guarantee and deserved are the sums of its children's;
- a child's real capability is what its parent's real capability leaves beyond the guarantees of
  all its children, plus its own guarantee, bounded by its capability.

Allocated, request, inqueue and elastic figures of a job count in its queue and in every ancestor.
A child whose capability exceeds its parent's, children deserving or guaranteed more than their
parent: warnings naming the queue (as Volcano logs them), the figures are used as they are.

Where numasched differs, on purpose: Volcano refuses to schedule anything in the session when a
spec.parent names a missing queue or the parents form a cycle. Here the queue is placed directly
under the root, with a problem naming the Queue and the field, so the rest of the tree and that
queue's jobs are still scheduled.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

from numasched.api.job import JobInfo
from numasched.api.queue_hierarchy import ROOT, QueueProblem, resolve_parents
from numasched.api.resource import Resource
from numasched.api.snapshot import QueueInfo
from numasched.plugins import queue_share as qs
from numasched.plugins.proportion import QueueAttr, reserved_by_job


@attrs.define(slots=True)
class QueueTree:
    """Every queue's figures, its parent (the root's is ""), children and ancestors (root first)."""

    attrs_by_queue: dict[str, QueueAttr]
    parent: dict[str, str]
    children: dict[str, list[str]]
    problems: list[QueueProblem]

    def ancestors(self, name: str) -> list[str]:
        """From the root down to the queue's parent (empty for the root)."""
        chain: list[str] = []
        current = self.parent.get(name, "")
        while current:
            chain.append(current)
            current = self.parent.get(current, "")
        chain.reverse()
        return chain

    def is_leaf(self, name: str) -> bool:
        return not self.children.get(name)

    def path(self, name: str) -> list[str]:
        """The queue's ancestors and itself: every queue a task of it is checked against."""
        return [*self.ancestors(name), name]


def _unlimited(total: Resource) -> Resource:
    return Resource(qs.INFINITY, qs.INFINITY, {name: qs.INFINITY for name in total.scalars})


def _inherit_capability(child: Resource, parent: Resource) -> Resource:
    """Volcano: CPU or memory unset (<= 0) and scalars not named are the parent's."""
    inherited = child.clone()
    if inherited.milli_cpu <= 0:
        inherited.milli_cpu = parent.milli_cpu
    if inherited.memory <= 0:
        inherited.memory = parent.memory
    for name, value in parent.scalars.items():
        inherited.scalars.setdefault(name, value)
    return inherited


def build_queue_tree(queues: Mapping[str, QueueInfo], jobs: Iterable[JobInfo], total: Resource) -> QueueTree:
    """The tree with every queue's figures: allocated, request, inqueue and elastic summed up the
    tree, deserved and real capability set top-down, shares computed."""
    known = dict(queues)
    job_list = list(jobs)
    for job in job_list:
        known.setdefault(job.queue, QueueInfo(job.queue))
    known.setdefault(ROOT, QueueInfo(ROOT))
    parent, problems = resolve_parents(known)
    children: dict[str, list[str]] = {name: [] for name in parent}
    for name in sorted(parent):
        if parent[name]:
            children[parent[name]].append(name)
    tree = QueueTree({}, parent, children, problems)
    for name, queue in known.items():
        tree.attrs_by_queue[name] = QueueAttr(
            name=name,
            weight=queue.weight,
            priority=queue.priority,
            deserved=queue.deserved.clone() if queue.deserved is not None else Resource(),
            guarantee=queue.guarantee.clone() if queue.guarantee is not None else Resource(),
            capability=queue.capability.clone() if queue.capability is not None else Resource(),
        )
    for job in job_list:
        for name in tree.path(job.queue):
            attr = tree.attrs_by_queue[name]
            attr.allocated.add(qs.job_allocated(job))
            attr.request.add(qs.job_request(job))
            attr.inqueue.add(reserved_by_job(job))
            attr.elastic.add(qs.elastic_part(job))
    root = tree.attrs_by_queue[ROOT]
    root.capability = root.capability if root.capability and not root.capability.is_empty() else _unlimited(total)
    root.real_capability = root.capability.clone()
    _settle_children(tree, ROOT)
    for attr in tree.attrs_by_queue.values():
        update_capacity_share(attr)
    return tree


def update_capacity_share(attr: QueueAttr) -> None:
    """Volcano's capacity share: a queue that deserves nothing is best effort, share 1 whatever it
    holds (after every queue below its deserved share); else the largest allocated/deserved."""
    attr.share = 1.0 if attr.deserved.is_empty() else qs.share(attr.allocated, attr.deserved)


def _settle_children(tree: QueueTree, name: str) -> None:
    """Volcano's checkHierarchicalQueue for one queue and, recursively, its subtree."""
    attr = tree.attrs_by_queue[name]
    assert attr.capability is not None
    kids = [tree.attrs_by_queue[child] for child in tree.children[name]]
    total_guarantee, total_deserved = Resource(), Resource()
    for child in kids:
        child.deserved = qs.maximum(child.deserved, child.guarantee)
        total_deserved.add(child.deserved)
        total_guarantee.add(child.guarantee)
        child.capability = _inherit_capability(child.capability or Resource(), attr.capability)
        over = qs.exceeded_names(child.capability, attr.capability, child.capability)
        if over:
            tree.problems.append(
                QueueProblem(
                    child.name,
                    f"spec.capability exceeds parent {name!r} on {', '.join(over)}; the parent's limit applies",
                )
            )
    if name == ROOT:
        attr.guarantee, attr.deserved = total_guarantee, total_deserved
    else:
        if kids and not qs.less_equal(total_deserved, attr.deserved, missing_is_infinite=False):
            tree.problems.append(QueueProblem(name, "spec.deserved: less than the sum of its children's deserved"))
        if kids and not qs.less_equal(total_guarantee, attr.guarantee, missing_is_infinite=False):
            tree.problems.append(
                QueueProblem(name, "spec.guarantee.resource: less than the sum of its children's guarantees")
            )
    left = qs.exceeded_part(attr.real_capability, total_guarantee)
    for child in kids:
        real = left.clone().add(child.guarantee)
        child.real_capability = qs.minimum(real, child.capability or Resource(), missing_is_infinite=True)
    for child in kids:
        _settle_children(tree, child.name)
