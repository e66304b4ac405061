"""merge's set-based fast path against the kubelet's exhaustive fold over every combination.

The exhaustive walk (policy._merge_exhaustive) is the kubelet's algorithm as written; merge must
return the same hint and admit flag for every input, policy and option, and merge_admits must
agree with merge's admit flag.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from numasched.api.hint import ResourceHints, TopologyHint
from numasched.api.numamask import NumaMask, iterate_masks
from numasched.api.topology import TopologyPolicy
from numasched.plugins.numaaware.policy import HintMerger, _merge_exhaustive, merge, merge_admits

Scenario = tuple[list[int], list[ResourceHints | None], dict[int, dict[int, int]]]


@st.composite
def scenarios(draw: st.DrawFn, max_numa: int = 8) -> Scenario:
    numa_ids = sorted(draw(st.sets(st.integers(0, max_numa - 1), min_size=1, max_size=max_numa)))
    # Masks over the machine's nodes mostly, sometimes naming a node it does not have.
    mask = st.sets(st.integers(0, max_numa), max_size=len(numa_ids) + 1).map(NumaMask.from_ids)
    hint = st.builds(TopologyHint, st.one_of(st.none(), mask), st.booleans())
    resource_hints = st.one_of(st.none(), st.lists(hint, max_size=6))
    provider = st.one_of(
        st.none(),
        st.dictionaries(st.sampled_from(["cpu", "memory", "gpu", "nic"]), resource_hints, max_size=3),
    )
    providers_hints = draw(st.lists(provider, max_size=3))
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
    assert (
        merge_admits(policy, providers_hints, numa_ids, prefer_closest=prefer_closest, distances=table) is (expected[1])
    )


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
    assert merger.has_preferred() is merger.merge_exhaustive().preferred


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
    assert merge_admits(TopologyPolicy.RESTRICTED, none_preferred, numa_ids) is False
    assert merge_admits(TopologyPolicy.BEST_EFFORT, none_preferred, numa_ids) is True
