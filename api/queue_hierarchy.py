"""Where each Volcano Queue hangs in the queue tree (spec.parent), for hierarchical queues.

Every queue hangs under its spec.parent, or under the root queue `root` when it names none. A
spec.parent that names the queue itself or a queue that does not exist, or parents that form a
cycle, are problems naming the Queue and the field; such a queue is placed directly under the
root so it stays usable (Volcano instead refuses to schedule anything while the tree is broken).
"""

from __future__ import annotations

from collections.abc import Mapping

import attrs

from numasched.api.snapshot import QueueInfo

ROOT = "root"


@attrs.frozen(slots=True)
class QueueProblem:
    """Something wrong with a Queue's place in the tree: the queue, and what (naming the field)."""

    queue: str
    message: str


def resolve_parents(queues: Mapping[str, QueueInfo]) -> tuple[dict[str, str], list[QueueProblem]]:
    """Each queue's parent, a missing or cyclic spec.parent replaced by the root (with a problem)."""
    problems: list[QueueProblem] = []
    parent: dict[str, str] = {ROOT: ""}
    for name in sorted(queues):
        if name == ROOT:
            continue
        wanted = queues[name].parent or ROOT
        if wanted == name:
            problems.append(QueueProblem(name, "spec.parent: names the queue itself; placed under root"))
            wanted = ROOT
        elif wanted != ROOT and wanted not in queues:
            problems.append(QueueProblem(name, f"spec.parent: queue {wanted!r} does not exist; placed under root"))
            wanted = ROOT
        parent[name] = wanted
    # A cycle never reaches the root: every queue on one goes under the root, each told so.
    for name in sorted(parent):
        seen: list[str] = []
        current = name
        while current and current not in seen:
            seen.append(current)
            current = parent.get(current, "")
        if current and current == name:
            cycle = seen
            members = " -> ".join([*cycle, name])
            for member in cycle:
                problems.append(
                    QueueProblem(member, f"spec.parent: the parents form a cycle ({members}); placed under root")
                )
                parent[member] = ROOT
    return parent, problems
