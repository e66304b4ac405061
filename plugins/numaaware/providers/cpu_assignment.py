"""The kubelet CPU manager's CPU choice: packed take-by-topology and the NUMA-distributed variant.

Facts carried over from the kubelet's static policy (cpu_assignment.go):

Packed ("takeByTopologyNUMAPacked"): take whole NUMA nodes then whole sockets when NUMA nodes are
at least as big as sockets, otherwise whole sockets then whole NUMA nodes; then, with the
prefer-align-cpus-by-uncorecache option, whole uncore caches and a partial one that satisfies the
rest; then whole physical cores; then single threads. Every level is walked in the order "fewest
free CPUs first, then lowest id", nested under the enclosing level, which packs allocations into
the most used parts of the machine and keeps big free blocks intact.

Distributed ("takeByTopologyNUMADistributed", distribute-cpus-across-numa): find the smallest
number of NUMA nodes that can share the request evenly in groups of `cpu_group_size` CPUs, choose
the combination (and where remainder groups go) that leaves the free CPUs per NUMA node most
balanced (lowest standard deviation, rounded to 3 decimals), and take each share packed.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from itertools import combinations
from typing import TypeVar

from bitarray import bitarray, frozenbitarray
from bitarray.util import count_and, zeros

from numasched.plugins.numaaware.providers.cpu_layout import CoreKey, CpuBitIndex, CpuLayout

_Key = TypeVar("_Key", int, CoreKey)
_Item = TypeVar("_Item")


class CpuAssignmentError(ValueError):
    """The available CPUs cannot satisfy the request."""


def _round3(value: float) -> float:
    # Go's math.Round rounds half away from zero; Python's round() would round half to even.
    return math.floor(value * 1000 + 0.5) / 1000


def _mean(values: Sequence[int]) -> float:
    return _round3(sum(values) / len(values))


def _standard_deviation(values: Sequence[int]) -> float:
    mean = _mean(values)
    variance = sum((value - mean) * (value - mean) for value in values) / len(values)
    return _round3(math.sqrt(variance))


def _by_free_then_id(keys: Iterable[_Key], free_count: dict[_Key, int]) -> list[_Key]:
    return sorted(keys, key=lambda key: (free_count[key], key))


def _extend_unique(target: list[_Item], seen: set[_Item], items: Iterable[_Item]) -> None:
    for item in items:
        if item not in seen:
            seen.add(item)
            target.append(item)


class _FreeView:
    """The free CPUs at one moment and their counts per NUMA node, socket, uncore cache and core.

    A snapshot of the accumulator's free mask: counts are popcounts against the layout's masks or
    C-level tallies over its per-CPU rows, and each table is built the first time it is asked for.
    """

    __slots__ = ("_core_counts", "_in_numa", "_in_socket", "_in_uncore", "free", "index")

    def __init__(self, index: CpuBitIndex, free: bitarray) -> None:
        self.index = index
        self.free = frozenbitarray(free)
        self._in_numa: dict[int, int] | None = None
        self._in_socket: dict[int, int] | None = None
        self._in_uncore: dict[int, int] | None = None
        self._core_counts: dict[int, int] | None = None

    @property
    def in_numa(self) -> dict[int, int]:
        if self._in_numa is None:
            self._in_numa = _free_counts(self.free, self.index.numa_masks)
        return self._in_numa

    @property
    def in_socket(self) -> dict[int, int]:
        if self._in_socket is None:
            self._in_socket = _free_counts(self.free, self.index.socket_masks)
        return self._in_socket

    @property
    def in_uncore(self) -> dict[int, int]:
        if self._in_uncore is None:
            self._in_uncore = _free_counts(self.free, self.index.uncore_masks)
        return self._in_uncore

    @property
    def core_counts(self) -> dict[int, int]:
        """Free CPUs per core ordinal, for cores that have any."""
        if self._core_counts is None:
            self._core_counts = Counter(map(self.index.core_of.__getitem__, self.free.search(1)))
        return self._core_counts

    @property
    def in_core(self) -> dict[CoreKey, int]:
        keys = self.index.core_keys
        return {keys[ordinal]: count for ordinal, count in self.core_counts.items()}

    def _rows_in(self, rows: Sequence[int], mask: frozenbitarray) -> set[int]:
        return set(map(rows.__getitem__, (self.free & mask).search(1)))

    def numas_in_socket(self, socket: int) -> set[int]:
        return self._rows_in(self.index.numa_of, self.index.socket_masks[socket])

    def sockets_in_numa(self, numa: int) -> set[int]:
        return self._rows_in(self.index.socket_of, self.index.numa_masks[numa])

    def uncores_in_numa(self, numa: int) -> set[int]:
        return self._rows_in(self.index.uncore_of, self.index.numa_masks[numa])

    def cores_in_socket(self, socket: int) -> dict[int, int]:
        """Free CPUs per core ordinal in this socket (a core never spans sockets: the key says so)."""
        return Counter(map(self.index.core_of.__getitem__, (self.free & self.index.socket_masks[socket]).search(1)))

    def cores_in_numa(self, numa: int) -> dict[int, int]:
        """Free CPUs per core ordinal (the whole core's) for cores with a free CPU in this NUMA node."""
        counts = self.core_counts
        return {ordinal: counts[ordinal] for ordinal in self._rows_in(self.index.core_of, self.index.numa_masks[numa])}


def _free_counts(free: frozenbitarray, masks: Mapping[int, frozenbitarray]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for key, mask in masks.items():
        count = count_and(free, mask)
        if count:
            counts[key] = count
    return counts


class CpuAccumulator:
    """Collects CPUs for one request, level by level, as the kubelet's cpuAccumulator does."""

    __slots__ = ("free", "index", "layout", "needed", "result")

    def __init__(self, layout: CpuLayout, available: Iterable[int], count: int) -> None:
        self.layout = layout
        self.index = layout.bits_index
        self.free: bitarray = self.index.bits(available)
        self.result: bitarray = zeros(self.index.size)
        self.needed = count

    @classmethod
    def of_bits(cls, layout: CpuLayout, available: bitarray, count: int) -> CpuAccumulator:
        """An accumulator over a mask already checked against `layout` (bits_index.size bits)."""
        acc = cls.__new__(cls)
        acc.layout = layout
        acc.index = layout.bits_index
        acc.free = bitarray(available)
        acc.result = zeros(acc.index.size)
        acc.needed = count
        return acc

    # -- state ---------------------------------------------------------------------------------

    def take(self, cpus: Iterable[int]) -> None:
        self.take_bits(self.index.bits(cpus))

    def take_bits(self, chosen: bitarray) -> None:
        self.result |= chosen
        self.free &= ~chosen
        self.needed -= chosen.count()

    def _take_cpus(self, cpus: Sequence[int]) -> None:
        # Ids from the layout itself, unique: no check needed. (bitarray reads a tuple index as
        # several dimensions, hence the list.)
        index = list(cpus)
        self.result[index] = 1
        self.free[index] = 0
        self.needed -= len(index)

    def _take_cpu(self, cpu: int) -> None:
        self.result[cpu] = 1
        self.free[cpu] = 0
        self.needed -= 1

    def needs_at_least(self, count: int) -> bool:
        return self.needed >= count

    def is_satisfied(self) -> bool:
        return self.needed < 1

    def is_failed(self) -> bool:
        return self.needed > self.free.count()

    def view(self) -> _FreeView:
        return _FreeView(self.index, self.free)

    def free_count_in_numa(self, numa: int) -> int:
        return count_and(self.free, self.index.numa_masks[numa])

    def free_bits_in_numa(self, numa: int) -> bitarray:
        free: bitarray = self.free & self.index.numa_masks[numa]
        return free

    # -- orders --------------------------------------------------------------------------------

    def sorted_numa_nodes(self, view: _FreeView | None = None) -> list[int]:
        view = view or self.view()
        if self.layout.numa_first:
            return _by_free_then_id(view.in_numa, view.in_numa)
        result: list[int] = []
        seen: set[int] = set()
        for socket in self.sorted_sockets(view):
            _extend_unique(result, seen, _by_free_then_id(view.numas_in_socket(socket), view.in_numa))
        return result

    def sorted_sockets(self, view: _FreeView | None = None) -> list[int]:
        view = view or self.view()
        if not self.layout.numa_first:
            return _by_free_then_id(view.in_socket, view.in_socket)
        result: list[int] = []
        seen: set[int] = set()
        for numa in self.sorted_numa_nodes(view):
            _extend_unique(result, seen, _by_free_then_id(view.sockets_in_numa(numa), view.in_socket))
        return result

    def _core_order(self, view: _FreeView) -> Iterator[tuple[int, int]]:
        """(core ordinal, its free CPUs) for cores with any, in take order, group by group as consumed."""
        seen: set[int] = set()
        groups: Iterable[dict[int, int]]
        if self.layout.numa_first:
            groups = map(view.cores_in_socket, self.sorted_sockets(view))
        else:
            groups = map(view.cores_in_numa, self.sorted_numa_nodes(view))
        for counts in groups:
            for ordinal in _by_free_then_id(counts, counts):
                if ordinal not in seen:
                    seen.add(ordinal)
                    yield ordinal, counts[ordinal]

    def sorted_cores(self, view: _FreeView | None = None) -> list[CoreKey]:
        view = view or self.view()
        keys = self.index.core_keys
        return [keys[ordinal] for ordinal, _ in self._core_order(view)]

    def sorted_uncore_caches(self, view: _FreeView | None = None) -> list[int]:
        view = view or self.view()
        result: list[int] = []
        seen: set[int] = set()
        for numa in self.sorted_numa_nodes(view):
            _extend_unique(result, seen, _by_free_then_id(view.uncores_in_numa(numa), view.in_uncore))
        return result

    def _free_cpus_in_order(self, view: _FreeView) -> Iterator[int]:
        free = view.free
        core_cpus = self.index.core_cpus
        for ordinal, _ in self._core_order(view):
            for cpu in core_cpus[ordinal]:
                if free[cpu]:
                    yield cpu

    def sorted_cpus(self) -> list[int]:
        return list(self._free_cpus_in_order(self.view()))

    # -- whole levels --------------------------------------------------------------------------
    # A level whose smallest group exceeds the request cannot take anything: it is skipped
    # without looking at the free CPUs. Each level walks one snapshot of them, as the kubelet's
    # list of free groups is computed once before it takes any.

    def take_full_numa_nodes(self) -> None:
        layout = self.layout
        if self.needed < self.index.smallest_numa:
            return
        view = self.view()
        for numa in self.sorted_numa_nodes(view):
            size = len(layout.cpus_by_numa[numa])
            if view.in_numa[numa] == size and self.needs_at_least(size):
                self.take_bits(self.index.numa_masks[numa])

    def take_full_sockets(self) -> None:
        layout = self.layout
        if self.needed < self.index.smallest_socket:
            return
        view = self.view()
        for socket in self.sorted_sockets(view):
            if view.in_socket[socket] == layout.cpus_per_socket and self.needs_at_least(
                len(layout.cpus_by_socket[socket])
            ):
                self.take_bits(self.index.socket_masks[socket])

    def take_first_level(self) -> None:
        if self.layout.numa_first:
            self.take_full_numa_nodes()
        else:
            self.take_full_sockets()

    def take_second_level(self) -> None:
        if self.layout.numa_first:
            self.take_full_sockets()
        else:
            self.take_full_numa_nodes()

    def take_full_uncore_caches(self) -> None:
        layout = self.layout
        if self.needed < self.index.smallest_uncore:
            return
        view = self.view()
        for cache in self.sorted_uncore_caches(view):
            size = len(layout.cpus_by_uncore[cache])
            if view.in_uncore[cache] == size and self.needs_at_least(size):
                self.take_bits(self.index.uncore_masks[cache])

    def take_partial_uncore_cache(self, cache: int) -> None:
        """Claim the rest of the request inside one uncore cache, or nothing."""
        index = self.index
        per_core = self.layout.cpus_per_core
        cores_needed = (self.needed + per_core - 1) // per_core
        free = self.free
        core_cpus = index.core_cpus
        # Cores with any thread in the cache (free or not) and any free thread (in the cache or not).
        cores = sorted(set(map(index.core_of.__getitem__, (free & index.uncore_core_masks[cache]).search(1))))
        uncore_of = index.uncore_of
        chosen = sorted(
            cpu
            for ordinal in cores[:cores_needed]
            for cpu in core_cpus[ordinal]
            if free[cpu] and uncore_of[cpu] == cache
        )
        # An odd remainder on an SMT machine needs only one thread of the last core: drop the
        # highest-numbered CPU so the rest stay whole cores.
        if self.needed % 2 != 0 and per_core > 1 and len(chosen) > self.needed:
            chosen = chosen[:-1]
        if len(chosen) == self.needed:
            self._take_cpus(chosen)

    def take_uncore_caches(self) -> None:
        for position, cache in enumerate(self.sorted_uncore_caches()):
            # The kubelet retries whole caches before every cache; only the first try can take
            # any: a whole cache passed over once is bigger than the request, which only shrinks.
            if position == 0 and self.needs_at_least(self.layout.cpus_per_uncore):
                self.take_full_uncore_caches()
            if self.is_satisfied():
                return
            self.take_partial_uncore_cache(cache)
            if self.is_satisfied():
                return

    def take_full_cores(self) -> None:
        smallest = self.index.smallest_core
        if self.needed < smallest:
            return
        per_core = self.layout.cpus_per_core
        core_cpus = self.index.core_cpus
        for ordinal, free_threads in self._core_order(self.view()):
            threads = core_cpus[ordinal]
            if free_threads == per_core and self.needs_at_least(len(threads)):
                self._take_cpus(threads)
                if self.needed < smallest:
                    return

    def take_remaining_cpus(self) -> None:
        for cpu in self._free_cpus_in_order(self.view()):
            self._take_cpu(cpu)
            if self.is_satisfied():
                return

    def numa_nodes_needed(self, cpu_group_size: int) -> tuple[int, int]:
        """The least and most NUMA nodes that could hold the request in groups of this size."""
        total_numas = len(self.layout.cpus_by_numa)
        available_numas = len(self.view().in_numa)
        total_groups = (len(self.layout.info) - 1) // cpu_group_size + 1
        groups_per_numa = (total_groups - 1) // total_numas + 1
        groups_needed = (self.needed - 1) // cpu_group_size + 1
        least = (groups_needed - 1) // groups_per_numa + 1
        most = min(groups_needed, available_numas)
        return least, most


def _not_enough(count: int, available: int) -> CpuAssignmentError:
    return CpuAssignmentError(f"not enough cpus available to satisfy request: requested={count}, available={available}")


def _packed(acc: CpuAccumulator, count: int, align_by_uncorecache: bool) -> bitarray:
    if acc.is_satisfied():
        return zeros(acc.index.size)
    if acc.is_failed():
        raise _not_enough(count, acc.free.count())
    steps: list[Callable[[], None]] = [acc.take_first_level, acc.take_second_level]
    if align_by_uncorecache:
        steps.append(acc.take_uncore_caches)
    steps += [acc.take_full_cores, acc.take_remaining_cpus]
    for step in steps:
        step()
        if acc.is_satisfied():
            return acc.result
    raise CpuAssignmentError(f"failed to allocate cpus: {acc.needed} of {count} still needed")


def take_packed(layout: CpuLayout, available: Iterable[int], count: int, align_by_uncorecache: bool) -> frozenset[int]:
    acc = CpuAccumulator(layout, available, count)
    return frozenset(_packed(acc, count, align_by_uncorecache).search(1))


def take_packed_bits(layout: CpuLayout, pool: bitarray, count: int, align_by_uncorecache: bool) -> bitarray:
    """take_packed on a mask of `layout.bits_index.size` bits whose CPUs the layout lists (the
    caller checked), answered as such a mask."""
    return _packed(CpuAccumulator.of_bits(layout, pool, count), count, align_by_uncorecache)


def _packed_in(layout: CpuLayout, pool: bitarray, count: int) -> bitarray:
    return _packed(CpuAccumulator.of_bits(layout, pool, count), count, False)


def _spread_remainder(
    free_after: dict[int, int], subset: Sequence[int], remainder: int, cpu_group_size: int
) -> dict[int, int] | None:
    """Hand out remainder CPUs one group per NUMA node per round; None when the subset cannot."""
    after = dict(free_after)
    while remainder > 0:
        progressed = False
        for numa in subset:
            if remainder == 0:
                break
            if after[numa] < cpu_group_size:
                continue
            after[numa] -= cpu_group_size
            remainder -= cpu_group_size
            progressed = True
        if not progressed:
            # The kubelet would spin here forever; treat the subset as unusable instead.
            return None
    return after


def take_distributed(layout: CpuLayout, available: Iterable[int], count: int, cpu_group_size: int) -> frozenset[int]:
    acc = CpuAccumulator(layout, available, count)
    if count % cpu_group_size != 0:
        return frozenset(_packed(acc, count, False).search(1))
    if acc.is_satisfied():
        return frozenset()
    if acc.is_failed():
        raise _not_enough(count, acc.free.count())

    numas = acc.sorted_numa_nodes()
    free_in = {numa: acc.free_count_in_numa(numa) for numa in numas}
    least, most = acc.numa_nodes_needed(cpu_group_size)

    for size in range(least, most + 1):
        best_balance = math.inf
        best_combo: tuple[int, ...] | None = None
        best_remainder: tuple[int, ...] = ()
        for combo in combinations(numas, size):
            if best_balance == 0:
                break
            if sum(free_in[numa] for numa in combo) < count:
                continue
            if sum(free_in[numa] // cpu_group_size for numa in combo) * cpu_group_size < count:
                continue
            distribution = (count // size // cpu_group_size) * cpu_group_size
            if any(free_in[numa] < distribution for numa in combo):
                continue
            free_after = dict(free_in)
            for numa in combo:
                free_after[numa] -= distribution
            remainder = count - distribution * size
            remainder_candidates = [numa for numa in combo if free_after[numa] >= cpu_group_size]

            local_best = math.inf
            local_remainder: tuple[int, ...] = ()
            if remainder == 0:
                local_best = _standard_deviation(list(free_after.values()))
            subset_size = len(remainder_candidates)
            while remainder > 0 and subset_size >= 1:
                for subset in combinations(remainder_candidates, subset_size):
                    if sum(free_after[numa] for numa in subset) < remainder:
                        continue
                    spread = _spread_remainder(free_after, subset, remainder, cpu_group_size)
                    if spread is None:
                        continue
                    balance = _standard_deviation(list(spread.values()))
                    if balance < local_best:
                        local_best = balance
                        local_remainder = subset
                subset_size -= 1

            if local_best < best_balance:
                best_balance = local_best
                best_combo = combo
                best_remainder = local_remainder

        if best_combo is None:
            continue

        distribution = (count // len(best_combo) // cpu_group_size) * cpu_group_size
        for numa in best_combo:
            acc.take_bits(_packed_in(layout, acc.free_bits_in_numa(numa), distribution))
        remainder = count - distribution * len(best_combo)
        while remainder > 0:
            progressed = False
            for numa in best_remainder:
                if remainder == 0:
                    break
                pool = acc.free_bits_in_numa(numa)
                if pool.count() < cpu_group_size:
                    continue
                acc.take_bits(_packed_in(layout, pool, cpu_group_size))
                remainder -= cpu_group_size
                progressed = True
            if not progressed:
                break
        if acc.needed != 0:
            raise CpuAssignmentError(f"accounting error: {acc.needed} CPUs left to allocate after distribution")
        return frozenset(acc.result.search(1))

    return frozenset(_packed(CpuAccumulator.of_bits(layout, acc.free, count), count, False).search(1))
