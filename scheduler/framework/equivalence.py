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
# A class no session asked for in this many sessions is dropped: its answers are for node states
# long gone, and each holds an entry per node.
IDLE_SESSIONS = 8

ClassAnswers = dict[str, NodeAnswers]


class EquivalenceMemo:
    """Per class, per node name, the answers at one generation."""

    __slots__ = ("_classes", "_config", "_last_used", "_session")

    def __init__(self) -> None:
        self._classes: dict[Hashable, ClassAnswers] = {}
        self._last_used: dict[Hashable, int] = {}
        self._config: object = None
        self._session = 0

    def bind(self, config: object) -> None:
        """Start a session of this configuration: another configuration starts the memo empty;
        classes idle for IDLE_SESSIONS sessions are dropped."""
        self._session += 1
        if config is not self._config:
            self._classes.clear()
            self._last_used.clear()
            self._config = config
            return
        oldest = self._session - IDLE_SESSIONS
        for class_key in [key for key, used in self._last_used.items() if used < oldest]:
            del self._last_used[class_key]
            self._classes.pop(class_key, None)

    def answers(self, class_key: Hashable) -> ClassAnswers:
        classes = self._classes
        found = classes.pop(class_key, None)
        if found is None:
            found = {}
            if len(classes) >= MAX_CLASSES:
                dropped = next(iter(classes))
                del classes[dropped]
                self._last_used.pop(dropped, None)
        # Re-inserted last: the dict's order is the order of use.
        classes[class_key] = found
        self._last_used[class_key] = self._session
        return found

    def __len__(self) -> int:
        return len(self._classes)


def resource_key(resource: Resource) -> Hashable:
    """A Resource as a hashable value, equal exactly when the amounts are."""
    return (resource.milli_cpu, resource.memory, tuple(sorted(resource.scalars.items())))
