"""The device provider's kubelet device-manager semantics: hints, allocation order, arguments."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from numasched.api.hint import TopologyHint
from numasched.api.numamask import NumaMask
from numasched.api.resource import Resource
from numasched.api.task import QosClass
from numasched.api.topology import DeviceGroup, DeviceInfo, NumaTopology
from numasched.cache.device_topology import machine_device_topology
from numasched.plugins.numaaware.providers.base import FreeResources, HintProvider, HintRequest, ProviderError
from numasched.plugins.numaaware.providers.device import (
    DeviceProvider,
    allocate_devices,
    device_hint_table,
    device_provider_factory,
)
from numasched.plugins.numaaware.providers.device_sets import NicAlignment
from numasched.scheduler.framework.arguments import PluginArgumentError

MACHINES = Path(__file__).parent / "fixtures" / "machines"
GPU = "nvidia.com/gpu"


def topology(name: str) -> NumaTopology:
    machine = yaml.safe_load((MACHINES / f"{name}.yaml").read_text())
    groups, links = machine_device_topology(machine)
    numa_ids = tuple(int(numa["id"]) for numa in machine["numa_nodes"])
    return NumaTopology(node_name=name, numa_ids=numa_ids, devices=groups, links=links)


def hint(*numa: int, preferred: bool) -> TopologyHint:
    return TopologyHint(NumaMask.of(*numa), preferred)


def request(qos: QosClass = QosClass.BEST_EFFORT, **devices: int) -> HintRequest:
    limits = {name.replace("__", "/").replace("_", "."): count for name, count in devices.items()}
    return HintRequest(pod="default/p", container="c", requests=Resource.from_list(limits), qos=qos)


def ids(*values: int) -> tuple[str, ...]:
    return tuple(str(value) for value in values)


PCIE = topology("pcie-8gpu-2numa")
PCIE_GPUS = PCIE.devices[GPU]


def test_three_plus_one_free_gives_only_a_non_preferred_two_numa_hint() -> None:
    assert device_hint_table(PCIE_GPUS, PCIE.numa_ids, ids(0, 1, 2, 7), 4) == (hint(0, 1, preferred=False),)


def test_volcano_4998_node_b_gets_a_preferred_single_numa_hint_node_a_none() -> None:
    node_a = device_hint_table(PCIE_GPUS, PCIE.numa_ids, ids(0, 1, 2, 7), 4)
    node_b = device_hint_table(PCIE_GPUS, PCIE.numa_ids, ids(0, 1, 2, 3), 4)
    assert node_b == (hint(0, preferred=True), hint(0, 1, preferred=False))
    assert node_a is not None and not any(entry.preferred for entry in node_a)
    # The issue's own node B has GPUs 0-5 free: still a single preferred hint, on NUMA 0.
    issue_b = device_hint_table(PCIE_GPUS, PCIE.numa_ids, ids(0, 1, 2, 3, 4, 5), 4)
    assert issue_b == (hint(0, preferred=True), hint(0, 1, preferred=False))


def test_hints_on_an_empty_node_per_request_size() -> None:
    all_free = ids(*range(8))
    both = (hint(0, preferred=True), hint(1, preferred=True), hint(0, 1, preferred=False))
    assert device_hint_table(PCIE_GPUS, PCIE.numa_ids, all_free, 1) == both
    assert device_hint_table(PCIE_GPUS, PCIE.numa_ids, all_free, 4) == both
    assert device_hint_table(PCIE_GPUS, PCIE.numa_ids, all_free, 5) == (hint(0, 1, preferred=True),)
    assert device_hint_table(PCIE_GPUS, PCIE.numa_ids, all_free, 8) == (hint(0, 1, preferred=True),)


def test_request_above_free_cannot_be_satisfied_and_zero_is_not_handled() -> None:
    assert device_hint_table(PCIE_GPUS, PCIE.numa_ids, ids(0, 1, 2), 4) == ()
    assert device_hint_table(PCIE_GPUS, PCIE.numa_ids, ids(*range(8)), 9) == ()
    assert device_hint_table(PCIE_GPUS, PCIE.numa_ids, ids(*range(8)), 0) is None


def test_preference_counts_the_nodes_total_devices_including_used_and_unhealthy() -> None:
    # GPU 3 unhealthy (not free), 4 free on NUMA 1: NUMA 1 alone is preferred, NUMA 0 has 3.
    assert device_hint_table(PCIE_GPUS, PCIE.numa_ids, ids(0, 1, 2, 4, 5, 6, 7), 4) == (
        hint(1, preferred=True),
        hint(0, 1, preferred=False),
    )


def test_devices_without_numa_count_in_no_mask() -> None:
    group = DeviceGroup(
        resource=GPU,
        devices=(DeviceInfo("a", 0), DeviceInfo("b", None), DeviceInfo("c", 1)),
    )
    assert device_hint_table(group, (0, 1), ("a", "b", "c"), 1) == (
        hint(0, preferred=True),
        hint(1, preferred=True),
        hint(0, 1, preferred=False),
    )
    assert device_hint_table(group, (0, 1), ("a", "b", "c"), 2) == (hint(0, 1, preferred=True),)
    # Three free, but no mask holds three devices with NUMA information.
    assert device_hint_table(group, (0, 1), ("a", "b", "c"), 3) == ()


def test_no_numa_information_at_all_means_no_preference() -> None:
    group = DeviceGroup(resource=GPU, devices=(DeviceInfo("a", None), DeviceInfo("b", None)))
    assert device_hint_table(group, (0, 1), ("a", "b"), 2) is None


def test_partitions_confine_hints() -> None:
    base = topology("dgx-a100")
    partitioned = DeviceGroup(
        resource=GPU,
        devices=base.devices[GPU].devices,
        partitions=(frozenset(ids(0, 1, 2, 3)), frozenset(ids(4, 5, 6, 7))),
    )
    all_free = ids(*range(8))
    assert device_hint_table(partitioned, base.numa_ids, all_free, 8) == ()
    four = device_hint_table(partitioned, base.numa_ids, all_free, 4)
    assert four is not None
    # GPUs 0-3 sit on NUMA 3 and 1, GPUs 4-7 on NUMA 7 and 5: those pairs are the narrowest masks.
    assert [entry.affinity for entry in four if entry.preferred] == [NumaMask.of(1, 3), NumaMask.of(5, 7)]
    unpartitioned = device_hint_table(base.devices[GPU], base.numa_ids, all_free, 8) or ()
    assert [entry.affinity for entry in unpartitioned if entry.preferred] == [NumaMask.of(1, 3, 5, 7)]


def test_allocation_takes_the_hint_numa_nodes_first_then_others() -> None:
    assert allocate_devices(GPU, 4, NumaMask.of(0, 1), PCIE, ids(0, 1, 2, 7)) == ids(0, 1, 2, 7)
    # Only 2 free on NUMA 0: both, then the two of NUMA 1 that share a PCIe switch.
    assert allocate_devices(GPU, 4, NumaMask.of(0), PCIE, ids(2, 3, 4, 5, 6)) == ids(2, 3, 4, 5)
    assert allocate_devices(GPU, 2, None, PCIE, ids(1, 3, 6, 7)) == ids(6, 7)
    with pytest.raises(ProviderError, match=r"nvidia\.com/gpu: 3 requested, 2 free"):
        allocate_devices(GPU, 3, NumaMask.of(0), PCIE, ids(0, 1))


def test_allocation_prefers_other_numa_nodes_over_devices_without_numa() -> None:
    group = DeviceGroup(
        resource=GPU,
        devices=(DeviceInfo("a", 0), DeviceInfo("b", 1), DeviceInfo("x", None)),
    )
    node = NumaTopology(node_name="n", numa_ids=(0, 1), devices={GPU: group})
    assert allocate_devices(GPU, 2, NumaMask.of(0), node, ("a", "b", "x")) == ("a", "b")
    assert allocate_devices(GPU, 3, NumaMask.of(0), node, ("a", "b", "x")) == ("a", "b", "x")


def test_provider_implements_the_protocol_and_ignores_qos() -> None:
    provider = DeviceProvider()
    assert isinstance(provider, HintProvider)
    free = FreeResources(devices={GPU: ids(0, 1, 2, 7)})
    for qos in QosClass:
        hints = provider.hints(request(qos, nvidia_com__gpu=4), PCIE, free)
        # The provider's own remembered answer: a tuple (api/hint.py ResourceHints).
        assert hints == {GPU: (hint(0, 1, preferred=False),)}


def test_provider_has_nothing_to_say_without_device_requests() -> None:
    provider = DeviceProvider()
    free = FreeResources(devices={GPU: ids(*range(8))})
    assert provider.hints(request(), PCIE, free) is None
    assert provider.allocate(request(), hint(0, preferred=True), PCIE, free) == {}
    # A resource this node does not report: no preference.
    assert provider.hints(request(amd_com__gpu=1), PCIE, free) == {"amd.com/gpu": None}


def test_provider_allocates_inside_the_best_hint() -> None:
    provider = DeviceProvider()
    free = FreeResources(devices={GPU: ids(*range(8))})
    assert provider.allocate(request(nvidia_com__gpu=2), hint(1, preferred=True), PCIE, free) == {GPU: ids(4, 5)}


def test_factory_reads_plugin_arguments_and_refuses_bad_values() -> None:
    provider = device_provider_factory(
        {"device-resources": "nvidia.com/gpu, amd.com/gpu", "nic-resources": ["rdma/hca"], "nic-alignment": "Required"}
    )
    assert provider.accelerator_resources == {GPU, "amd.com/gpu"}
    assert provider.nic_resources == {"rdma/hca"}
    assert provider.nic_alignment is NicAlignment.REQUIRED
    assert provider.resources == {GPU, "amd.com/gpu", "rdma/hca"}
    assert device_provider_factory({}).name == "device"
    assert GPU in device_provider_factory({}).accelerator_resources
    with pytest.raises(PluginArgumentError, match="plugin numa-aware: argument nic-alignment: expected one of"):
        device_provider_factory({"nic-alignment": "sometimes"})
    with pytest.raises(PluginArgumentError, match=r"plugin numa-aware: argument device-resources: .* got 7"):
        device_provider_factory({"device-resources": 7})
