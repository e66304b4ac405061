"""The mask-based CPU choice against the per-CPU implementation it replaced, kept here as an oracle.

The reference below is the previous CpuLayout / free-view / accumulator, verbatim in behaviour:
every free view was rebuilt from `layout.info[cpu]` one CPU at a time. The two must agree on
every order, count, choice and error, on the fixture machines and on arbitrary (also irregular)
topologies.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from itertools import combinations
from typing import TypeVar

import pytest
from conftest import load_machine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numasched.api.idset import IdSet
from numasched.api.topology import CpuInfo, NumaTopology
from numasched.cache.convert_topology import numatopology_to_topology
from numasched.cache.machine_shapes import machine_objects
from numasched.plugins.numaaware.providers.cpu_assignment import (
    CpuAccumulator,
    CpuAssignmentError,
    take_distributed,
    take_packed,
)
from numasched.plugins.numaaware.providers.cpu_layout import CpuLayout, CpuTopologyError

# -- the reference: the previous implementation -----------------------------------------------------

_CoreKey = tuple[int, int]
_Key = TypeVar("_Key", int, _CoreKey)
_Item = TypeVar("_Item")


def _ref_core_key(info: CpuInfo) -> _CoreKey:
    return (info.core, info.socket)


class _RefLayout:
    def __init__(self, topology: NumaTopology) -> None:
        info: dict[int, CpuInfo] = {}
        by_numa: dict[int, set[int]] = {}
        by_socket: dict[int, set[int]] = {}
        by_core: dict[_CoreKey, set[int]] = {}
        by_uncore: dict[int, set[int]] = {}
        for cpu in topology.cpus:
            info[cpu.cpu] = cpu
            by_numa.setdefault(cpu.numa, set()).add(cpu.cpu)
            by_socket.setdefault(cpu.socket, set()).add(cpu.cpu)
            by_core.setdefault(_ref_core_key(cpu), set()).add(cpu.cpu)
            by_uncore.setdefault(cpu.l3, set()).add(cpu.cpu)
        total = len(info)
        self.info = info
        self.cpus_by_numa = {key: frozenset(value) for key, value in by_numa.items()}
        self.cpus_by_socket = {key: frozenset(value) for key, value in by_socket.items()}
        self.cpus_by_core = {key: frozenset(value) for key, value in by_core.items()}
        self.cpus_by_uncore = {key: frozenset(value) for key, value in by_uncore.items()}
        self.cpus_per_core = total // len(by_core)
        self.cpus_per_socket = total // len(by_socket)
        self.cpus_per_uncore = total // len(by_uncore)
        self.numa_first = len(by_socket) >= len(by_numa)

    def physical_cpus(self, cpus: Iterable[int], excluded: Iterable[int] = ()) -> frozenset[int]:
        pool = frozenset(cpus)
        blocked = {_ref_core_key(self.info[cpu]) for cpu in excluded if cpu in self.info}
        result: set[int] = set()
        for key, threads in self.cpus_by_core.items():
            if key not in blocked and threads <= pool:
                result |= threads
        return frozenset(result)


def _ref_round3(value: float) -> float:
    return math.floor(value * 1000 + 0.5) / 1000


def _ref_standard_deviation(values: Sequence[int]) -> float:
    mean = _ref_round3(sum(values) / len(values))
    variance = sum((value - mean) * (value - mean) for value in values) / len(values)
    return _ref_round3(math.sqrt(variance))


def _ref_by_free_then_id(keys: Iterable[_Key], free_count: dict[_Key, int]) -> list[_Key]:
    return sorted(keys, key=lambda key: (free_count[key], key))


def _ref_extend_unique(target: list[_Item], seen: set[_Item], items: Iterable[_Item]) -> None:
    for item in items:
        if item not in seen:
            seen.add(item)
            target.append(item)


class _RefFreeView:
    def __init__(self, layout: _RefLayout, free: Iterable[int]) -> None:
        self.in_numa: dict[int, int] = {}
        self.in_socket: dict[int, int] = {}
        self.in_core: dict[_CoreKey, int] = {}
        self.in_uncore: dict[int, int] = {}
        self.numas_in_socket: dict[int, set[int]] = {}
        self.sockets_in_numa: dict[int, set[int]] = {}
        self.cores_in_socket: dict[int, set[_CoreKey]] = {}
        self.cores_in_numa: dict[int, set[_CoreKey]] = {}
        self.uncores_in_numa: dict[int, set[int]] = {}
        self.cpus_in_core: dict[_CoreKey, list[int]] = {}
        for cpu in free:
            info = layout.info[cpu]
            key = _ref_core_key(info)
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


class _RefAccumulator:
    def __init__(self, layout: _RefLayout, available: Iterable[int], count: int) -> None:
        self.layout = layout
        self.free: set[int] = set(available)
        self.result: set[int] = set()
        self.needed = count

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

    def view(self) -> _RefFreeView:
        return _RefFreeView(self.layout, self.free)

    def free_in_numa(self, numa: int) -> set[int]:
        return set(self.layout.cpus_by_numa.get(numa, frozenset()) & self.free)

    def sorted_numa_nodes(self, view: _RefFreeView | None = None) -> list[int]:
        view = view or self.view()
        if self.layout.numa_first:
            return _ref_by_free_then_id(view.in_numa, view.in_numa)
        result: list[int] = []
        seen: set[int] = set()
        for socket in self.sorted_sockets(view):
            _ref_extend_unique(result, seen, _ref_by_free_then_id(view.numas_in_socket[socket], view.in_numa))
        return result

    def sorted_sockets(self, view: _RefFreeView | None = None) -> list[int]:
        view = view or self.view()
        if not self.layout.numa_first:
            return _ref_by_free_then_id(view.in_socket, view.in_socket)
        result: list[int] = []
        seen: set[int] = set()
        for numa in self.sorted_numa_nodes(view):
            _ref_extend_unique(result, seen, _ref_by_free_then_id(view.sockets_in_numa[numa], view.in_socket))
        return result

    def sorted_cores(self, view: _RefFreeView | None = None) -> list[_CoreKey]:
        view = view or self.view()
        result: list[_CoreKey] = []
        seen: set[_CoreKey] = set()
        if self.layout.numa_first:
            for socket in self.sorted_sockets(view):
                _ref_extend_unique(result, seen, _ref_by_free_then_id(view.cores_in_socket[socket], view.in_core))
        else:
            for numa in self.sorted_numa_nodes(view):
                _ref_extend_unique(result, seen, _ref_by_free_then_id(view.cores_in_numa[numa], view.in_core))
        return result

    def sorted_uncore_caches(self, view: _RefFreeView | None = None) -> list[int]:
        view = view or self.view()
        result: list[int] = []
        seen: set[int] = set()
        for numa in self.sorted_numa_nodes(view):
            _ref_extend_unique(result, seen, _ref_by_free_then_id(view.uncores_in_numa[numa], view.in_uncore))
        return result

    def sorted_cpus(self) -> list[int]:
        view = self.view()
        result: list[int] = []
        for key in self.sorted_cores(view):
            result.extend(sorted(view.cpus_in_core[key]))
        return result

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
        per_core = self.layout.cpus_per_core
        cores_needed = (self.needed + per_core - 1) // per_core
        view = self.view()
        cores = sorted(key for key, count in view.in_core.items() if count and self._core_in_cache(key, cache))
        chosen: list[int] = []
        for key in cores[:cores_needed]:
            chosen.extend(cpu for cpu in view.cpus_in_core[key] if self.layout.info[cpu].l3 == cache)
        chosen.sort()
        if self.needed % 2 != 0 and per_core > 1 and len(chosen) > self.needed:
            chosen = chosen[:-1]
        if len(chosen) == self.needed:
            self.take(chosen)

    def _core_in_cache(self, key: _CoreKey, cache: int) -> bool:
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
        total_numas = len(self.layout.cpus_by_numa)
        available_numas = len(self.view().in_numa)
        total_groups = (len(self.layout.info) - 1) // cpu_group_size + 1
        groups_per_numa = (total_groups - 1) // total_numas + 1
        groups_needed = (self.needed - 1) // cpu_group_size + 1
        least = (groups_needed - 1) // groups_per_numa + 1
        most = min(groups_needed, available_numas)
        return least, most


def _ref_not_enough(count: int, available: int) -> CpuAssignmentError:
    return CpuAssignmentError(f"not enough cpus available to satisfy request: requested={count}, available={available}")


def _ref_take_packed(
    layout: _RefLayout, available: frozenset[int], count: int, align_by_uncorecache: bool
) -> frozenset[int]:
    acc = _RefAccumulator(layout, available, count)
    if acc.is_satisfied():
        return frozenset()
    if acc.is_failed():
        raise _ref_not_enough(count, len(available))
    steps: list[Callable[[], None]] = [acc.take_first_level, acc.take_second_level]
    if align_by_uncorecache:
        steps.append(acc.take_uncore_caches)
    steps += [acc.take_full_cores, acc.take_remaining_cpus]
    for step in steps:
        step()
        if acc.is_satisfied():
            return frozenset(acc.result)
    raise CpuAssignmentError(f"failed to allocate cpus: {acc.needed} of {count} still needed")


def _ref_spread_remainder(
    free_after: dict[int, int], subset: Sequence[int], remainder: int, cpu_group_size: int
) -> dict[int, int] | None:
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
            return None
    return after


def _ref_take_distributed(
    layout: _RefLayout, available: frozenset[int], count: int, cpu_group_size: int
) -> frozenset[int]:
    if count % cpu_group_size != 0:
        return _ref_take_packed(layout, available, count, False)
    acc = _RefAccumulator(layout, available, count)
    if acc.is_satisfied():
        return frozenset()
    if acc.is_failed():
        raise _ref_not_enough(count, len(available))

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
                local_best = _ref_standard_deviation(list(free_after.values()))
            subset_size = len(remainder_candidates)
            while remainder > 0 and subset_size >= 1:
                for subset in combinations(remainder_candidates, subset_size):
                    if sum(free_after[numa] for numa in subset) < remainder:
                        continue
                    spread = _ref_spread_remainder(free_after, subset, remainder, cpu_group_size)
                    if spread is None:
                        continue
                    balance = _ref_standard_deviation(list(spread.values()))
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
            acc.take(_ref_take_packed(layout, frozenset(acc.free_in_numa(numa)), distribution, False))
        remainder = count - distribution * len(best_combo)
        while remainder > 0:
            progressed = False
            for numa in best_remainder:
                if remainder == 0:
                    break
                pool = acc.free_in_numa(numa)
                if len(pool) < cpu_group_size:
                    continue
                acc.take(_ref_take_packed(layout, frozenset(pool), cpu_group_size, False))
                remainder -= cpu_group_size
                progressed = True
            if not progressed:
                break
        if acc.needed != 0:
            raise CpuAssignmentError(f"accounting error: {acc.needed} CPUs left to allocate after distribution")
        return frozenset(acc.result)

    return _ref_take_packed(layout, available, count, False)


# -- topologies and free sets -----------------------------------------------------------------------

FIXTURE_MACHINES = ("dgx1-v100", "hgx-h100", "dgx-a100", "epyc-1s-nps4", "pcie-8gpu-2numa")
FIXTURE_TOPOLOGIES = {
    name: numatopology_to_topology(machine_objects(load_machine(name), name)[1]) for name in FIXTURE_MACHINES
}


@st.composite
def regular_topologies(draw: st.DrawFn) -> NumaTopology:
    """Sockets x NUMA nodes x cores x threads, caches over runs of cores, ids shuffled or sparse."""
    sockets = draw(st.integers(1, 3))
    numas_per_socket = draw(st.integers(1, 3))
    # NUMA nodes that hold several sockets (the kubelet's "multi socket per NUMA" shape).
    sockets_per_numa = draw(st.sampled_from([1, 1, 2])) if numas_per_socket == 1 else 1
    cores_per_numa = draw(st.integers(1, 4))
    threads = draw(st.integers(1, 2))
    cores_per_cache = draw(st.integers(1, 4))
    rows: list[tuple[int, int, int, int]] = []
    for socket in range(sockets):
        for local_numa in range(numas_per_socket):
            numa = (socket // sockets_per_numa) if sockets_per_numa > 1 else socket * numas_per_socket + local_numa
            for local_core in range(cores_per_numa):
                core = local_numa * cores_per_numa + local_core
                cache = (socket * numas_per_socket * cores_per_numa + core) // cores_per_cache
                rows.extend((core, socket, numa, cache) for _ in range(threads))
    ids = draw(st.permutations(range(len(rows) + draw(st.integers(0, 8)))))[: len(rows)]
    cpus = tuple(CpuInfo(cpu=cpu, core=c, socket=s, numa=n, l3=u) for cpu, (c, s, n, u) in zip(ids, rows, strict=True))
    return NumaTopology(node_name="regular", numa_ids=tuple(sorted({info.numa for info in cpus})), cpus=cpus)


@st.composite
def irregular_topologies(draw: st.DrawFn) -> NumaTopology:
    """Any assignment of CPUs to cores, sockets, NUMA nodes and caches, however inconsistent."""
    ids = draw(st.sets(st.integers(0, 40), min_size=1, max_size=24))
    # Few distinct values make shared cores, and cores split across NUMA nodes and caches, common.
    cores, sockets, numas, caches = (draw(st.integers(0, top)) for top in (5, 2, 3, 3))
    cpus = tuple(
        CpuInfo(
            cpu=cpu,
            core=draw(st.integers(0, cores)),
            socket=draw(st.integers(0, sockets)),
            numa=draw(st.integers(0, numas)),
            l3=draw(st.integers(0, caches)),
        )
        for cpu in sorted(ids)
    )
    return NumaTopology(node_name="irregular", numa_ids=tuple(sorted({info.numa for info in cpus})), cpus=cpus)


topologies = st.one_of(
    st.sampled_from(sorted(FIXTURE_TOPOLOGIES)).map(FIXTURE_TOPOLOGIES.__getitem__),
    regular_topologies(),
    irregular_topologies(),
)


@st.composite
def free_sets(draw: st.DrawFn, topology: NumaTopology) -> frozenset[int]:
    """Free CPUs as a cluster leaves them: whole NUMA nodes or cores gone, then random holes."""
    cpus = sorted(info.cpu for info in topology.cpus)
    keep = draw(st.floats(0.0, 1.0))
    rng = draw(st.randoms(use_true_random=False))
    free = {cpu for cpu in cpus if rng.random() < keep}
    by_numa: dict[int, set[int]] = {}
    for info in topology.cpus:
        by_numa.setdefault(info.numa, set()).add(info.cpu)
    for numa in draw(st.sets(st.sampled_from(sorted(by_numa)), max_size=2)):
        if draw(st.booleans()):
            free |= by_numa[numa]
        else:
            free -= by_numa[numa]
    return frozenset(free)


Outcome = tuple[str, object]


def _outcome(choose: Callable[[], frozenset[int]]) -> Outcome:
    try:
        return ("cpus", choose())
    except CpuAssignmentError as error:
        return ("error", str(error))


# -- properties ---------------------------------------------------------------------------------------

_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(st.data(), topologies)
def test_orders_and_counts_match_reference(data: st.DataObject, topology: NumaTopology) -> None:
    free = data.draw(free_sets(topology))
    layout, reference = CpuLayout.from_topology(topology), _RefLayout(topology)
    acc, ref = CpuAccumulator(layout, free, 0), _RefAccumulator(reference, free, 0)
    view, ref_view = acc.view(), ref.view()
    assert view.in_numa == ref_view.in_numa
    assert view.in_socket == ref_view.in_socket
    assert view.in_uncore == ref_view.in_uncore
    assert view.in_core == ref_view.in_core
    assert acc.sorted_numa_nodes() == ref.sorted_numa_nodes()
    assert acc.sorted_sockets() == ref.sorted_sockets()
    assert acc.sorted_cores() == ref.sorted_cores()
    assert acc.sorted_uncore_caches() == ref.sorted_uncore_caches()
    assert acc.sorted_cpus() == ref.sorted_cpus()
    for group in {1, reference.cpus_per_core}:
        acc.needed = ref.needed = data.draw(st.integers(1, len(reference.info)))
        assert acc.numa_nodes_needed(group) == ref.numa_nodes_needed(group)


@_SETTINGS
@given(st.data(), topologies, st.booleans())
def test_packed_choice_matches_reference(data: st.DataObject, topology: NumaTopology, by_uncore: bool) -> None:
    free = data.draw(free_sets(topology))
    count = data.draw(st.integers(0, len(free) + 1))
    layout, reference = CpuLayout.from_topology(topology), _RefLayout(topology)
    got = _outcome(lambda: take_packed(layout, free, count, by_uncore))
    assert got == _outcome(lambda: _ref_take_packed(reference, free, count, by_uncore))


@_SETTINGS
@given(st.data(), topologies)
def test_distributed_choice_matches_reference(data: st.DataObject, topology: NumaTopology) -> None:
    free = data.draw(free_sets(topology))
    layout, reference = CpuLayout.from_topology(topology), _RefLayout(topology)
    group = data.draw(st.sampled_from(sorted({1, reference.cpus_per_core})))
    count = data.draw(st.integers(0, len(free) + 1))
    if data.draw(st.booleans()):
        count -= count % group
    got = _outcome(lambda: take_distributed(layout, free, count, group))
    assert got == _outcome(lambda: _ref_take_distributed(reference, free, count, group))


@_SETTINGS
@given(st.data(), topologies)
def test_physical_cpus_match_reference(data: st.DataObject, topology: NumaTopology) -> None:
    pool = data.draw(free_sets(topology))
    excluded = data.draw(free_sets(topology)) if data.draw(st.booleans()) else frozenset()
    # Ids the topology does not list are ignored in both.
    strays = {max(info.cpu for info in topology.cpus) + 1, 1 << 12}
    layout, reference = CpuLayout.from_topology(topology), _RefLayout(topology)
    got = layout.physical_cpus(pool | strays, excluded | strays)
    assert got == reference.physical_cpus(pool | strays, excluded | strays)


@pytest.mark.parametrize("name", FIXTURE_MACHINES)
def test_fixture_machine_consumed_to_the_last_cpu(name: str) -> None:
    """Repeated packed requests until the machine is full: the same CPUs, request after request."""
    topology = FIXTURE_TOPOLOGIES[name]
    layout, reference = CpuLayout.from_topology(topology), _RefLayout(topology)
    free = frozenset(topology.allocatable_cpus)
    sizes = [4, 1, 16, 2, 6, 32, 3, 8]
    step = 0
    while free:
        count = min(sizes[step % len(sizes)], len(free))
        got = take_packed(layout, free, count, step % 2 == 1)
        assert got == _ref_take_packed(reference, free, count, step % 2 == 1), (name, step)
        free -= got
        step += 1


def test_unknown_cpus_are_refused_by_name() -> None:
    layout = CpuLayout.from_topology(FIXTURE_TOPOLOGIES["dgx1-v100"])
    beyond = max(layout.info) + 1
    with pytest.raises(CpuTopologyError, match=f"CPUs {beyond} are not in the node's topology"):
        take_packed(layout, {0, beyond}, 1, False)
    with pytest.raises(CpuTopologyError, match="CPUs -1 are not"):
        CpuAccumulator(layout, [-1, 2], 1)


def test_sparse_ids_inside_the_mask_are_refused() -> None:
    topology = NumaTopology(
        node_name="sparse",
        numa_ids=(0,),
        cpus=(CpuInfo(cpu=0, core=0, socket=0, numa=0, l3=0), CpuInfo(cpu=4, core=1, socket=0, numa=0, l3=0)),
    )
    layout = CpuLayout.from_topology(topology)
    assert take_packed(layout, IdSet([0, 4]), 2, False) == frozenset({0, 4})
    with pytest.raises(CpuTopologyError, match="CPUs 2 are not"):
        take_packed(layout, [0, 2], 1, False)
