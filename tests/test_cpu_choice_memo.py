"""The CPU provider's choice for one container on bit masks, remembered per machine shape.

allocate_cpus (the kubelet's allocateCPUs: the hint's NUMA nodes first, then the rest anywhere) is
checked against the reference take-by-topology of test_cpu_assignment_reference, composed here as
the kubelet composes it; with the shape's memo it must answer the same on a first call, on a
remembered one, and for another topology object of the same CPU rows. Checks that read more than
the CPU rows (reserved CPUs under full-pcpus-only) are never skipped by a remembered answer.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_cpu_assignment_reference import (
    FIXTURE_TOPOLOGIES,
    _ref_take_packed,
    _RefLayout,
    free_sets,
    topologies,
)

from numasched.api.idset import IdSet
from numasched.api.numamask import NumaMask
from numasched.api.topology import NumaTopology
from numasched.plugins.numaaware.providers.cpu import (
    CpuChoices,
    CpuHintProvider,
    SmtAlignmentError,
    StaticPolicyOptions,
    allocate_cpus,
)
from numasched.plugins.numaaware.providers.cpu_assignment import CpuAssignmentError
from numasched.plugins.numaaware.providers.cpu_layout import CpuLayout

_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Memos by CPU rows, kept across examples so that later examples find remembered answers (as nodes
# of one shape do in the provider, which keeps one per shape).
_MEMOS: dict[Hashable, CpuChoices] = {}


def _reference_choice(
    reference: _RefLayout, free: frozenset[int], count: int, affinity: NumaMask | None, by_uncore: bool
) -> frozenset[int]:
    """The kubelet's allocateCPUs over the reference take: aligned CPUs first, then the rest."""
    if count > len(free):
        raise CpuAssignmentError("not enough cpus available")
    first: frozenset[int] = frozenset()
    if affinity is not None:
        aligned = frozenset(cpu for cpu in free if affinity.is_set(reference.info[cpu].numa))
        first = _ref_take_packed(reference, aligned, min(count, len(aligned)), by_uncore)
    return frozenset(first | _ref_take_packed(reference, free - first, count - len(first), by_uncore))


def _kind(choose: Callable[[], frozenset[int]]) -> tuple[str, object]:
    try:
        return ("cpus", choose())
    except CpuAssignmentError:
        return ("error", None)


@_SETTINGS
@given(st.data(), topologies)
def test_container_choice_matches_the_reference(data: st.DataObject, topology: NumaTopology) -> None:
    free = data.draw(free_sets(topology))
    count = data.draw(st.integers(0, len(free) + 1))
    numa_ids = sorted({info.numa for info in topology.cpus})
    affinity = data.draw(st.none() | st.sets(st.sampled_from(numa_ids), min_size=1).map(NumaMask.from_ids))
    layout, reference = CpuLayout.from_topology(topology), _RefLayout(topology)
    memo = _MEMOS.setdefault(topology.cpu_rows, CpuChoices())
    # Another object of the same rows, as another node of the shape would be.
    twin = attrs.evolve(topology, node_name="twin")
    # Both option values on one memo: an answer for one must not be taken for the other.
    for by_uncore in (False, True):
        options = StaticPolicyOptions(align_by_uncorecache=by_uncore)
        expected = _kind(lambda: _reference_choice(reference, free, count, affinity, by_uncore))  # noqa: B023

        def choose(
            node: NumaTopology, remembered: CpuChoices | None, options: StaticPolicyOptions = options
        ) -> frozenset[int]:
            chosen = allocate_cpus(node, IdSet(free), count, affinity, options, layout=layout, memo=remembered)
            return frozenset(chosen)

        assert _kind(lambda: choose(topology, None)) == expected
        assert _kind(lambda: choose(topology, memo)) == expected
        assert _kind(lambda: choose(topology, memo)) == expected
        assert _kind(lambda: choose(twin, memo)) == expected


def test_remembered_choice_keeps_the_smt_check_of_each_topology() -> None:
    """Two nodes of one shape, one with a reserved thread: the full-pcpus-only check reads the
    reserved CPUs, so the second node refuses a core the first was given."""
    topology = FIXTURE_TOPOLOGIES["dgx1-v100"]
    layout = CpuLayout.from_topology(topology)
    assert layout.cpus_per_core == 2
    # CPU 1 and its sibling: a core the fixture does not reserve (it reserves 0 and 40).
    core = sorted(next(cpus for cpus in layout.cpus_by_core.values() if 1 in cpus))
    assert not topology.reserved_cpus & IdSet(core)
    reserved = attrs.evolve(topology, node_name="reserved", reserved_cpus=IdSet([core[1]]))
    options = StaticPolicyOptions(full_pcpus_only=True)
    memo = CpuChoices()
    free = IdSet(core)
    assert allocate_cpus(topology, free, 2, None, options, layout=layout, memo=memo) == free
    with pytest.raises(SmtAlignmentError, match="available physical CPUs = 0"):
        allocate_cpus(reserved, free, 2, None, options, layout=layout, memo=memo)


def test_numa_nodes_of_a_prefix_of_the_machine() -> None:
    """Hand-computed: dgx1-v100 lists CPUs 0-19 on NUMA 0 and 20-39 on NUMA 1 (then their
    siblings 40-59 and 60-79); ids it does not list are left out."""
    topology = FIXTURE_TOPOLOGIES["dgx1-v100"]
    provider = CpuHintProvider()
    assert provider.numa_nodes_of(topology, IdSet([0, 19, 40])) == {0}
    assert provider.numa_nodes_of(topology, IdSet([19, 20])) == {0, 1}
    assert provider.numa_nodes_of(topology, IdSet([65, 4000])) == {1}
    assert provider.numa_nodes_of(topology, IdSet()) == set()


@_SETTINGS
@given(st.data(), topologies)
def test_numa_nodes_of_cpus_are_those_of_their_rows(data: st.DataObject, topology: NumaTopology) -> None:
    cpus = data.draw(free_sets(topology))
    # Ids beyond the topology's, next to it and far from it, belong to no NUMA node.
    strays = data.draw(st.sets(st.sampled_from([max(info.cpu for info in topology.cpus) + 1, 1 << 12])))
    expected = {info.numa for info in topology.cpus if info.cpu in cpus}
    assert CpuHintProvider().numa_nodes_of(topology, IdSet(cpus | strays)) == expected
