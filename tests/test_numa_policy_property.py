"""merge against a brute-force oracle written from the stated ordering, not from the kubelet's fold.

The oracle enumerates every combination with nested index counters, keeps all non-empty merged
hints, and picks the minimum of an explicit total order:
  preferred first; among preferred: fewer NUMA nodes, then (prefer-closest) smaller average
  distance, then the lower mask value; among non-preferred, with T = the largest of each
  resource's narrowest stated width: width == T first, then widths below T (wider first), then
  widths above T (narrower first), ties as for preferred.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from numasched.api.hint import ResourceHints, TopologyHint
from numasched.api.numamask import NumaMask
from numasched.api.topology import TopologyPolicy
from numasched.plugins.numaaware.policy import merge


def oracle_lists(providers_hints: list[ResourceHints | None]) -> list[list[TopologyHint]]:
    lists: list[list[TopologyHint]] = []
    for provider in providers_hints:
        if provider is None or len(provider) == 0:
            lists.append([TopologyHint(None, True)])
            continue
        for resource in provider:
            hints = provider[resource]
            if hints is None:
                lists.append([TopologyHint(None, True)])
            elif len(hints) == 0:
                lists.append([TopologyHint(None, False)])
            else:
                lists.append(list(hints))
    return lists


def all_combinations(lists: list[list[TopologyHint]]) -> list[list[TopologyHint]]:
    if any(len(hints) == 0 for hints in lists):
        return []
    indexes = [0] * len(lists)
    found: list[list[TopologyHint]] = []
    while True:
        found.append([lists[i][indexes[i]] for i in range(len(lists))])
        position = len(lists) - 1
        while position >= 0:
            indexes[position] += 1
            if indexes[position] < len(lists[position]):
                break
            indexes[position] = 0
            position -= 1
        if position < 0:
            return found


def mean_distance(ids: list[int], distances: dict[int, dict[int, int]]) -> float:
    pairs = [distances[a][b] for a in ids for b in ids]
    return sum(pairs) / len(pairs)


def oracle(
    policy: TopologyPolicy,
    providers_hints: list[ResourceHints | None],
    numa_ids: list[int],
    prefer_closest: bool,
    distances: dict[int, dict[int, int]],
) -> tuple[TopologyHint, bool]:
    if policy is TopologyPolicy.NONE:
        return TopologyHint(None, False), True
    all_bits = sum(1 << i for i in numa_ids)
    lists = oracle_lists(providers_hints)
    single = policy is TopologyPolicy.SINGLE_NUMA_NODE
    if single:
        lists = [
            [h for h in hints if h.preferred and (h.affinity is None or len(h.affinity.ids()) == 1)] for hints in lists
        ]
        prefer_closest = False
    widths = [
        min(len(h.affinity.ids()) for h in hints if h.affinity is not None)
        for hints in lists
        if any(h.affinity is not None for h in hints)
    ]
    target = max(widths, default=0)

    candidates: list[tuple[int, bool]] = []
    for combination in all_combinations(lists):
        bits = all_bits
        stated = [h.affinity.bits for h in combination if h.affinity is not None]
        for value in stated:
            bits &= value
        preferred = all(h.preferred for h in combination) and len(set(stated)) <= 1
        if bits:
            candidates.append((bits, preferred))

    def key(candidate: tuple[int, bool]) -> tuple[Any, ...]:
        bits, preferred = candidate
        ids = [i for i in range(64) if bits >> i & 1]
        width = len(ids)
        closeness = mean_distance(ids, distances) if prefer_closest else 0.0
        if preferred:
            return (0, width, closeness, bits)
        if width == target:
            return (1, 0, closeness, bits)
        if width < target:
            return (2, -width, closeness, bits)
        return (3, width, closeness, bits)

    if candidates:
        bits, preferred = min(candidates, key=key)
        best = TopologyHint(NumaMask(bits), preferred)
    else:
        best = TopologyHint(NumaMask(all_bits), False)
    if single and best.affinity == NumaMask(all_bits):
        best = TopologyHint(None, best.preferred)
    admit = True if policy is TopologyPolicy.BEST_EFFORT else best.preferred
    return best, admit


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[int], list[ResourceHints | None], dict[int, dict[int, int]]]:
    numa_ids = sorted(draw(st.sets(st.integers(0, 5), min_size=1, max_size=4)))
    hint_strategy = st.builds(
        TopologyHint,
        st.one_of(
            st.none(),
            st.sets(st.sampled_from(numa_ids), max_size=len(numa_ids)).map(NumaMask.from_ids),
        ),
        st.booleans(),
    )
    resource_hints: st.SearchStrategy[Sequence[TopologyHint] | None] = st.one_of(
        st.none(), st.lists(hint_strategy, max_size=4)
    )
    provider = st.one_of(
        st.none(),
        st.dictionaries(st.sampled_from(["cpu", "memory", "gpu", "nic"]), resource_hints, max_size=3),
    )
    providers_hints: list[ResourceHints | None] = draw(st.lists(provider, max_size=3))
    distances: dict[int, dict[int, int]] = {a: {} for a in numa_ids}
    for a in numa_ids:
        for b in numa_ids:
            if a == b:
                distances[a][b] = 10
            elif b < a:
                distances[a][b] = distances[b][a]
            else:
                distances[a][b] = draw(st.sampled_from([11, 12, 20, 21, 30]))
    return numa_ids, providers_hints, distances


@settings(max_examples=400, deadline=None)
@given(scenarios(), st.sampled_from(list(TopologyPolicy)), st.booleans())
def test_merge_matches_brute_force_oracle(
    scenario: tuple[list[int], list[ResourceHints | None], dict[int, dict[int, int]]],
    policy: TopologyPolicy,
    prefer_closest: bool,
) -> None:
    numa_ids, providers_hints, distances = scenario
    expected = oracle(policy, providers_hints, numa_ids, prefer_closest, distances)
    actual = merge(policy, providers_hints, numa_ids, prefer_closest=prefer_closest, distances=distances)
    assert actual == expected


@settings(max_examples=200, deadline=None)
@given(scenarios(), st.sampled_from(list(TopologyPolicy)))
def test_merge_ignores_provider_order(
    scenario: tuple[list[int], list[ResourceHints | None], dict[int, dict[int, int]]], policy: TopologyPolicy
) -> None:
    numa_ids, providers_hints, _ = scenario
    forward = merge(policy, providers_hints, numa_ids)
    backward = merge(policy, list(reversed(providers_hints)), numa_ids)
    assert forward == backward


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_admitted_hint_is_narrowest_possible_under_restricted(
    scenario: tuple[list[int], list[ResourceHints | None], dict[int, dict[int, int]]],
) -> None:
    # A restricted admission implies a best-effort one with the same hint.
    numa_ids, providers_hints, _ = scenario
    restricted = merge(TopologyPolicy.RESTRICTED, providers_hints, numa_ids)
    best_effort = merge(TopologyPolicy.BEST_EFFORT, providers_hints, numa_ids)
    assert restricted[0] == best_effort[0]
    assert best_effort[1] is True
    assert restricted[1] is restricted[0].preferred
