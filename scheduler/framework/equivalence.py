"""Predicate and score answers memoised per (pod equivalence class, node generation).

Two pods are equivalent when every plugin that answers per node says so: each such plugin
declares, through `equivalence_key(task)`, what of the pod its predicate and node-order functions
read (DeclaresEquivalence). Two pods with equal keys get equal answers on a node in one state, and
a node's state is named by its generation (NodeInfo.generation), so an answer computed once holds
for every pod of the class until the node changes. When a plugin that answers per node declares no
key, the session keeps no memo at all: correctness does not depend on plugins opting in.

The memo outlives a session (the allocate action keeps it) while the configuration is the same
object: plugins are rebuilt each session from that configuration, and a node nobody touched keeps
its generation from one snapshot to the next.
"""

from __future__ import annotations

from collections.abc import Hashable

from numasched.api.resource import Resource

# Answers for one node: the generation they hold for, why the node failed (None: it passed; not
# yet asked: absent from the entry) and its node-order score (None until asked).
NodeAnswers = list[object]
GENERATION, FAILURES, SCORE = 0, 1, 2
# How many classes are kept; the least recently used goes first.
MAX_CLASSES = 1024

ClassAnswers = dict[str, NodeAnswers]


class EquivalenceMemo:
    """Per class, per node name, the answers at one generation."""

    __slots__ = ("_classes", "_config")

    def __init__(self) -> None:
        self._classes: dict[Hashable, ClassAnswers] = {}
        self._config: object = None

    def bind(self, config: object) -> None:
        """Use the memo for sessions of this configuration; another one starts it empty."""
        if config is not self._config:
            self._classes.clear()
            self._config = config

    def answers(self, class_key: Hashable) -> ClassAnswers:
        classes = self._classes
        found = classes.pop(class_key, None)
        if found is None:
            found = {}
            if len(classes) >= MAX_CLASSES:
                del classes[next(iter(classes))]
        # Re-inserted last: the dict's order is the order of use.
        classes[class_key] = found
        return found

    def __len__(self) -> int:
        return len(self._classes)


def resource_key(resource: Resource) -> Hashable:
    """A Resource as a hashable value, equal exactly when the amounts are."""
    return (resource.milli_cpu, resource.memory, tuple(sorted(resource.scalars.items())))
