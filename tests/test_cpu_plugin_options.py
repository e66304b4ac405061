"""CPU manager options given as numa-aware plugin arguments stand in for nodes that do not report
their own (Volcano's exporter publishes no cpuManagerPolicyOptions)."""

from __future__ import annotations

from typing import Any

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
