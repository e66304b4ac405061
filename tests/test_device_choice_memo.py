"""Device set choices remembered per device group and the links among its devices.

A remembered choice must be the brute-force oracle's (test_device_sets) on a first call, on a
remembered one and for another topology object of the same content; nodes whose links differ must
not share answers, through choose_devices and through the provider.
"""

from __future__ import annotations

from collections.abc import Hashable

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st
from test_device_sets import GPU, _oracle, small_nodes

from numasched.api.hint import TopologyHint
from numasched.api.numamask import NumaMask
from numasched.api.resource import Resource
from numasched.api.task import QosClass
from numasched.api.topology import DeviceGroup, DeviceInfo, DeviceLink, NumaTopology, link_key
from numasched.plugins.numaaware.providers.base import FreeResources, HintRequest
from numasched.plugins.numaaware.providers.device import DeviceProvider
from numasched.plugins.numaaware.providers.device_sets import DeviceChoices, choose_devices

# Tables by content, kept across examples so that later examples find remembered answers (as the
# provider keeps one per device group and links).
_TABLES: dict[Hashable, DeviceChoices] = {}


@settings(max_examples=150, deadline=None)
@given(small_nodes(), st.dictionaries(st.sampled_from([str(index) for index in range(7)]), st.integers(0, 2)))
def test_remembered_choices_match_the_brute_force_oracle(
    case: tuple[NumaTopology, tuple[str, ...], tuple[str, ...], int], prefer: dict[str, int]
) -> None:
    node, candidates, free, count = case
    group = node.devices[GPU]
    order = [device.id for device in group.devices]
    memo = _TABLES.setdefault(DeviceChoices.key(node, group), DeviceChoices())
    twin = attrs.evolve(node, node_name="twin")
    expected = tuple(sorted(_oracle(node, candidates, free, count), key=order.index))
    assert choose_devices(GPU, count, candidates, node, free=free, memo=memo) == expected
    assert choose_devices(GPU, count, candidates, node, free=free, memo=memo) == expected
    assert choose_devices(GPU, count, candidates, twin, free=free, memo=memo) == expected
    # A bonus per device is part of what is remembered: with one, the answer is the one computed
    # without any memo.
    with_bonus = choose_devices(GPU, count, candidates, node, free=free, prefer=prefer)
    assert choose_devices(GPU, count, candidates, node, free=free, prefer=prefer, memo=memo) == with_bonus
    assert choose_devices(GPU, count, candidates, twin, free=free, prefer=prefer, memo=memo) == with_bonus


def _four_gpus(linked: tuple[str, str]) -> NumaTopology:
    """Four GPUs on NUMA node 0, one NVLink pair (the rest talk over the same PCIe switch)."""
    devices = tuple(DeviceInfo(str(index), 0, pci_switch="s0") for index in range(4))
    links = {link_key((GPU, linked[0]), (GPU, linked[1])): DeviceLink(nvlinks=2)}
    return NumaTopology(node_name="n", numa_ids=(0,), devices={GPU: DeviceGroup(GPU, devices)}, links=links)


def test_nodes_whose_links_differ_do_not_share_answers() -> None:
    first, second = _four_gpus(("0", "1")), _four_gpus(("2", "3"))
    assert DeviceChoices.key(first, first.devices[GPU]) != DeviceChoices.key(second, second.devices[GPU])
    assert DeviceChoices.key(first, first.devices[GPU]) == DeviceChoices.key(
        _four_gpus(("0", "1")), _four_gpus(("0", "1")).devices[GPU]
    )
    provider = DeviceProvider()
    request = HintRequest("default/p", "c", Resource.from_list({GPU: 2}), QosClass.GUARANTEED)
    free = FreeResources(devices={GPU: ("0", "1", "2", "3")})
    hint = TopologyHint(NumaMask.of(0), True)
    # Each node's NVLinked pair, whichever node was asked first.
    assert provider.allocate(request, hint, first, free) == {GPU: ("0", "1")}
    assert provider.allocate(request, hint, second, free) == {GPU: ("2", "3")}
    assert provider.allocate(request, hint, _four_gpus(("0", "1")), free) == {GPU: ("0", "1")}
