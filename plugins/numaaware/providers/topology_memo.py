"""Values derived from a node's NumaTopology, built once per topology object.

Providers derive indexes from the topology (CPU layout, per-NUMA tables) on every call; the
topology is immutable and shared across calls, so the index only has to be built once. A
NumaTopology holds dicts and so cannot be hashed: entries are keyed by object identity and
dropped when the topology is garbage-collected.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Generic, TypeVar

from numasched.api.topology import NumaTopology

Derived = TypeVar("Derived")


class TopologyMemo(Generic[Derived]):
    """build(topology), remembered per live topology object."""

    __slots__ = ("_build", "_entries")

    def __init__(self, build: Callable[[NumaTopology], Derived]) -> None:
        self._build = build
        self._entries: dict[int, tuple[weakref.ref[NumaTopology], Derived]] = {}

    def get(self, topology: NumaTopology) -> Derived:
        key = id(topology)
        entry = self._entries.get(key)
        if entry is not None and entry[0]() is topology:
            return entry[1]
        # A failing build raises here and is not remembered.
        value = self._build(topology)
        entries = self._entries

        def forget(ref: weakref.ref[NumaTopology]) -> None:
            current = entries.get(key)
            if current is not None and current[0] is ref:
                del entries[key]

        entries[key] = (weakref.ref(topology, forget), value)
        return value

    def __len__(self) -> int:
        return len(self._entries)
