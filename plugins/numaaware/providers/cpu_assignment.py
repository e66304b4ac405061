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
from collections.abc import Callable, Iterable, Sequence
from itertools import combinations
from typing import TypeVar

from numasched.plugins.numaaware.providers.cpu_layout import CoreKey, CpuLayout, core_key

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
    """Counts and memberships of the still-free CPUs, rebuilt whenever the accumulator sorts."""

    __slots__ = (
        "cores_in_numa",
        "cores_in_socket",
        "cpus_in_core",
        "in_core",
        "in_numa",
        "in_socket",
        "in_uncore",
        "numas_in_socket",
        "sockets_in_numa",
        "uncores_in_numa",
    )

    def __init__(self, layout: CpuLayout, free: Iterable[int]) -> None:
        self.in_numa: dict[int, int] = {}
        self.in_socket: dict[int, int] = {}
        self.in_core: dict[CoreKey, int] = {}
        self.in_uncore: dict[int, int] = {}
        self.numas_in_socket: dict[int, set[int]] = {}
        self.sockets_in_numa: dict[int, set[int]] = {}
        self.cores_in_socket: dict[int, set[CoreKey]] = {}
        self.cores_in_numa: dict[int, set[CoreKey]] = {}
        self.uncores_in_numa: dict[int, set[int]] = {}
        self.cpus_in_core: dict[CoreKey, list[int]] = {}
        for cpu in free:
            info = layout.info[cpu]
            key = core_key(info)
            self.in_numa[info.numa] = self.in_numa.get(info.numa, 0) + 1
            self.in_socket[info.socket] = self.in_socket.get(info.socket, 0) + 1
            self.in_core[key] = self.in_core.get(key, 0) + 1
            self.in_uncore[info.l3] = self.in_uncore.get(info.l3, 0) + 1
            self.numas_in_socket.setdefault(info.socket, set()).add(info.numa)
            self.sockets_in_numa.setdefault(info.numa, set()).add(info.socket)
            self.cores_in_socket.setdefault(info.socket, set()).add(key)
            self.cores_in_numa.setdefault(info.numa, set()).add(key)
            self.uncores_in_numa.setdefault(info.numa, set()).add(info.l3)
            self.cpus_in_core.setdefault(key, []).append(cpu)


class CpuAccumulator:
    """Collects CPUs for one request, level by level, as the kubelet's cpuAccumulator does."""

    def __init__(self, layout: CpuLayout, available: Iterable[int], count: int) -> None:
        self.layout = layout
        self.free: set[int] = set(available)
        self.result: set[int] = set()
        self.needed = count

    # -- state ---------------------------------------------------------------------------------

    def take(self, cpus: Iterable[int]) -> None:
        chosen = set(cpus)
        self.result |= chosen
        self.free -= chosen
        self.needed -= len(chosen)

    def needs_at_least(self, count: int) -> bool:
        return self.needed >= count

    def is_satisfied(self) -> bool:
        return self.needed < 1

    def is_failed(self) -> bool:
        return self.needed > len(self.free)

    def view(self) -> _FreeView:
        return _FreeView(self.layout, self.free)

    def free_in_numa(self, numa: int) -> set[int]:
        return set(self.layout.cpus_by_numa.get(numa, frozenset()) & self.free)

    # -- orders --------------------------------------------------------------------------------

    def sorted_numa_nodes(self, view: _FreeView | None = None) -> list[int]:
        view = view or self.view()
        if self.layout.numa_first:
            return _by_free_then_id(view.in_numa, view.in_numa)
        result: list[int] = []
        seen: set[int] = set()
        for socket in self.sorted_sockets(view):
            _extend_unique(result, seen, _by_free_then_id(view.numas_in_socket[socket], view.in_numa))
        return result

    def sorted_sockets(self, view: _FreeView | None = None) -> list[int]:
        view = view or self.view()
        if not self.layout.numa_first:
            return _by_free_then_id(view.in_socket, view.in_socket)
        result: list[int] = []
        seen: set[int] = set()
        for numa in self.sorted_numa_nodes(view):
            _extend_unique(result, seen, _by_free_then_id(view.sockets_in_numa[numa], view.in_socket))
        return result

    def sorted_cores(self, view: _FreeView | None = None) -> list[CoreKey]:
        view = view or self.view()
        result: list[CoreKey] = []
        seen: set[CoreKey] = set()
        if self.layout.numa_first:
            for socket in self.sorted_sockets(view):
                _extend_unique(result, seen, _by_free_then_id(view.cores_in_socket[socket], view.in_core))
        else:
            for numa in self.sorted_numa_nodes(view):
                _extend_unique(result, seen, _by_free_then_id(view.cores_in_numa[numa], view.in_core))
        return result

    def sorted_uncore_caches(self, view: _FreeView | None = None) -> list[int]:
        view = view or self.view()
        result: list[int] = []
        seen: set[int] = set()
        for numa in self.sorted_numa_nodes(view):
            _extend_unique(result, seen, _by_free_then_id(view.uncores_in_numa[numa], view.in_uncore))
        return result

    def sorted_cpus(self) -> list[int]:
        view = self.view()
        result: list[int] = []
        for key in self.sorted_cores(view):
            result.extend(sorted(view.cpus_in_core[key]))
        return result

    # -- whole levels --------------------------------------------------------------------------

    def take_full_numa_nodes(self) -> None:
        view = self.view()
        free_numas = [
            numa for numa in self.sorted_numa_nodes(view) if view.in_numa[numa] == len(self.layout.cpus_by_numa[numa])
        ]
        for numa in free_numas:
            cpus = self.layout.cpus_by_numa[numa]
            if self.needs_at_least(len(cpus)):
                self.take(cpus)

    def take_full_sockets(self) -> None:
        view = self.view()
        free_sockets = [
            socket for socket in self.sorted_sockets(view) if view.in_socket[socket] == self.layout.cpus_per_socket
        ]
        for socket in free_sockets:
            cpus = self.layout.cpus_by_socket[socket]
            if self.needs_at_least(len(cpus)):
                self.take(cpus)

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
        view = self.view()
        free_caches = [
            cache
            for cache in self.sorted_uncore_caches(view)
            if view.in_uncore[cache] == len(self.layout.cpus_by_uncore[cache])
        ]
        for cache in free_caches:
            cpus = self.layout.cpus_by_uncore[cache]
            if self.needs_at_least(len(cpus)):
                self.take(cpus)

    def take_partial_uncore_cache(self, cache: int) -> None:
        """Claim the rest of the request inside one uncore cache, or nothing."""
        per_core = self.layout.cpus_per_core
        cores_needed = (self.needed + per_core - 1) // per_core
        view = self.view()
        cores = sorted(key for key, count in view.in_core.items() if count and self._core_in_cache(key, cache))
        chosen: list[int] = []
        for key in cores[:cores_needed]:
            chosen.extend(cpu for cpu in view.cpus_in_core[key] if self.layout.info[cpu].l3 == cache)
        chosen.sort()
        # An odd remainder on an SMT machine needs only one thread of the last core: drop the
        # highest-numbered CPU so the rest stay whole cores.
        if self.needed % 2 != 0 and per_core > 1 and len(chosen) > self.needed:
            chosen = chosen[:-1]
        if len(chosen) == self.needed:
            self.take(chosen)

    def _core_in_cache(self, key: CoreKey, cache: int) -> bool:
        return any(self.layout.info[cpu].l3 == cache for cpu in self.layout.cpus_by_core[key])

    def take_uncore_caches(self) -> None:
        for cache in self.sorted_uncore_caches():
            if self.needs_at_least(self.layout.cpus_per_uncore):
                self.take_full_uncore_caches()
            if self.is_satisfied():
                return
            self.take_partial_uncore_cache(cache)
            if self.is_satisfied():
                return

    def take_full_cores(self) -> None:
        view = self.view()
        free_cores = [key for key in self.sorted_cores(view) if view.in_core[key] == self.layout.cpus_per_core]
        for key in free_cores:
            cpus = self.layout.cpus_by_core[key]
            if self.needs_at_least(len(cpus)):
                self.take(cpus)

    def take_remaining_cpus(self) -> None:
        for cpu in self.sorted_cpus():
            self.take((cpu,))
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


def take_packed(layout: CpuLayout, available: frozenset[int], count: int, align_by_uncorecache: bool) -> frozenset[int]:
    acc = CpuAccumulator(layout, available, count)
    if acc.is_satisfied():
        return frozenset()
    if acc.is_failed():
        raise _not_enough(count, len(available))
    steps: list[Callable[[], None]] = [acc.take_first_level, acc.take_second_level]
    if align_by_uncorecache:
        steps.append(acc.take_uncore_caches)
    steps += [acc.take_full_cores, acc.take_remaining_cpus]
    for step in steps:
        step()
        if acc.is_satisfied():
            return frozenset(acc.result)
    raise CpuAssignmentError(f"failed to allocate cpus: {acc.needed} of {count} still needed")


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


def take_distributed(layout: CpuLayout, available: frozenset[int], count: int, cpu_group_size: int) -> frozenset[int]:
    if count % cpu_group_size != 0:
        return take_packed(layout, available, count, False)
    acc = CpuAccumulator(layout, available, count)
    if acc.is_satisfied():
        return frozenset()
    if acc.is_failed():
        raise _not_enough(count, len(available))

    numas = acc.sorted_numa_nodes()
    free_in = {numa: len(acc.free_in_numa(numa)) for numa in numas}
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
            acc.take(take_packed(layout, frozenset(acc.free_in_numa(numa)), distribution, False))
        remainder = count - distribution * len(best_combo)
        while remainder > 0:
            progressed = False
            for numa in best_remainder:
                if remainder == 0:
                    break
                pool = acc.free_in_numa(numa)
                if len(pool) < cpu_group_size:
                    continue
                acc.take(take_packed(layout, frozenset(pool), cpu_group_size, False))
                remainder -= cpu_group_size
                progressed = True
            if not progressed:
                break
        if acc.needed != 0:
            raise CpuAssignmentError(f"accounting error: {acc.needed} CPUs left to allocate after distribution")
        return frozenset(acc.result)

    return take_packed(layout, available, count, False)
