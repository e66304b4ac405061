"""merge's set-based fast path against the kubelet's exhaustive fold over every combination, and the
per-topology indexes the CPU and device providers keep.

The exhaustive walk (policy._merge_exhaustive) is the kubelet's algorithm as written; merge must
return the same hint and admit flag for every input, policy and option.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numasched.api.hint import ResourceHints, TopologyHint
from numasched.api.idset import IdSet
from numasched.api.numamask import NumaMask, iterate_masks
from numasched.api.resource import Resource
from numasched.api.task import QosClass
from numasched.api.topology import (
    PREFER_CLOSEST_NUMA_NODES,
    CpuInfo,
    DeviceGroup,
    DeviceInfo,
    KubeletPolicies,
    NumaTopology,
    TopologyPolicy,
)
from numasched.plugins.numaaware.admission import MergeMemo, _merge, rejection_reason
from numasched.plugins.numaaware.policy import (
    HintMerger,
    ReadHints,
    _merge_exhaustive,
    max_of_min_affinity_counts,
    merge,
)
from numasched.plugins.numaaware.providers.base import FreeResources, HintRequest
from numasched.plugins.numaaware.providers.cpu import CpuNodeIndex, CpuTopologyError, cpu_hint_table
from numasched.plugins.numaaware.providers.device import DeviceGroupIndex, device_hint_table
from numasched.plugins.numaaware.providers.topology_memo import TopologyMemo

Scenario = tuple[list[int], list[ResourceHints | None], dict[int, dict[int, int]]]


@st.composite
def scenarios(draw: st.DrawFn, max_numa: int = 8) -> Scenario:
    numa_ids = sorted(draw(st.sets(st.integers(0, max_numa - 1), min_size=1, max_size=max_numa)))
    # Masks over the machine's nodes mostly, sometimes naming a node it does not have.
    mask = st.sets(st.integers(0, max_numa), max_size=len(numa_ids) + 1).map(NumaMask.from_ids)
    hint = st.builds(TopologyHint, st.one_of(st.none(), mask), st.booleans())
    resource_hints: st.SearchStrategy[Sequence[TopologyHint] | None] = st.one_of(st.none(), st.lists(hint, max_size=6))
    provider = st.one_of(
        st.none(),
        st.dictionaries(st.sampled_from(["cpu", "memory", "gpu", "nic"]), resource_hints, max_size=3),
    )
    providers_hints: list[ResourceHints | None] = draw(st.lists(provider, max_size=3))
    distances: dict[int, dict[int, int]] = {a: {} for a in numa_ids}
    for a in numa_ids:
        for b in numa_ids:
            distances[a][b] = 10 if a == b else draw(st.sampled_from([11, 12, 20, 21, 30]))
    return numa_ids, providers_hints, distances


@settings(max_examples=500, deadline=None)
@given(scenarios(), st.sampled_from(list(TopologyPolicy)), st.booleans(), st.booleans())
def test_fast_merge_equals_exhaustive_walk(
    scenario: Scenario, policy: TopologyPolicy, prefer_closest: bool, with_distances: bool
) -> None:
    numa_ids, providers_hints, distances = scenario
    table = distances if with_distances else None
    expected = _merge_exhaustive(policy, providers_hints, numa_ids, prefer_closest=prefer_closest, distances=table)
    actual = merge(policy, providers_hints, numa_ids, prefer_closest=prefer_closest, distances=table)
    assert actual == expected


@st.composite
def read_scenarios(draw: st.DrawFn) -> tuple[list[int], list[ResourceHints | None]]:
    """Providers' hints given as ReadHints (read once when made), as tuples or as lists, on
    machines of up to 6 NUMA nodes, with masks that also name NUMA ids the machine lacks (up to 63)."""
    numa_ids = sorted(draw(st.sets(st.integers(0, 5), min_size=1, max_size=6)))
    ids = st.sets(st.one_of(st.sampled_from(numa_ids), st.integers(0, 63)), max_size=4)
    hint = st.builds(TopologyHint, st.one_of(st.none(), ids.map(NumaMask.from_ids)), st.booleans())
    kinds: list[Any] = [ReadHints, tuple, list]
    hints = st.tuples(st.lists(hint, max_size=8), st.sampled_from(kinds)).map(lambda pair: pair[1](pair[0]))
    resource_hints: st.SearchStrategy[Sequence[TopologyHint] | None] = st.one_of(st.none(), hints)
    provider = st.one_of(st.none(), st.dictionaries(st.sampled_from(["cpu", "gpu", "nic"]), resource_hints, max_size=3))
    return numa_ids, draw(st.lists(provider, max_size=4))


@settings(max_examples=400, deadline=None)
@given(read_scenarios(), st.sampled_from(list(TopologyPolicy)))
def test_merge_of_hints_read_once_is_the_kubelets_fold(
    scenario: tuple[list[int], list[ResourceHints | None]], policy: TopologyPolicy
) -> None:
    numa_ids, providers_hints = scenario
    plain: list[ResourceHints | None] = [
        None if given is None else {r: None if h is None else list(h) for r, h in given.items()}
        for given in providers_hints
    ]
    assert merge(policy, providers_hints, numa_ids) == _merge_exhaustive(policy, plain, numa_ids)


@given(
    st.lists(st.builds(TopologyHint, st.one_of(st.none(), st.integers(0, (1 << 64) - 1).map(NumaMask)), st.booleans()))
)
def test_a_hint_reading_is_what_the_hints_state(hints: list[TopologyHint]) -> None:
    reading = ReadHints(hints).reading
    stated = {hint.affinity.bits for hint in hints if hint.affinity is not None}
    assert reading.stated == stated
    supersets = reading.supersets_within(12)
    for mask in range(0, 1 << 12, 7):
        assert supersets[mask] == sum(1 for bits in stated if bits & mask == mask)
    assert sorted(reading.stated_low().tolist()) == sorted(bits & 0xFFF for bits in stated)
    assert reading.preferred == {hint.affinity.bits for hint in hints if hint.preferred and hint.affinity is not None}
    assert reading.preferred_any == any(hint.preferred and hint.affinity is None for hint in hints)
    assert reading.keeps == any(hint.affinity is None for hint in hints)
    assert reading.fewest == max_of_min_affinity_counts([hints])


def _as_tuples(given: ResourceHints | None) -> ResourceHints | None:
    return None if given is None else {r: None if h is None else tuple(h) for r, h in given.items()}


@settings(max_examples=200, deadline=None)
@given(st.lists(scenarios(max_numa=4), min_size=1, max_size=8))
def test_remembered_merges_are_the_kubelets_fold_of_the_very_hints_asked(cases: list[Scenario]) -> None:
    """admission._merge with one memo shared by many calls (as numa-aware keeps it across nodes):
    every answer is the exhaustive fold of that call's own hints, policy and NUMA nodes, never one
    remembered for others."""
    memo = MergeMemo()
    # Tuples, as the providers' tables give them (the memo answers for those by identity).
    as_tuples = [([_as_tuples(given) for given in hints], ids) for ids, hints, _ in cases]
    for providers_hints, numa_ids in as_tuples * 2:
        for ids in (numa_ids, [*numa_ids, 7]):
            topology = NumaTopology(node_name="n", numa_ids=tuple(ids))
            for policy in TopologyPolicy:
                expected = _merge_exhaustive(policy, providers_hints, ids)
                assert _merge(policy, providers_hints, topology, memo) == expected


@settings(max_examples=150, deadline=None)
@given(st.lists(scenarios(max_numa=4), min_size=1, max_size=6), st.booleans())
def test_refusal_reasons_with_remembered_merges_are_those_merged_anew(
    cases: list[Scenario], prefer_closest: bool
) -> None:
    """rejection_reason asks the memo (shared by many calls, as admit_pod does) for each resource
    alone: the reason is the one the plain merge gives, with and without prefer-closest-numa-nodes."""
    memo = MergeMemo()
    options = {PREFER_CLOSEST_NUMA_NODES: "true"} if prefer_closest else {}
    request = HintRequest(pod="ns/p", container="c", requests=Resource(4000, 0, {"gpu": 2000}), qos=QosClass.GUARANTEED)
    free = FreeResources(cpus=IdSet.parse("0-3"))
    for _ in range(2):
        for numa_ids, hints, distances in cases:
            topology = NumaTopology(
                node_name="n",
                numa_ids=tuple(numa_ids),
                distances=distances,
                policies=KubeletPolicies(topology_manager_options=options),
            )
            providers_hints = [_as_tuples(given) for given in hints]
            for policy in TopologyPolicy:
                expected = rejection_reason(request, providers_hints, policy, topology, free)
                assert rejection_reason(request, providers_hints, policy, topology, free, memo) == expected


def test_hints_given_as_a_list_are_merged_anew_each_time() -> None:
    """A list may change after the call, so the memo never answers for one by its identity."""
    memo = MergeMemo()
    topology = NumaTopology(node_name="n", numa_ids=(0, 1))
    hints = [TopologyHint(NumaMask.of(0), True)]
    first = _merge(TopologyPolicy.SINGLE_NUMA_NODE, [{"cpu": hints}], topology, memo)
    hints[:] = [TopologyHint(NumaMask.of(0, 1), False)]
    second = _merge(TopologyPolicy.SINGLE_NUMA_NODE, [{"cpu": hints}], topology, memo)
    assert first == (TopologyHint(NumaMask.of(0), True), True)
    assert second == (TopologyHint(None, False), False)
    assert len(memo) == 0


@st.composite
def dense_lists(draw: st.DrawFn) -> tuple[NumaMask, list[list[TopologyHint]]]:
    # Provider-shaped lists: many masks per resource, few of them preferred, so that most inputs
    # end in the non-preferred fold.
    numa_ids = list(range(draw(st.integers(1, 5))))
    masks = list(iterate_masks(numa_ids))
    hint = st.builds(TopologyHint, st.sampled_from(masks), st.just(False))
    preferred = st.builds(TopologyHint, st.one_of(st.none(), st.sampled_from(masks)), st.just(True))
    resource = st.lists(st.one_of(hint, hint, hint, preferred), min_size=1, max_size=8)
    return NumaMask.from_ids(numa_ids), draw(st.lists(resource, max_size=4))


@settings(max_examples=300, deadline=None)
@given(dense_lists(), st.booleans(), st.data())
def test_merger_fast_fold_equals_walk(
    case: tuple[NumaMask, list[list[TopologyHint]]], prefer_closest: bool, data: st.DataObject
) -> None:
    default, lists = case
    distances = {
        a: {b: 10 if a == b else data.draw(st.sampled_from([11, 21, 32])) for b in default.ids()} for a in default.ids()
    }
    merger = HintMerger.create(default, lists, prefer_closest=prefer_closest, distances=distances)
    assert merger.merge() == merger.merge_exhaustive()


@st.composite
def wide_lists(draw: st.DrawFn) -> tuple[NumaMask, list[list[TopologyHint]]]:
    # NUMA ids up to 40: defaults wider than the flag table (the fold on sets) as well as narrow ones.
    numa_ids = sorted(draw(st.sets(st.integers(0, 40), min_size=1, max_size=5)))
    masks = list(iterate_masks(numa_ids))
    hint = st.builds(TopologyHint, st.one_of(st.none(), st.sampled_from(masks)), st.booleans())
    return NumaMask.from_ids(numa_ids), draw(st.lists(st.lists(hint, min_size=1, max_size=6), max_size=4))


@settings(max_examples=300, deadline=None)
@given(wide_lists(), st.booleans())
def test_merger_fold_on_any_numa_ids_equals_walk(
    case: tuple[NumaMask, list[list[TopologyHint]]], prefer_closest: bool
) -> None:
    default, lists = case
    distances = {a: {b: 10 if a == b else 10 + abs(a - b) for b in default.ids()} for a in default.ids()}
    merger = HintMerger.create(default, lists, prefer_closest=prefer_closest, distances=distances)
    assert merger.merge() == merger.merge_exhaustive()


@settings(max_examples=300, deadline=None)
@given(dense_lists(), st.booleans())
def test_flag_table_fold_equals_the_fold_on_sets(
    case: tuple[NumaMask, list[list[TopologyHint]]], prefer_closest: bool
) -> None:
    """The vectorised non-preferred fold picks, among the same reachable masks, the mask the
    per-mask sort key picks."""
    default, lists = case
    distances = {a: {b: 10 if a == b else 10 + 3 * abs(a - b) for b in default.ids()} for a in default.ids()}
    merger = HintMerger.create(default, lists, prefer_closest=prefer_closest, distances=distances)
    reachable = merger.reachable_bits()
    assert set(merger.reachable_array().tolist()) == reachable
    expected = min(reachable, key=merger.non_preferred_key) if reachable else None
    assert merger.best_non_preferred_bits() == expected


def test_non_preferred_target_is_the_widest_of_the_narrowest_stated_masks() -> None:
    lists = [
        [TopologyHint(NumaMask.of(0, 1), False), TopologyHint(NumaMask.of(3), False), TopologyHint(None, True)],
        [TopologyHint(NumaMask.of(1, 2), False), TopologyHint(NumaMask.of(0, 1, 2), False)],
        [TopologyHint(None, False)],
    ]
    assert HintMerger.create(NumaMask.of(0, 1, 2, 3), lists).target == 2
    assert HintMerger(NumaMask.of(0, 1, 2, 3), (), 3).target == 3


def test_eight_numa_full_cross_product_is_not_walked() -> None:
    # 255 hints per resource, three resources: 16.5 million combinations for the walk.
    numa_ids = list(range(8))
    every_mask = [TopologyHint(mask, mask.count() == 2) for mask in iterate_masks(numa_ids)]
    providers: list[ResourceHints | None] = [{"cpu": every_mask}, {"gpu": every_mask}, {"memory": every_mask}]
    best, admit = merge(TopologyPolicy.RESTRICTED, providers, numa_ids)
    assert (best, admit) == (TopologyHint(NumaMask.of(0, 1), True), True)
    none_preferred: list[ResourceHints | None] = [
        {"cpu": [TopologyHint(hint.affinity, False) for hint in every_mask]},
        {"gpu": every_mask[8:]},
        {"memory": [TopologyHint(NumaMask.of(6, 7), False), TopologyHint(NumaMask.of(5), True)]},
    ]
    best, admit = merge(TopologyPolicy.BEST_EFFORT, none_preferred, numa_ids)
    # Target width 2 (the gpu list's narrowest); {6,7} is reachable only by non-preferred hints.
    assert (best, admit) == (TopologyHint(NumaMask.of(6, 7), False), True)
    assert merge(TopologyPolicy.RESTRICTED, none_preferred, numa_ids)[1] is False


# -- per-topology indexes ---------------------------------------------------------------------------


def small_topology(name: str) -> NumaTopology:
    cpus = tuple(CpuInfo(cpu=c, core=c % 4, socket=(c % 4) // 2, numa=(c % 4) // 2, l3=(c % 4) // 2) for c in range(8))
    return NumaTopology(node_name=name, numa_ids=(0, 1), cpus=cpus)


def test_topology_memo_builds_once_per_topology_object_and_forgets_collected_ones() -> None:
    built: list[str] = []

    def build(topology: NumaTopology) -> str:
        built.append(topology.node_name)
        return topology.node_name.upper()

    memo = TopologyMemo(build)
    first, twin = small_topology("a"), small_topology("a")
    assert memo.get(first) == "A" and memo.get(first) == "A"
    assert memo.get(twin) == "A"
    assert built == ["a", "a"]
    del first
    gc.collect()
    assert len(memo) == 1
    assert memo.get(twin) == "A" and built == ["a", "a"]


def test_topology_memo_does_not_remember_a_failed_build() -> None:
    calls: list[int] = []

    def build(topology: NumaTopology) -> CpuNodeIndex:
        calls.append(1)
        return CpuNodeIndex.of(topology)

    memo = TopologyMemo(build)
    empty = NumaTopology(node_name="bare", numa_ids=(0,))
    for _ in range(2):
        with pytest.raises(CpuTopologyError, match="bare"):
            memo.get(empty)
    assert len(calls) == 2 and len(memo) == 0


def test_cpu_hints_with_a_kept_index_equal_a_fresh_build() -> None:
    topology = small_topology("n")
    index = CpuNodeIndex.of(topology)
    for free in ["0-7", "0,2,4", "1,3", "5"]:
        for count in range(1, 6):
            assert cpu_hint_table(topology, IdSet.parse(free), count, index=index) == cpu_hint_table(
                topology, IdSet.parse(free), count
            )


@st.composite
def device_cases(draw: st.DrawFn) -> tuple[DeviceGroup, list[str], int]:
    numa = st.one_of(st.none(), st.integers(0, 3))
    devices = tuple(DeviceInfo(f"d{i}", draw(numa)) for i in range(draw(st.integers(1, 8))))
    names = [device.id for device in devices]
    partitions: tuple[frozenset[str], ...] = ()
    if draw(st.booleans()):
        partitions = tuple(
            frozenset(part) for part in draw(st.lists(st.sets(st.sampled_from(names), min_size=1), max_size=3))
        )
    free = draw(st.lists(st.sampled_from([*names, "unknown"]), max_size=10))
    return DeviceGroup("example.com/dev", devices, partitions), free, draw(st.integers(0, 6))


@settings(max_examples=300, deadline=None)
@given(device_cases())
def test_device_hints_count_devices_per_mask_and_partition(case: tuple[DeviceGroup, list[str], int]) -> None:
    group, free, request = case
    numa_ids = [0, 1, 2, 3]
    actual = device_hint_table(group, numa_ids, free, request, index=DeviceGroupIndex.of(group, numa_ids))
    assert actual == device_hint_table(group, numa_ids, free, request)
    # Reference: count, for every mask, the devices of each partition whose NUMA node is in it.
    if request <= 0 or all(device.numa is None for device in group.devices):
        assert actual is None
        return
    free_ids = {device_id for device_id in free if device_id in group.by_id}
    if len(free_ids) < request:
        assert actual == ()
        return
    blocks = list(group.partitions) or [frozenset(group.by_id)]

    def most_in(mask: NumaMask, ids: set[str] | frozenset[str]) -> int:
        return max(
            sum(1 for d in block if d in ids and (n := group.by_id[d].numa) is not None and mask.is_set(n))
            for block in blocks
        )

    masks = list(iterate_masks(numa_ids))
    every = set(group.by_id)
    narrowest = min((mask.count() for mask in masks if most_in(mask, every) >= request), default=len(numa_ids))
    expected = tuple(TopologyHint(m, m.count() == narrowest) for m in masks if most_in(m, free_ids) >= request)
    assert actual == expected


@settings(max_examples=100, deadline=None)
@given(device_cases(), st.lists(st.tuples(st.lists(st.integers(0, 9), max_size=10), st.integers(0, 6))))
def test_device_hints_remembered_by_free_ids_are_those_computed_anew(
    case: tuple[DeviceGroup, list[str], int], asks: list[tuple[list[int], int]]
) -> None:
    """One index asked for many free sets (repeated, reordered, with duplicates and ids the group
    does not have), requests and unknown holdings: every answer is the one a fresh index gives."""
    group, _, _ = case
    names = [device.id for device in group.devices] + ["unknown"]
    numa_ids = [0, 1, 2, 3]
    index = DeviceGroupIndex.of(group, numa_ids)
    for picks, request in asks * 2:
        free = tuple(names[pick % len(names)] for pick in picks)
        for unknown in (0, 2, 1):
            remembered = device_hint_table(group, numa_ids, free, request, index=index, unknown=unknown)
            assert remembered == device_hint_table(group, numa_ids, list(free), request, unknown=unknown)


def test_equal_cpu_hints_from_different_free_counts_are_one_tuple() -> None:
    """The merge memo finds merged hints by the tuple's identity: hints of equal content from other
    free counts must be the very same tuple, and hints of other content another one."""
    topology = small_topology("a")
    index = CpuNodeIndex.of(topology)
    numa0, numa1 = (
        IdSet(c.cpu for c in topology.cpus if c.numa == 0),
        IdSet(c.cpu for c in topology.cpus if c.numa == 1),
    )
    both = cpu_hint_table(topology, numa0 | numa1, 2, index=index)
    fewer = cpu_hint_table(topology, IdSet(list(numa0)[:3]) | numa1, 2, index=index)
    assert both == fewer and both is fewer
    one_side = cpu_hint_table(topology, numa1, 2, index=index)
    assert one_side != both and one_side is not both
