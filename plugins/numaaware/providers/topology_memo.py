"""Values derived from a node's NumaTopology, built once per topology object and shared by content.

Providers derive indexes from the topology (CPU layout, per-NUMA tables) on every call; the
topology is immutable and shared across calls, so the index only has to be built once. A
NumaTopology holds dicts and so cannot be hashed: TopologyMemo keys its entries by object identity
and drops them when the topology is garbage-collected.

Most of a cluster is a dozen machine shapes repeated, and every update of a node's topology
object (an NRT write) is a new object: a table that depends only on a part of the topology (the
CPU rows, one device group) is therefore also kept by that part's content (ContentMemo), so nodes
of one shape, and a node's successive topology objects, build it once.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from numasched.api.topology import NumaTopology

Derived = TypeVar("Derived")
Shared = TypeVar("Shared")

# Values a ContentMemo keeps alive after their last user is gone, newest first: a node whose
# topology object is replaced (the old one collected before the new one is read) finds its tables
# still there.
DEFAULT_RECENT = 64


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


class ContentMemo(Generic[Shared]):
    """build(), remembered per content key for as long as anyone holds the value.

    Entries are weak: a value lives while some per-object memo (a live topology) or the last
    `recent` builds hold it, so the memo never outgrows the cluster however many distinct shapes
    pass through it (50,000 shapes seen once each leave at most `recent` values behind). Values
    must be immutable in everything a caller can tell apart: every holder of the key gets the same
    object. A failing build raises to its caller and is not remembered, so an error names the node
    whose topology was being read.
    """

    __slots__ = ("_entries", "_recent")

    def __init__(self, recent: int = DEFAULT_RECENT) -> None:
        self._entries: weakref.WeakValueDictionary[Hashable, Shared] = weakref.WeakValueDictionary()
        self._recent: deque[Shared] = deque(maxlen=recent)

    def get(self, key: Hashable, build: Callable[[], Shared]) -> Shared:
        value = self._entries.get(key)
        if value is None:
            value = build()
            self._entries[key] = value
            self._recent.appendleft(value)
        return value

    def __len__(self) -> int:
        return len(self._entries)
