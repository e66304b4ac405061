"""The CPU hint provider: kubelet static-policy hints, exclusive-CPU eligibility and allocation."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from numasched.api.hint import TopologyHint
from numasched.api.idset import IdSet
from numasched.api.numamask import NumaMask
from numasched.api.resource import Resource
from numasched.api.task import ContainerInfo, QosClass
from numasched.api.topology import CpuInfo, CpuManagerPolicy, KubeletPolicies, NumaTopology, TopologyScope
from numasched.plugins.numaaware.providers.base import (
    FreeResources,
    HintProvider,
    HintRequest,
    ProviderAllocation,
    ProviderError,
)
from numasched.plugins.numaaware.providers.cpu import (
    CpuHintProvider,
    StaticPolicyOptions,
    cpu_hint_table,
    cpu_provider_factory,
    guaranteed_cpus,
)


def topology(
    name: str, cpus: dict[int, tuple[int, int, int]], reserved: str = "", options: dict[str, str] | None = None
) -> NumaTopology:
    infos = tuple(CpuInfo(cpu, core, socket, numa, socket) for cpu, (core, socket, numa) in sorted(cpus.items()))
    policies = KubeletPolicies(cpu_manager_policy=CpuManagerPolicy.STATIC, cpu_manager_options=options or {})
    return NumaTopology(
        node_name=name,
        numa_ids=tuple(sorted({info.numa for info in infos})),
        cpus=infos,
        reserved_cpus=IdSet.parse(reserved),
        policies=policies,
    )


def dual_socket_ht(reserved: str = "", options: dict[str, str] | None = None) -> NumaTopology:
    return topology("dual-socket-ht", {c: (c % 6, c % 2, c % 2) for c in range(12)}, reserved, options)


def multi_numa_ht(reserved: str = "") -> NumaTopology:
    return topology("multi-numa-ht", {c: (c % 40, (c % 40) // 20, (c % 40) // 10) for c in range(80)}, reserved)


def ids(text: str) -> IdSet:
    return IdSet.parse(text)


def hint(numas: tuple[int, ...], preferred: bool) -> TopologyHint:
    return TopologyHint(NumaMask.of(*numas), preferred)


def request(
    milli_cpu: float, qos: QosClass = QosClass.GUARANTEED, containers: tuple[ContainerInfo, ...] = ()
) -> HintRequest:
    scope = TopologyScope.POD if containers else TopologyScope.CONTAINER
    return HintRequest(
        pod="default/pod",
        container="" if containers else "main",
        requests=Resource(milli_cpu=milli_cpu),
        qos=qos,
        scope=scope,
        containers=containers,
    )


def cpus_of(allocation: ProviderAllocation) -> IdSet:
    chosen = allocation["cpu"]
    assert isinstance(chosen, IdSet)
    return chosen


def container(name: str, milli_cpu: float, init: bool = False, sidecar: bool = False) -> ContainerInfo:
    resources = Resource(milli_cpu=milli_cpu)
    return ContainerInfo(name=name, requests=resources, limits=resources, init=init, sidecar=sidecar)


# -- hints -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "count", "expected"),
    [
        ("0-11", 1, [hint((0,), True), hint((1,), True), hint((0, 1), False)]),
        ("0-11", 6, [hint((0,), True), hint((1,), True), hint((0, 1), False)]),
        ("1,3,5,7,9,11", 2, [hint((1,), True), hint((0, 1), False)]),
        ("0-11", 8, [hint((0, 1), True)]),
        ("0-11", 13, []),
        ("0,2,4,1", 3, [hint((0,), True), hint((0, 1), False)]),
    ],
)
def test_hints_match_kubelet(free: str, count: int, expected: list[TopologyHint]) -> None:
    assert list(cpu_hint_table(dual_socket_ht(), ids(free), count)) == expected


def test_reserved_cpus_are_not_free_but_count_for_the_narrowest_mask() -> None:
    # NUMA 0 has 6 CPUs (one reserved): a 6-CPU request could fit one NUMA node of the machine, so
    # one-node masks stay the preferred width, but only NUMA 1 can actually give 6.
    assert list(cpu_hint_table(dual_socket_ht(reserved="0"), ids("0-11"), 6)) == [hint((1,), True), hint((0, 1), False)]


def test_reusable_cpus_pin_the_mask() -> None:
    # CPU 1 (NUMA 1) is already the pod's: NUMA 0 alone can no longer be a hint.
    hints = list(cpu_hint_table(dual_socket_ht(), ids("0,2,3,4,6,8,10"), 2, reusable=ids("1")))
    assert hints == [hint((1,), True), hint((0, 1), False)]
    hints = list(cpu_hint_table(dual_socket_ht(), ids("0,2,4,6,8,10"), 2, reusable=ids("1")))
    assert hints == [hint((0, 1), False)]


def test_full_pcpus_only_counts_whole_free_cores() -> None:
    smt = dual_socket_ht(options={"full-pcpus-only": "true"})
    # NUMA 0 has 5 free CPUs but only 2 whole cores (0/6 and 2/8).
    assert list(cpu_hint_table(smt, ids("0,2,4,6,8,1,3,5,7,9,11"), 6)) == [hint((1,), True), hint((0, 1), False)]
    assert list(cpu_hint_table(smt, ids("0-11"), 3)) == []


def test_multi_numa_hints_prefer_single_numa() -> None:
    hints = list(cpu_hint_table(multi_numa_ht(), ids("0-79"), 20))
    assert [h for h in hints if h.preferred] == [hint((n,), True) for n in range(4)]
    assert len(hints) == 15
    hints = list(cpu_hint_table(multi_numa_ht(), ids("0-79"), 30))
    assert {h.affinity for h in hints if h.preferred} == {NumaMask.of(a, b) for a in range(4) for b in range(a + 1, 4)}


# -- who gets exclusive CPUs ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("milli", "qos", "expected"),
    [
        (2000, QosClass.GUARANTEED, 2),
        (1500, QosClass.GUARANTEED, 0),
        (977, QosClass.GUARANTEED, 0),
        (0, QosClass.GUARANTEED, 0),
        (2000, QosClass.BURSTABLE, 0),
        (4000, QosClass.BEST_EFFORT, 0),
    ],
)
def test_guaranteed_cpus_for_a_container(milli: float, qos: QosClass, expected: int) -> None:
    assert guaranteed_cpus(request(milli, qos)) == expected


def test_guaranteed_cpus_for_a_pod() -> None:
    containers = (
        container("init-big", 6000, init=True),
        container("sidecar", 1000, init=True, sidecar=True),
        container("app", 2000),
        container("shared", 500),
    )
    # max(init 6 (before the sidecar), apps 2 + sidecar 1) = 6
    assert guaranteed_cpus(request(8500, containers=containers)) == 6
    assert guaranteed_cpus(request(4000, containers=(container("a", 2000), container("b", 2000)))) == 4


def test_policy_options_parse() -> None:
    options, problems = StaticPolicyOptions.parse(
        {"full-pcpus-only": "true", "distribute-cpus-across-numa": "yes", "bogus": "1", "align-by-socket": "true"}
    )
    assert options == StaticPolicyOptions(full_pcpus_only=True)
    assert any("bad value" in problem for problem in problems)
    assert any("unknown CPU manager option 'bogus'" in problem for problem in problems)
    options, problems = StaticPolicyOptions.parse(
        {"prefer-align-cpus-by-uncorecache": "true", "distribute-cpus-across-numa": "true"}
    )
    assert options == StaticPolicyOptions(distribute_cpus_across_numa=True)
    assert problems


# -- the provider ----------------------------------------------------------------------------------


def test_provider_is_a_hint_provider() -> None:
    provider = cpu_provider_factory({})
    assert isinstance(provider, HintProvider)
    assert provider.name == "cpu"
    assert provider.resources == frozenset({"cpu"})


def test_provider_hints() -> None:
    provider = CpuHintProvider()
    free = FreeResources(cpus=ids("0-11"))
    # The provider's own remembered answers: tuples (api/hint.py ResourceHints).
    assert provider.hints(request(2000), dual_socket_ht(), free) == {
        "cpu": (hint((0,), True), hint((1,), True), hint((0, 1), False))
    }
    assert provider.hints(request(1500), dual_socket_ht(), free) is None
    assert provider.hints(request(2000, QosClass.BURSTABLE), dual_socket_ht(), free) is None
    no_static = attrs.evolve(dual_socket_ht(), policies=KubeletPolicies())
    assert provider.hints(request(2000), no_static, free) is None
    assert provider.hints(request(24000), dual_socket_ht(), free) == {"cpu": ()}


def test_allocate_takes_the_hint_numa_nodes_first() -> None:
    provider = CpuHintProvider()
    chosen = provider.allocate(request(4000), hint((1,), True), multi_numa_ht(), FreeResources(cpus=ids("0-79")))
    assert chosen == {"cpu": ids("10,11,50,51")}


def test_allocate_strictly_from_hint_numa_nodes_kubelet_case() -> None:
    # TestStaticPolicyAdd "Align by socket: false": CPUs come from NUMA 0 and 2 of the hint.
    chosen = CpuHintProvider().allocate(
        request(2000), hint((0, 2), True), multi_numa_ht(reserved="0"), FreeResources(cpus=ids("2,11,21,22"))
    )
    assert chosen == {"cpu": ids("2,21")}


def test_allocate_spills_over_when_the_hint_is_short() -> None:
    chosen = CpuHintProvider().allocate(
        request(3000), hint((0,), False), dual_socket_ht(), FreeResources(cpus=ids("0,1,3,5,7"))
    )
    assert chosen["cpu"] == ids("0,1,7")


def test_allocate_never_hands_out_reserved_cpus() -> None:
    chosen = cpus_of(
        CpuHintProvider().allocate(
            request(6000), hint((0,), True), dual_socket_ht(reserved="0,6"), FreeResources(cpus=ids("0-11"))
        )
    )
    assert not chosen & ids("0,6")
    assert len(chosen) == 6


def test_allocate_nothing_for_shared_pool_containers() -> None:
    assert (
        CpuHintProvider().allocate(request(1500), hint((0,), True), dual_socket_ht(), FreeResources(ids("0-11"))) == {}
    )


def test_allocate_reports_smt_alignment_errors() -> None:
    smt = dual_socket_ht(options={"full-pcpus-only": "true"})
    with pytest.raises(ProviderError, match="SMT Alignment Error"):
        CpuHintProvider().allocate(request(3000), hint((0,), True), smt, FreeResources(cpus=ids("0-11")))
    with pytest.raises(ProviderError, match="not enough cpus available"):
        CpuHintProvider().allocate(request(4000), hint((0,), True), dual_socket_ht(), FreeResources(cpus=ids("0-2")))


def test_pod_scope_reuses_init_container_cpus() -> None:
    containers = (
        container("init", 4000, init=True),
        container("sidecar", 2000, init=True, sidecar=True),
        container("app", 4000),
    )
    provider = CpuHintProvider()
    per_container = provider.allocate_containers(
        request(6000, containers=containers), hint((0, 1), True), dual_socket_ht(), FreeResources(cpus=ids("0-11"))
    )
    # As the kubelet's CPU reuse: the sidecar may take CPUs of the finished init container and keeps
    # them; the app container gets the init container's remaining CPUs first.
    assert per_container["sidecar"].is_subset(per_container["init"])
    assert not per_container["sidecar"] & per_container["app"]
    assert (per_container["init"] - per_container["sidecar"]).is_subset(per_container["app"])
    total = provider.allocate(
        request(6000, containers=containers), hint((0, 1), True), dual_socket_ht(), FreeResources(cpus=ids("0-11"))
    )
    assert len(cpus_of(total)) == 6


# -- property: the hint the topology manager would pick keeps the request on as few NUMA nodes ----


@st.composite
def free_sets(draw: st.DrawFn) -> tuple[NumaTopology, IdSet, int]:
    shape = draw(st.sampled_from([dual_socket_ht(), multi_numa_ht()]))
    free = IdSet(draw(st.sets(st.sampled_from(shape.all_cpus.sorted()), min_size=1)))
    count = draw(st.integers(min_value=1, max_value=len(free)))
    return shape, free, count


@settings(max_examples=150, deadline=None)
@given(free_sets())
def test_allocation_with_best_hint_uses_fewest_numa_nodes(case: tuple[NumaTopology, IdSet, int]) -> None:
    shape, free, count = case
    hints = list(cpu_hint_table(shape, free, count))
    assert hints, "the whole machine always fits a request no larger than its free CPUs"
    best = min(
        hints,
        key=lambda h: (not h.preferred, h.affinity.count() if h.affinity else 0, h.affinity.bits if h.affinity else 0),
    )
    chosen = cpus_of(CpuHintProvider().allocate(request(count * 1000), best, shape, FreeResources(cpus=free)))
    assert len(chosen) == count
    assert chosen.is_subset(free)
    spanned = {shape.cpu_info[cpu].numa for cpu in chosen}
    narrowest = min(h.affinity.count() for h in hints if h.affinity is not None)
    assert len(spanned) == narrowest
