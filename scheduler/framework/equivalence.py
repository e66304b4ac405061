"""Predicate and score answers memoised per (pod equivalence class, node generation), as arrays.

Two pods are equivalent when every plugin that answers per node says so: each such plugin
declares, through `equivalence_key(task)`, what of the pod its predicate and node-order functions
read (DeclaresEquivalence). Two pods with equal keys get equal answers on a node in one state, and
a node's state is named by its generation (NodeInfo.generation), so an answer computed once holds
for every pod of the class until the node changes. When a plugin that answers per node declares no
key, the session keeps no memo at all: correctness does not depend on plugins opting in.

The answers are kept as arrays indexed by a node's slot (NodeSlots: one slot per node name, for
as long as the memo lives), so the allocate action finds the nodes whose answers are stale, the
nodes that pass and the best score with vector operations, and asks the plugins only about nodes
that changed.

The memo outlives a session (the allocate action keeps it) while the configuration is the same
object: plugins are rebuilt each session from that configuration, and a node nobody touched keeps
its generation from one snapshot to the next.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from numasched.api.node import NodeInfo
from numasched.api.resource import Resource

# How many classes are kept; the least recently used goes first.
MAX_CLASSES = 1024
# A class no session asked for in this many sessions is dropped: its answers are for node states
# long gone, and each holds an entry per node.
IDLE_SESSIONS = 8
# The generation of an answer never given (node generations are positive).
NO_ANSWER = -1

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]
Objects = npt.NDArray[Any]


def _grown(array: npt.NDArray[Any], size: int, fill: object) -> npt.NDArray[Any]:
    if len(array) >= size:
        return array
    grown = np.empty(max(size, 2 * len(array)), dtype=array.dtype)
    grown[: len(array)] = array
    grown[len(array) :] = fill
    return grown


class ClassAnswers:
    """One class's answers per node slot: the predicates' (passed, or why not) and the node-order
    score, each with the node generation it holds for."""

    __slots__ = ("failures", "passed", "predicate_generation", "score", "score_generation")

    def __init__(self) -> None:
        self.predicate_generation: Ints = np.full(0, NO_ANSWER, dtype=np.int64)
        self.passed: Bools = np.zeros(0, dtype=np.bool_)
        # Why the node failed (a tuple of Status), None where it passed.
        self.failures: Objects = np.empty(0, dtype=object)
        self.score_generation: Ints = np.full(0, NO_ANSWER, dtype=np.int64)
        self.score: Floats = np.zeros(0, dtype=np.float64)

    def fit(self, size: int) -> None:
        """Room for size slots (new slots hold no answer)."""
        if len(self.passed) >= size:
            return
        self.predicate_generation = _grown(self.predicate_generation, size, NO_ANSWER)
        self.passed = _grown(self.passed, size, False)
        self.failures = _grown(self.failures, size, None)
        self.score_generation = _grown(self.score_generation, size, NO_ANSWER)
        self.score = _grown(self.score, size, 0.0)


class PartAnswers:
    """One class's batch-score parts of one plugin per node slot (Session.add_score_parts): the
    part, the number the plugin reads of it, and the generation they hold for."""

    __slots__ = ("generation", "numbers", "parts")

    def __init__(self) -> None:
        self.generation: Ints = np.full(0, NO_ANSWER, dtype=np.int64)
        self.parts: Objects = np.empty(0, dtype=object)
        self.numbers: Floats = np.zeros(0, dtype=np.float64)

    def fit(self, size: int) -> None:
        if len(self.generation) >= size:
            return
        self.generation = _grown(self.generation, size, NO_ANSWER)
        self.parts = _grown(self.parts, size, None)
        self.numbers = _grown(self.numbers, size, 0.0)


class NodeSlots:
    """A slot per node name, never reused while the memo lives (a node that left keeps its slot,
    whose answers name an old generation)."""

    __slots__ = ("_slot",)

    def __init__(self) -> None:
        self._slot: dict[str, int] = {}

    def of(self, names: Sequence[str]) -> Ints:
        slot = self._slot
        for name in names:
            if name not in slot:
                slot[name] = len(slot)
        return np.fromiter((slot[name] for name in names), dtype=np.int64, count=len(names))

    def __len__(self) -> int:
        return len(self._slot)


class NodeIndex:
    """The nodes an action scans, in its order, with their slots and names as arrays.

    With a touch log (the session's: every node of the session reports its changes there) the
    generations are kept as an array and only the nodes reported since the last read are read
    again; without one, every node is read each time."""

    __slots__ = (
        "_generations",
        "_log",
        "_position",
        "_read",
        "in_slot_order",
        "names",
        "node_objects",
        "nodes",
        "slot_bound",
        "slots",
        "tainted",
    )

    def __init__(self, nodes: Sequence[NodeInfo], slots: NodeSlots, touch_log: list[NodeInfo] | None = None) -> None:
        self.nodes = nodes
        names = [node.name for node in nodes]
        self.slots = slots.of(names)
        self.names: Objects = np.array(names, dtype=object) if names else np.empty(0, dtype=object)
        # The nodes as an array, to pick many at once by position.
        self.node_objects: Objects = np.empty(len(nodes), dtype=object)
        for position, node in enumerate(nodes):
            self.node_objects[position] = node
        # One past the highest slot (the memo's tables must have room for it).
        self.slot_bound = int(self.slots.max()) + 1 if len(nodes) else 0
        # Position i holds slot i (the memo's slots were given in this order): tables are read by
        # slicing rather than by picking every slot.
        self.in_slot_order = bool(np.array_equal(self.slots, np.arange(len(nodes), dtype=np.int64)))
        # Which nodes have taints (a session does not change a node's taints).
        self.tainted: Bools = np.fromiter((bool(node.taints) for node in nodes), dtype=np.bool_, count=len(nodes))
        self._log = touch_log
        self._read = 0 if touch_log is None else len(touch_log)
        self._position = {id(node): position for position, node in enumerate(nodes)}
        self._generations = self._read_all()

    def _read_all(self) -> Ints:
        return np.fromiter((node.generation for node in self.nodes), dtype=np.int64, count=len(self.nodes))

    def position_of(self, node: NodeInfo) -> int | None:
        """Where this very node object sits in the index; None when it is not there."""
        at = self._position.get(id(node))
        return at if at is not None and self.nodes[at] is node else None

    def generations(self) -> Ints:
        """Every node's generation now (they change as the session places pods), as a new array."""
        log = self._log
        if log is None:
            return self._read_all()
        generations = self._generations
        position = self._position
        # From the last entry read before: a node changed again right after is not listed again.
        for step in range(max(0, self._read - 1), len(log)):
            node = log[step]
            at = position.get(id(node))
            if at is not None:
                generations[at] = node.generation
        self._read = len(log)
        return generations.copy()


class ClassKey:
    """A pod class's key (every plugin's part) hashed once: the memo looks a class up several
    times per pod, and the parts (a pod's shape, its selectors) are nested tuples Python would
    hash again each time. Equal when the parts are; EquivalenceMemo.class_key gives pods of one
    class the same object, so lookups compare by identity."""

    __slots__ = ("_hash", "parts")

    def __init__(self, parts: tuple[Hashable, ...]) -> None:
        self.parts = parts
        self._hash = hash(parts)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, ClassKey):
            return NotImplemented
        return self._hash == other._hash and self.parts == other.parts

    def __repr__(self) -> str:
        return f"ClassKey({self.parts!r})"


class EquivalenceMemo:
    """Per class, the answers of every node slot at one generation each."""

    __slots__ = ("_class_keys", "_classes", "_config", "_last_used", "_session", "slots")

    def __init__(self) -> None:
        # One ClassKey per class content (trimmed with the classes).
        self._class_keys: dict[tuple[Hashable, ...], ClassKey] = {}
        self._classes: dict[Hashable, ClassAnswers | PartAnswers] = {}
        self._last_used: dict[Hashable, int] = {}
        self._config: object = None
        self._session = 0
        self.slots = NodeSlots()

    def bind(self, config: object) -> None:
        """Start a session of this configuration: another configuration starts the memo empty;
        classes idle for IDLE_SESSIONS sessions are dropped."""
        self._session += 1
        if config is not self._config:
            self._classes.clear()
            self._last_used.clear()
            self._class_keys.clear()
            self._config = config
            return
        oldest = self._session - IDLE_SESSIONS
        for class_key in [key for key, used in self._last_used.items() if used < oldest]:
            del self._last_used[class_key]
            self._classes.pop(class_key, None)

    def class_key(self, parts: tuple[Hashable, ...]) -> ClassKey:
        """The ClassKey of these parts: the same object for equal parts while the memo knows it."""
        found = self._class_keys.get(parts)
        if found is None:
            if len(self._class_keys) >= 2 * MAX_CLASSES:
                self._class_keys.clear()
            found = self._class_keys[parts] = ClassKey(parts)
        return found

    def _table(self, class_key: Hashable, make: type[ClassAnswers] | type[PartAnswers]) -> ClassAnswers | PartAnswers:
        classes = self._classes
        found = classes.pop(class_key, None)
        if found is None:
            found = make()
            if len(classes) >= MAX_CLASSES:
                dropped = next(iter(classes))
                del classes[dropped]
                self._last_used.pop(dropped, None)
        # Re-inserted last: the dict's order is the order of use.
        classes[class_key] = found
        self._last_used[class_key] = self._session
        found.fit(len(self.slots))
        return found

    def answers(self, class_key: Hashable) -> ClassAnswers:
        table = self._table(class_key, ClassAnswers)
        assert isinstance(table, ClassAnswers)
        return table

    def parts(self, class_key: Hashable) -> PartAnswers:
        table = self._table(class_key, PartAnswers)
        assert isinstance(table, PartAnswers)
        return table

    def __len__(self) -> int:
        return len(self._classes)


def resource_key(resource: Resource) -> Hashable:
    """A Resource as a hashable value, equal exactly when the amounts are."""
    return (resource.milli_cpu, resource.memory, tuple(sorted(resource.scalars.items())))


class Candidates(list[NodeInfo]):
    """The nodes a scan found for a task, in scan order, with where they sit in the scanned
    NodeIndex (positions) and their generations at the scan; index is None for a plain list."""

    __slots__ = ("chosen_at", "generations", "node_index", "positions")

    def __init__(
        self,
        nodes: Sequence[NodeInfo],
        index: NodeIndex | None = None,
        positions: Ints | None = None,
        generations: Ints | None = None,
    ) -> None:
        super().__init__(nodes)
        self.node_index = index
        self.positions: Ints = np.empty(0, dtype=np.int64) if positions is None else positions
        self.generations: Ints = np.empty(0, dtype=np.int64) if generations is None else generations
        # Where the node chosen among them sits (set by the allocate action's choice), so the
        # plugins that place the pod find it without a search (index_of).
        self.chosen_at: int | None = None

    def slots(self) -> Ints | None:
        return None if self.node_index is None else self.node_index.slots[self.positions]

    def index_of(self, node: NodeInfo) -> int | None:
        """The position of this very node object among the candidates; None when not one."""
        chosen = self.chosen_at
        if chosen is not None and chosen < len(self) and self[chosen] is node:
            return chosen
        if self.node_index is not None and len(self.positions) == len(self):
            at = self.node_index.position_of(node)
            if at is None:
                return None
            found = np.flatnonzero(self.positions == at)
            return int(found[0]) if len(found) else None
        return next((position for position, candidate in enumerate(self) if candidate is node), None)

    def any_tainted(self) -> bool:
        """Whether any of the nodes has a taint."""
        if self.node_index is None or len(self.positions) != len(self):
            return any(node.taints for node in self)
        return bool(self.node_index.tainted[self.positions].any())


class CandidateParts:
    """The candidates' score parts in their order, as combine_numbers reads them
    (Session.add_score_parts): taken from the memo's table only where the plugin reads one, so
    a combination that reads only the numbers touches no part. Read them during the combination
    or, for the task being decided, until its placement: the memo rewrites its table for the
    next pod of the class."""

    __slots__ = ("_parts", "_slots")

    def __init__(self, parts: Objects, slots: Ints | None = None) -> None:
        # slots: where each candidate's part sits in `parts`; None: parts are in the candidates' order.
        self._parts = parts
        self._slots = slots

    def __len__(self) -> int:
        return len(self._parts) if self._slots is None else len(self._slots)

    def __getitem__(self, position: int) -> object:
        return self._parts[position if self._slots is None else self._slots[position]]

    def at(self, positions: Ints) -> list[object]:
        """The parts of the candidates at these positions, in that order."""
        found: list[object] = self._parts[positions if self._slots is None else self._slots[positions]].tolist()
        return found

    def tolist(self) -> list[object]:
        """Every candidate's part, in the candidates' order."""
        found: list[object] = (self._parts if self._slots is None else self._parts[self._slots]).tolist()
        return found
