"""The memory manager Static policy provider: hints, groups and per-NUMA allocation."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from numasched.api.hint import TopologyHint
from numasched.api.numamask import NumaMask
from numasched.api.resource import Resource
from numasched.api.task import QosClass
from numasched.api.topology import KubeletPolicies, NumaTopology
from numasched.plugins.numaaware.providers.base import FreeResources, HintRequest, ProviderError
from numasched.plugins.numaaware.providers.memory import MemoryHintProvider

GI = 1 << 30
TOPOLOGY = NumaTopology(
    node_name="n1",
    numa_ids=(0, 1),
    memory={"memory": {0: 8 * GI, 1: 8 * GI}, "hugepages-1Gi": {0: 2 * GI, 1: 2 * GI}},
    policies=KubeletPolicies(memory_manager_policy="Static"),
)


def request(memory: int, hugepages: int = 0, qos: QosClass = QosClass.GUARANTEED) -> HintRequest:
    scalars = {"hugepages-1Gi": hugepages * 1000.0} if hugepages else {}
    return HintRequest(pod="ns/p", container="c", requests=Resource(1000, memory, scalars), qos=qos)


def free(groups: frozenset[NumaMask] = frozenset(), numa0: int = 8 * GI) -> FreeResources:
    return FreeResources(
        memory={"memory": {0: numa0, 1: 8 * GI}, "hugepages-1Gi": {0: 2 * GI, 1: 2 * GI}}, memory_groups=groups
    )


def masks(hints: Sequence[TopologyHint] | None) -> list[tuple[str, bool]]:
    assert hints is not None
    return [(h.affinity.format() if h.affinity else "any", h.preferred) for h in hints]


def test_small_request_prefers_single_numa_nodes() -> None:
    hints = MemoryHintProvider().hints(request(4 * GI), TOPOLOGY, free())
    assert hints is not None
    assert masks(hints["memory"]) == [("0", True), ("1", True), ("0,1", False)]


def test_large_request_needs_both_nodes_and_that_is_preferred() -> None:
    hints = MemoryHintProvider().hints(request(12 * GI), TOPOLOGY, free())
    assert hints is not None
    assert masks(hints["memory"]) == [("0,1", True)]


def test_hugepages_share_the_memory_masks() -> None:
    hints = MemoryHintProvider().hints(request(GI, hugepages=GI), TOPOLOGY, free())
    assert hints is not None
    assert masks(hints["hugepages-1Gi"]) == masks(hints["memory"])


def test_node_in_a_group_cannot_be_used_alone() -> None:
    hints = MemoryHintProvider().hints(request(GI), TOPOLOGY, free(frozenset({NumaMask.of(0, 1)})))
    assert hints is not None
    assert masks(hints["memory"]) == [("0,1", False)]


def test_node_used_alone_cannot_join_a_group() -> None:
    hints = MemoryHintProvider().hints(request(12 * GI), TOPOLOGY, free(frozenset({NumaMask.of(0)})))
    assert hints == {"memory": []}


def test_only_guaranteed_pods_under_static_policy() -> None:
    assert MemoryHintProvider().hints(request(GI, qos=QosClass.BURSTABLE), TOPOLOGY, free()) is None


def test_allocation_fills_numa_nodes_in_order() -> None:
    chosen = MemoryHintProvider().allocate(request(12 * GI), TopologyHint(NumaMask.of(0, 1), True), TOPOLOGY, free())
    assert chosen == {"memory": {0: 8 * GI, 1: 4 * GI}}


def test_allocation_extends_a_too_narrow_affinity() -> None:
    chosen = MemoryHintProvider().allocate(request(12 * GI), TopologyHint(NumaMask.of(1), False), TOPOLOGY, free())
    assert chosen == {"memory": {0: 8 * GI, 1: 4 * GI}}


def test_allocation_shortfall_is_an_error_naming_the_node() -> None:
    with pytest.raises(ProviderError, match="node n1"):
        MemoryHintProvider().allocate(request(12 * GI), TopologyHint(None, False), TOPOLOGY, free(numa0=GI))
