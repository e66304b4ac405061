"""An index of a node's CPU topology for the CPU manager's take-by-topology algorithms.

The kubelet's CPUTopology counts sockets, cores, NUMA nodes and uncore caches over every online
CPU (reserved ones included) and assumes they are uniform: "CPUs per core" is all CPUs divided by
all cores, and so on. The same arithmetic is kept here so that "is this core / socket free" means
exactly what it means on the node.

The layout is built once per node topology. Hints need only its per-NUMA sets; the CPU choice
reads `layout.bits_index`, built on first use: one bit mask per NUMA node, socket and uncore cache
(free counts are popcounts) and per-CPU rows indexed by CPU id (NUMA node, socket, uncore cache,
core ordinal) that C-level `map` can read, so that no step of a choice walks the CPUs in Python.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from operator import attrgetter

import attrs
from bitarray import bitarray, frozenbitarray
from bitarray.util import zeros

from numasched.api.topology import CpuInfo, NumaTopology

# A physical core: (core id, socket id). Core ids may repeat across sockets, so the socket is part
# of the key; the core id comes first because the kubelet orders cores by core id once it has
# already grouped them by socket or NUMA node.
CoreKey = tuple[int, int]

# Row value for ids below the highest CPU id that the topology does not list.
ABSENT = -1


class CpuTopologyError(ValueError):
    """The topology cannot support a CPU assignment (no CPUs, or ids it does not know)."""


def core_key(info: CpuInfo) -> CoreKey:
    return (info.core, info.socket)


def _mask(size: int, cpus: Iterable[int]) -> frozenbitarray:
    bits = zeros(size)
    members = list(cpus)
    if members:
        bits[members] = 1
    return frozenbitarray(bits)


_SOCKET = attrgetter("socket")
_NUMA = attrgetter("numa")
_UNCORE = attrgetter("l3")


def _scattered(size: int, cpus: list[int], values: Iterable[int]) -> tuple[int, ...]:
    """A row indexed by CPU id: the i-th value at the i-th CPU, ABSENT elsewhere."""
    row = [ABSENT] * size
    for _ in map(row.__setitem__, cpus, values):
        pass
    return tuple(row)


@attrs.frozen(slots=True)
class CpuBitIndex:
    """A CpuLayout as bit masks (`size` bits, one per id up to the highest CPU id) and per-CPU rows."""

    size: int
    known: frozenbitarray
    numa_masks: Mapping[int, frozenbitarray]
    socket_masks: Mapping[int, frozenbitarray]
    uncore_masks: Mapping[int, frozenbitarray]
    # Per-CPU rows, indexed by CPU id (ABSENT for ids the topology does not list).
    numa_of: Sequence[int]
    socket_of: Sequence[int]
    uncore_of: Sequence[int]
    core_of: Sequence[int]
    # Cores by ordinal: ordinals follow CoreKey order, so sorting ordinals sorts keys.
    core_keys: Sequence[CoreKey]
    core_cpus: Sequence[tuple[int, ...]]
    # Per uncore cache: every thread of the cores with a thread in it (a core may straddle caches
    # on odd hardware).
    uncore_core_masks: Mapping[int, frozenbitarray]
    # The smallest group of each level: a request below it cannot take a whole one.
    smallest_numa: int
    smallest_socket: int
    smallest_core: int
    smallest_uncore: int

    @classmethod
    def of(cls, layout: CpuLayout) -> CpuBitIndex:
        cpus = list(layout.info)
        rows = list(layout.info.values())
        size = max(cpus) + 1
        core_keys = tuple(sorted(layout.cpus_by_core))
        ordinal_of = {key: ordinal for ordinal, key in enumerate(core_keys)}
        core_of = _scattered(size, cpus, map(ordinal_of.__getitem__, map(core_key, rows)))
        core_cpus = tuple(tuple(sorted(layout.cpus_by_core[key])) for key in core_keys)
        uncore_masks = {key: _mask(size, value) for key, value in layout.cpus_by_uncore.items()}
        # Usually every core lies within one cache and a cache's cores are the cache itself.
        cores_of_uncore = {
            cache: tuple(sorted(set(map(core_of.__getitem__, members))))
            for cache, members in layout.cpus_by_uncore.items()
        }
        return cls(
            size=size,
            known=_mask(size, cpus),
            numa_masks={key: _mask(size, value) for key, value in layout.cpus_by_numa.items()},
            socket_masks={key: _mask(size, value) for key, value in layout.cpus_by_socket.items()},
            uncore_masks=uncore_masks,
            numa_of=_scattered(size, cpus, map(_NUMA, rows)),
            socket_of=_scattered(size, cpus, map(_SOCKET, rows)),
            uncore_of=_scattered(size, cpus, map(_UNCORE, rows)),
            core_of=core_of,
            core_keys=core_keys,
            core_cpus=core_cpus,
            uncore_core_masks={
                cache: _mask(size, (cpu for ordinal in ordinals for cpu in core_cpus[ordinal]))
                if sum(len(core_cpus[ordinal]) for ordinal in ordinals) != len(layout.cpus_by_uncore[cache])
                else uncore_masks[cache]
                for cache, ordinals in cores_of_uncore.items()
            },
            smallest_numa=min(map(len, layout.cpus_by_numa.values())),
            smallest_socket=min(map(len, layout.cpus_by_socket.values())),
            smallest_core=min(map(len, layout.cpus_by_core.values())),
            smallest_uncore=min(map(len, layout.cpus_by_uncore.values())),
        )

    def bits(self, cpus: Iterable[int]) -> bitarray:
        """`cpus` as a mutable mask; raises CpuTopologyError on ids the topology does not list."""
        members = cpus if isinstance(cpus, list) else list(cpus)
        bits = zeros(self.size)
        if not members:
            return bits
        if min(members) < 0 or max(members) >= self.size:
            raise _unknown(self, members)
        bits[members] = 1
        if (bits & ~self.known).any():
            raise _unknown(self, members)
        return bits

    def known_bits(self, cpus: Iterable[int]) -> bitarray:
        """The CPUs of `cpus` that the topology lists, as a mutable mask; other ids are dropped."""
        members = [cpu for cpu in cpus if 0 <= cpu < self.size]
        bits = zeros(self.size)
        if members:
            bits[members] = 1
            bits &= self.known
        return bits


def _unknown(index: CpuBitIndex, cpus: Sequence[int]) -> CpuTopologyError:
    strays = sorted({cpu for cpu in cpus if not 0 <= cpu < index.size or not index.known[cpu]})
    return CpuTopologyError(f"CPUs {','.join(map(str, strays))} are not in the node's topology")


@attrs.frozen(slots=True)
class CpuLayout:
    info: Mapping[int, CpuInfo]
    cpus_by_numa: Mapping[int, frozenset[int]]
    cpus_by_socket: Mapping[int, frozenset[int]]
    cpus_by_core: Mapping[CoreKey, frozenset[int]]
    cpus_by_uncore: Mapping[int, frozenset[int]]
    cpus_per_core: int
    cpus_per_socket: int
    cpus_per_uncore: int
    # NUMA nodes are at least as big as sockets (one or more sockets per NUMA node): the kubelet
    # then takes whole NUMA nodes before whole sockets, and groups sockets under NUMA nodes.
    numa_first: bool

    @property
    def all_cpus(self) -> frozenset[int]:
        return frozenset(self.info)

    @cached_property
    def bits_index(self) -> CpuBitIndex:
        return CpuBitIndex.of(self)

    @classmethod
    def from_topology(cls, topology: NumaTopology) -> CpuLayout:
        if not topology.cpus:
            raise CpuTopologyError(f"node {topology.node_name}: the topology lists no CPUs")
        info: dict[int, CpuInfo] = {}
        by_numa: dict[int, list[int]] = {}
        by_socket: dict[int, list[int]] = {}
        by_core: dict[CoreKey, list[int]] = {}
        by_uncore: dict[int, list[int]] = {}
        for row in topology.cpus:
            cpu = row.cpu
            if cpu in info:
                raise CpuTopologyError(f"node {topology.node_name}: CPU {cpu} is listed twice")
            if cpu < 0:
                raise CpuTopologyError(f"node {topology.node_name}: CPU id {cpu} is negative")
            info[cpu] = row
            by_numa.setdefault(row.numa, []).append(cpu)
            by_socket.setdefault(row.socket, []).append(cpu)
            by_core.setdefault((row.core, row.socket), []).append(cpu)
            by_uncore.setdefault(row.l3, []).append(cpu)
        total = len(info)
        return cls(
            info=info,
            cpus_by_numa={key: frozenset(value) for key, value in by_numa.items()},
            cpus_by_socket={key: frozenset(value) for key, value in by_socket.items()},
            cpus_by_core={key: frozenset(value) for key, value in by_core.items()},
            cpus_by_uncore={key: frozenset(value) for key, value in by_uncore.items()},
            cpus_per_core=total // len(by_core),
            cpus_per_socket=total // len(by_socket),
            cpus_per_uncore=total // len(by_uncore),
            numa_first=len(by_socket) >= len(by_numa),
        )

    def physical_cpus(self, cpus: Iterable[int], excluded: Iterable[int] = ()) -> frozenset[int]:
        """The CPUs of `cpus` whose whole core is in `cpus` and shares no thread with `excluded`.

        This is what full-pcpus-only may hand out: the kubelet treats every sibling of a reserved
        CPU as unavailable so that an allocation never has to split a core.
        """
        index = self.bits_index
        core_of = index.core_of
        pool_cpus = list(index.known_bits(cpus).search(1))
        blocked = set(map(core_of.__getitem__, index.known_bits(excluded).search(1)))
        free_threads = Counter(map(core_of.__getitem__, pool_cpus))
        core_cpus = index.core_cpus
        whole = {
            ordinal
            for ordinal, count in free_threads.items()
            if count == len(core_cpus[ordinal]) and ordinal not in blocked
        }
        return frozenset(cpu for cpu in pool_cpus if core_of[cpu] in whole)
