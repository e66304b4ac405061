"""CPU manager options given as numa-aware plugin arguments stand in for nodes that do not report
their own (Volcano's exporter publishes no cpuManagerPolicyOptions)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import load_machine

from numasched.api.topology import TopologyPolicy
from numasched.cache.convert_topology import numatopology_to_topology
from numasched.cache.machine_shapes import machine_objects
from numasched.plugins.numaaware.providers.cpu import CpuNodeIndex, cpu_provider_factory


def topology(options: str | None = None) -> Any:
    _, obj = machine_objects(load_machine("dgx1-v100"), "n1", topology_policy=TopologyPolicy.SINGLE_NUMA_NODE)
    if options is not None:
        obj["spec"]["policies"]["CPUManagerPolicyOptions"] = options
    return numatopology_to_topology(obj)


def options_for(arguments: dict[str, Any], node: Any) -> Any:
    provider = cpu_provider_factory(arguments)
    index: CpuNodeIndex = provider.indexes.get(node)
    return index.options


def test_plugin_arguments_apply_to_nodes_that_report_no_options() -> None:
    options = options_for({"full-pcpus-only": True, "align-by-uncorecache": "true"}, topology())
    assert options.full_pcpus_only and options.align_by_uncorecache
    assert not options.distribute_cpus_across_numa


def test_options_the_node_reports_win_over_plugin_arguments() -> None:
    options = options_for({"full-pcpus-only": True}, topology("distribute-cpus-across-numa=true"))
    assert options.distribute_cpus_across_numa and not options.full_pcpus_only


def test_without_arguments_or_reported_options_nothing_is_set() -> None:
    options = options_for({}, topology())
    assert not (options.full_pcpus_only or options.distribute_cpus_across_numa or options.align_by_uncorecache)


def test_the_ids_are_chosen_under_the_same_options_as_the_hints() -> None:
    # One thread of every core is taken: with full-pcpus-only from the plugin's arguments, no
    # whole core is free, so neither a hint nor an allocation of two CPUs may come out.
    from numasched.api.hint import TopologyHint
    from numasched.api.idset import IdSet
    from numasched.api.numamask import NumaMask
    from numasched.api.resource import Resource
    from numasched.api.task import QosClass
    from numasched.plugins.numaaware.providers.base import FreeResources, HintRequest, ProviderError

    node = topology()
    first_threads = IdSet(min(cpus) for cpus in _threads_by_core(node).values())
    free = FreeResources(cpus=first_threads)
    request = HintRequest("default/p", "main", Resource(milli_cpu=2000), QosClass.GUARANTEED)
    hint = TopologyHint(NumaMask.of(0), True)
    whole_cores = cpu_provider_factory({"full-pcpus-only": True})
    assert whole_cores.hints(request, node, free) == {"cpu": ()}
    with pytest.raises(ProviderError):
        whole_cores.allocate(request, hint, node, free)
    # Without the option the same free set gives two threads on NUMA node 0.
    chosen = cpu_provider_factory({}).allocate(request, hint, node, free)["cpu"]
    assert isinstance(chosen, IdSet) and len(chosen) == 2 and chosen.is_subset(node.cpus_by_numa[0])


def _threads_by_core(node: Any) -> dict[tuple[int, int], set[int]]:
    cores: dict[tuple[int, int], set[int]] = {}
    for info in node.cpus:
        cores.setdefault((info.socket, info.core), set()).add(info.cpu)
    return cores
