"""The kubelet Topology Manager's own table tests (pkg/kubelet/cm/topologymanager policy*_test.go),
re-expressed as data and run against numasched's merge.

Notation: a hint is (numa ids or None, preferred); a provider is None (returns no map at all), or
a dict resource -> None | [hints]; "ALL" stands for every NUMA node of the machine under test.
"""

from __future__ import annotations

from typing import Any

import pytest

from numasched.api.hint import ResourceHints, TopologyHint
from numasched.api.numamask import NumaMask
from numasched.api.topology import TopologyPolicy
from numasched.plugins.numaaware.policy import (
    HintMerger,
    check_numa_node_limit,
    filter_single_numa_hints,
    max_of_min_affinity_counts,
    merge,
)

T, F = True, False
TWO_NODES = [0, 1]
FOUR_NODES = [0, 1, 2, 3]
EIGHT_NODES = list(range(8))
# commonNUMAInfoEightNodes (note the asymmetric 7 -> 6 distance of 13, kept as the kubelet has it).
EIGHT_NODE_DISTANCES = {
    0: [10, 11, 12, 12, 30, 30, 30, 30],
    1: [11, 10, 12, 12, 30, 30, 30, 30],
    2: [12, 12, 10, 11, 30, 30, 30, 30],
    3: [12, 12, 11, 10, 30, 30, 30, 30],
    4: [30, 30, 30, 30, 10, 11, 12, 12],
    5: [30, 30, 30, 30, 11, 10, 12, 12],
    6: [30, 30, 30, 30, 12, 12, 10, 11],
    7: [30, 30, 30, 30, 12, 12, 13, 10],
}
DISTANCES = {node: dict(enumerate(row)) for node, row in EIGHT_NODE_DISTANCES.items()}

Case = tuple[str, list[Any], tuple[Any, bool]]


def hint(spec: tuple[Any, bool]) -> TopologyHint:
    ids, preferred = spec
    return TopologyHint(None if ids is None else NumaMask.from_ids(ids), preferred)


def providers(specs: list[Any]) -> list[ResourceHints | None]:
    result: list[ResourceHints | None] = []
    for spec in specs:
        if spec is None:
            result.append(None)
            continue
        result.append({res: None if hints is None else [hint(h) for h in hints] for res, hints in spec.items()})
    return result


def expected_hint(spec: tuple[Any, bool], numa_nodes: list[int]) -> TopologyHint:
    ids, preferred = spec
    return hint((numa_nodes if ids == "ALL" else ids, preferred))


COMMON_CASES: list[Case] = [
    (
        "Two providers, 1 hint each, same mask, both preferred 1/2",
        [{"resource1": [((0,), T)]}, {"resource2": [((0,), T)]}],
        ((0,), T),
    ),
    (
        "Two providers, 1 hint each, same mask, both preferred 2/2",
        [{"resource1": [((1,), T)]}, {"resource2": [((1,), T)]}],
        ((1,), T),
    ),
    ("Two providers, 1 no hints, 1 single hint preferred 1/2", [None, {"resource": [((0,), T)]}], ((0,), T)),
    ("Two providers, 1 no hints, 1 single hint preferred 2/2", [None, {"resource": [((1,), T)]}], ((1,), T)),
    (
        "Two providers, 1 with 2 hints, 1 with single hint matching 1/2",
        [{"resource1": [((0,), T), ((1,), T)]}, {"resource2": [((0,), T)]}],
        ((0,), T),
    ),
    (
        "Two providers, 1 with 2 hints, 1 with single hint matching 2/2",
        [{"resource1": [((0,), T), ((1,), T)]}, {"resource2": [((1,), T)]}],
        ((1,), T),
    ),
    (
        "Two providers, both with 2 hints, matching narrower preferred hint from both",
        [{"resource1": [((0,), T), ((1,), T)]}, {"resource2": [((0,), T), ((0, 1), F)]}],
        ((0,), T),
    ),
    (
        "Ensure less narrow preferred hints are chosen over narrower non-preferred hints",
        [{"resource1": [((1,), T), ((0, 1), F)]}, {"resource2": [((0,), T), ((1,), T), ((0, 1), F)]}],
        ((1,), T),
    ),
    (
        "Multiple resources, same provider",
        [{"resource1": [((1,), T), ((0, 1), F)], "resource2": [((0,), T), ((1,), T), ((0, 1), F)]}],
        ((1,), T),
    ),
]

BEST_EFFORT_CASES: list[Case] = [
    (
        "Two providers, 2 hints each, same mask (some with different bits), same preferred",
        [{"resource1": [((0, 1), T), ((0, 2), T)]}, {"resource2": [((0, 1), T), ((0, 2), T)]}],
        ((0, 1), T),
    ),
    ("TopologyHint not set", [], ("ALL", T)),
    ("HintProvider returns empty non-nil map[string][]TopologyHint", [{}], ("ALL", T)),
    ("HintProvider returns -nil map[string][]TopologyHint from provider", [{"resource": None}], ("ALL", T)),
    ("HintProvider returns empty non-nil map[string][]TopologyHint from provider", [{"resource": []}], ("ALL", F)),
    ("Single TopologyHint with Preferred as true and NUMANodeAffinity as nil", [{"resource": [(None, T)]}], ("ALL", T)),
    (
        "Single TopologyHint with Preferred as false and NUMANodeAffinity as nil",
        [{"resource": [(None, F)]}],
        ("ALL", F),
    ),
    (
        "Two providers, 1 hint each, no common mask",
        [{"resource1": [((0,), T)]}, {"resource2": [((1,), T)]}],
        ("ALL", F),
    ),
    (
        "Two providers, 1 hint each, same mask, 1 preferred, 1 not 1/2",
        [{"resource1": [((0,), T)]}, {"resource2": [((0,), F)]}],
        ((0,), F),
    ),
    (
        "Two providers, 1 hint each, same mask, 1 preferred, 1 not 2/2",
        [{"resource1": [((1,), T)]}, {"resource2": [((1,), F)]}],
        ((1,), F),
    ),
    (
        "Two providers, 1 hint each, 1 wider mask, both preferred 1/2",
        [{"resource1": [((0,), T)]}, {"resource2": [((0, 1), T)]}],
        ((0,), F),
    ),
    (
        "Two providers, 1 with 2 hints, 1 with single non-preferred hint matching",
        [{"resource1": [((0,), T), ((1,), T)]}, {"resource2": [((0, 1), F)]}],
        ((0,), F),
    ),
    (
        "Two providers, 1 hint each, 1 wider mask, both preferred 2/2",
        [{"resource1": [((1,), T)]}, {"resource2": [((0, 1), T)]}],
        ((1,), F),
    ),
    (
        "bestNonPreferredAffinityCount (1)",
        [{"resource1": [((0, 1, 2, 3), F), ((0, 1), F)]}, {"resource2": [((0, 1), F)]}],
        ((0, 1), F),
    ),
    (
        "bestNonPreferredAffinityCount (2)",
        [{"resource1": [((0, 1, 2, 3), F), ((0, 1), F)]}, {"resource2": [((0, 3), F)]}],
        ((0, 3), F),
    ),
    (
        "bestNonPreferredAffinityCount (3)",
        [{"resource1": [((0, 1, 2, 3), F), ((0, 1), F)]}, {"resource2": [((1, 2), F)]}],
        ((1, 2), F),
    ),
    (
        "bestNonPreferredAffinityCount (4)",
        [{"resource1": [((0, 1, 2, 3), F), ((0, 1), F)]}, {"resource2": [((2, 3), F)]}],
        ((2, 3), F),
    ),
]

CASE_5_PROVIDERS = [
    {"resource1": [((0, 1, 2, 3), F), ((0, 1), F)]},
    {"resource2": [((1, 2), F), ((2, 3), F)]},
]
CASE_6_PROVIDERS = [
    {"resource1": [((0, 1, 2, 3), F), ((0, 1), F)]},
    {"resource2": [((1, 2, 3), F), ((1, 2), F), ((1, 3), F), ((2, 3), F)]},
]

NO_OPTION_CASES: list[Case] = [
    ("bestNonPreferredAffinityCount (5)", CASE_5_PROVIDERS, ((1, 2), F)),
    ("bestNonPreferredAffinityCount (6)", CASE_6_PROVIDERS, ((1, 2), F)),
]

CLOSEST_CASES: list[Case] = [
    (
        "Two providers, 2 hints each, same mask (some with different bits), same preferred",
        [{"resource1": [((0, 4), T), ((0, 2), T)]}, {"resource2": [((0, 4), T), ((0, 2), T)]}],
        ((0, 2), T),
    ),
    (
        "Two providers, 2 hints each, different mask",
        [{"resource1": [((4,), T), ((0, 2), T)]}, {"resource2": [((4,), T), ((0, 2), T)]}],
        ((4,), T),
    ),
    ("bestNonPreferredAffinityCount (5)", CASE_5_PROVIDERS, ((2, 3), F)),
    ("bestNonPreferredAffinityCount (6)", CASE_6_PROVIDERS, ((2, 3), F)),
]

SINGLE_NUMA_CASES: list[Case] = [
    ("TopologyHint not set", [], (None, T)),
    ("HintProvider returns empty non-nil map[string][]TopologyHint", [{}], (None, T)),
    ("HintProvider returns -nil map[string][]TopologyHint from provider", [{"resource": None}], (None, T)),
    ("HintProvider returns empty non-nil map[string][]TopologyHint from provider", [{"resource": []}], (None, F)),
    ("Single TopologyHint with Preferred as true and NUMANodeAffinity as nil", [{"resource": [(None, T)]}], (None, T)),
    ("Single TopologyHint with Preferred as false and NUMANodeAffinity as nil", [{"resource": [(None, F)]}], (None, F)),
    ("Two providers, 1 hint each, no common mask", [{"resource1": [((0,), T)]}, {"resource2": [((1,), T)]}], (None, F)),
    (
        "Two providers, 1 hint each, same mask, 1 preferred, 1 not 1/2",
        [{"resource1": [((0,), T)]}, {"resource2": [((0,), F)]}],
        (None, F),
    ),
    (
        "Two providers, 1 hint each, same mask, 1 preferred, 1 not 2/2",
        [{"resource1": [((1,), T)]}, {"resource2": [((1,), F)]}],
        (None, F),
    ),
    (
        "Two providers, 1 with 2 hints, 1 with single non-preferred hint matching",
        [{"resource1": [((0,), T), ((1,), T)]}, {"resource2": [((0, 1), F)]}],
        (None, F),
    ),
    (
        "Single NUMA hint generation",
        [{"resource1": [((0, 1), T)], "resource2": [((0,), T), ((1,), T), ((0, 1), F)]}],
        (None, F),
    ),
    ("One no-preference provider", [{"resource1": [((0,), T), ((1,), T), ((0, 1), F)]}, None], ((0,), T)),
]


def _ids(cases: list[Case]) -> list[str]:
    return [name for name, _, _ in cases]


# TestPolicyBestEffortMerge / TestPolicyRestrictedMerge: four NUMA nodes, no options.
@pytest.mark.parametrize("policy", [TopologyPolicy.BEST_EFFORT, TopologyPolicy.RESTRICTED])
@pytest.mark.parametrize(
    ("name", "specs", "expected"),
    COMMON_CASES + BEST_EFFORT_CASES + NO_OPTION_CASES,
    ids=_ids(COMMON_CASES + BEST_EFFORT_CASES + NO_OPTION_CASES),
)
def test_best_effort_and_restricted_merge(
    policy: TopologyPolicy, name: str, specs: list[Any], expected: tuple[Any, bool]
) -> None:
    best, admit = merge(policy, providers(specs), FOUR_NODES)
    want = expected_hint(expected, FOUR_NODES)
    assert best == want, name
    assert admit is (True if policy is TopologyPolicy.BEST_EFFORT else want.preferred)


# TestPolicyBestEffortMergeClosestNUMA / TestPolicyRestrictedMergeClosestNUMA: eight NUMA nodes.
@pytest.mark.parametrize("policy", [TopologyPolicy.BEST_EFFORT, TopologyPolicy.RESTRICTED])
@pytest.mark.parametrize(
    ("name", "specs", "expected"),
    COMMON_CASES + BEST_EFFORT_CASES + CLOSEST_CASES,
    ids=_ids(COMMON_CASES + BEST_EFFORT_CASES + CLOSEST_CASES),
)
def test_merge_prefer_closest_numa(
    policy: TopologyPolicy, name: str, specs: list[Any], expected: tuple[Any, bool]
) -> None:
    best, admit = merge(policy, providers(specs), EIGHT_NODES, prefer_closest=True, distances=DISTANCES)
    want = expected_hint(expected, EIGHT_NODES)
    assert best == want, name
    assert admit is (True if policy is TopologyPolicy.BEST_EFFORT else want.preferred)


# TestPolicySingleNumaNodeMerge: two NUMA nodes.
@pytest.mark.parametrize(
    ("name", "specs", "expected"),
    COMMON_CASES + SINGLE_NUMA_CASES,
    ids=_ids(COMMON_CASES + SINGLE_NUMA_CASES),
)
def test_single_numa_node_merge(name: str, specs: list[Any], expected: tuple[Any, bool]) -> None:
    best, admit = merge(TopologyPolicy.SINGLE_NUMA_NODE, providers(specs), TWO_NODES)
    assert best == expected_hint(expected, TWO_NODES), name
    assert admit is best.preferred


def test_single_numa_node_ignores_prefer_closest() -> None:
    # {0,4} vs {0,2} cannot matter (both are wider than one node); {4} vs {0} is a tie on width that
    # prefer-closest must not decide under single-numa-node: the lower mask wins.
    specs = [{"r1": [((4,), T), ((0,), T)]}]
    best, _ = merge(
        TopologyPolicy.SINGLE_NUMA_NODE, providers(specs), EIGHT_NODES, prefer_closest=True, distances=DISTANCES
    )
    assert best == hint(((0,), T))


@pytest.mark.parametrize("specs", [[], [{"r": [((0,), F)]}], [{"r": []}]])
def test_none_policy_admits_with_empty_hint(specs: list[Any]) -> None:
    assert merge(TopologyPolicy.NONE, providers(specs), TWO_NODES) == (TopologyHint(None, False), True)


# TestPolicy{BestEffort,Restricted,SingleNumaNode}CanAdmitPodResult via merge's admit flag.
@pytest.mark.parametrize(
    ("policy", "specs", "admit"),
    [
        (TopologyPolicy.BEST_EFFORT, [{"r": [(None, F)]}], True),
        (TopologyPolicy.BEST_EFFORT, [{"r": [(None, T)]}], True),
        (TopologyPolicy.RESTRICTED, [{"r": [(None, F)]}], False),
        (TopologyPolicy.RESTRICTED, [{"r": [(None, T)]}], True),
        (TopologyPolicy.SINGLE_NUMA_NODE, [{"r": [(None, F)]}], False),
    ],
)
def test_can_admit(policy: TopologyPolicy, specs: list[Any], admit: bool) -> None:
    assert merge(policy, providers(specs), TWO_NODES)[1] is admit


# TestMaxOfMinAffinityCounts
@pytest.mark.parametrize(
    ("lists", "expected"),
    [
        ([], 0),
        ([[((), T)]], 0),
        ([[((0,), T)]], 1),
        ([[((0, 1), T)]], 2),
        ([[((0, 1), T), ((0, 1, 2), T)]], 2),
        ([[((0, 1), T), ((0, 1, 2), T)], [((0, 1, 2), T)]], 3),
        ([[((0, 1), T), ((0, 1, 2), T)], [((0, 1, 2), T), ((0, 1, 2, 3), T)]], 3),
    ],
)
def test_max_of_min_affinity_counts(lists: list[list[tuple[Any, bool]]], expected: int) -> None:
    assert max_of_min_affinity_counts([[hint(h) for h in hints] for hints in lists]) == expected


# TestCompareHintsNarrowest: (bestNonPreferredAffinityCount, current, candidate, which wins).
COMPARE_CASES: list[tuple[str, int, Any, tuple[Any, bool], str]] = [
    ("candidate.NUMANodeAffinity.Count() == 0 (1)", -1, None, ((), F), "current"),
    ("candidate.NUMANodeAffinity.Count() == 0 (2)", -1, ((), T), ((), F), "current"),
    ("current == nil (1)", -1, None, ((0,), T), "candidate"),
    ("current == nil (2)", -1, None, ((0,), F), "candidate"),
    ("!current.Preferred && candidate.Preferred", -1, ((0,), F), ((0,), T), "candidate"),
    ("current.Preferred && !candidate.Preferred", -1, ((0,), T), ((0,), F), "current"),
    ("current.Preferred && candidate.Preferred (1)", -1, ((0,), T), ((0,), T), "current"),
    ("current.Preferred && candidate.Preferred (2)", -1, ((0, 1), T), ((0,), T), "candidate"),
    ("current.Preferred && candidate.Preferred (3)", -1, ((0,), T), ((0, 1), T), "current"),
    ("!current.Preferred && !candidate.Preferred (1.1)", 1, ((0, 1), F), ((0, 1), F), "current"),
    ("!current.Preferred && !candidate.Preferred (1.2)", 1, ((1, 2), F), ((0, 1), F), "candidate"),
    ("!current.Preferred && !candidate.Preferred (1.3)", 1, ((0, 1), F), ((1, 2), F), "current"),
    ("!current.Preferred && !candidate.Preferred (2.1)", 2, ((0, 1), F), ((0,), F), "current"),
    ("!current.Preferred && !candidate.Preferred (2.2)", 2, ((0, 1), F), ((0, 1), F), "current"),
    ("!current.Preferred && !candidate.Preferred (2.3)", 2, ((1, 2), F), ((0, 1), F), "candidate"),
    ("!current.Preferred && !candidate.Preferred (2.4)", 2, ((0, 1), F), ((1, 2), F), "current"),
    ("!current.Preferred && !candidate.Preferred (3a)", 2, ((0,), F), ((0, 1, 2), F), "current"),
    ("!current.Preferred && !candidate.Preferred (3b)", 2, ((0,), F), ((0, 1), F), "candidate"),
    ("!current.Preferred && !candidate.Preferred (3ca.1)", 3, ((0,), F), ((0, 1), F), "candidate"),
    ("!current.Preferred && !candidate.Preferred (3ca.2)", 3, ((0,), F), ((1, 2), F), "candidate"),
    ("!current.Preferred && !candidate.Preferred (3ca.3)", 4, ((0, 1), F), ((1, 2, 3), F), "candidate"),
    ("!current.Preferred && !candidate.Preferred (3cb)", 4, ((1, 2, 3), F), ((0, 1), F), "current"),
    ("!current.Preferred && !candidate.Preferred (3cc.1)", 4, ((0, 1, 2), F), ((0, 1, 2), F), "current"),
    ("!current.Preferred && !candidate.Preferred (3cc.2)", 4, ((0, 1, 2), F), ((1, 2, 3), F), "current"),
    ("!current.Preferred && !candidate.Preferred (3cc.3)", 4, ((1, 2, 3), F), ((0, 1, 2), F), "candidate"),
]


@pytest.mark.parametrize(
    ("name", "target", "current", "candidate", "winner"), COMPARE_CASES, ids=[c[0] for c in COMPARE_CASES]
)
def test_compare_hints_narrowest(
    name: str, target: int, current: Any, candidate: tuple[Any, bool], winner: str
) -> None:
    merger = HintMerger(NumaMask(), (), target)
    current_hint = None if current is None else hint(current)
    candidate_hint = hint(candidate)
    result = merger.compare(current_hint, candidate_hint)
    assert result is (current_hint if winner == "current" else candidate_hint), name


# TestPolicySingleNumaNodeFilterHints
@pytest.mark.parametrize(
    ("lists", "expected"),
    [
        ([], []),
        ([[(None, F)], [(None, T)]], [[], [(None, T)]]),
        ([[((0,), T), (None, F)], [((1,), T), (None, T)]], [[((0,), T)], [((1,), T), (None, T)]]),
        ([[((1,), T), ((0,), T), (None, F)], []], [[((1,), T), ((0,), T)], []]),
        (
            [
                [((0,), T), ((1,), T), ((1, 2), F), ((0, 1, 2), F), (None, F)],
                [((1, 2), F), ((0, 1, 2), F), ((0, 2), F), ((3,), F)],
                [((1, 2), F), ((0, 1, 2), F), ((0, 2), F)],
            ],
            [[((0,), T), ((1,), T)], [], []],
        ),
    ],
)
def test_filter_single_numa_hints(lists: list[list[Any]], expected: list[list[Any]]) -> None:
    actual = filter_single_numa_hints([[hint(h) for h in hints] for hints in lists])
    assert actual == [[hint(h) for h in hints] for hints in expected]


# The kubelet's NewManager: a policy other than none on more NUMA nodes than allowed is refused.
@pytest.mark.parametrize(
    ("policy", "count", "limit", "refused"),
    [
        (TopologyPolicy.NONE, 16, 8, False),
        (TopologyPolicy.BEST_EFFORT, 8, 8, False),
        (TopologyPolicy.BEST_EFFORT, 9, 8, True),
        (TopologyPolicy.SINGLE_NUMA_NODE, 16, 8, True),
        (TopologyPolicy.RESTRICTED, 16, 16, False),
    ],
)
def test_check_numa_node_limit(policy: TopologyPolicy, count: int, limit: int, refused: bool) -> None:
    message = check_numa_node_limit(policy, count, limit)
    assert (message is not None) is refused
    if message:
        assert str(limit) in message and str(count) in message
