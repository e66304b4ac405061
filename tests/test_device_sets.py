"""Device set choice on the machine fixtures: exact sets, partial use, GPU + NIC, an oracle check."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from numasched.api.hint import TopologyHint
from numasched.api.numamask import NumaMask
from numasched.api.resource import Resource
from numasched.api.task import QosClass
from numasched.api.topology import DeviceGroup, DeviceInfo, DeviceLink, NumaTopology, PcieDistance, link_key
from numasched.cache.device_topology import machine_device_topology
from numasched.plugins.numaaware.providers.base import FreeResources, HintRequest, ProviderError
from numasched.plugins.numaaware.providers.device import DeviceProvider, device_hint_table
from numasched.plugins.numaaware.providers.device_sets import (
    NicAlignment,
    SetQuality,
    choose_devices,
    pair_weight,
    set_quality,
)

MACHINES = Path(__file__).parent / "fixtures" / "machines"
GPU = "nvidia.com/gpu"
NIC = "rdma/hca"


def topology(name: str) -> NumaTopology:
    machine = yaml.safe_load((MACHINES / f"{name}.yaml").read_text())
    groups, links = machine_device_topology(machine)
    numa_ids = tuple(int(numa["id"]) for numa in machine["numa_nodes"])
    return NumaTopology(node_name=name, numa_ids=numa_ids, devices=groups, links=links)


TOPOLOGIES = {name: topology(name) for name in ("dgx1-v100", "hgx-h100", "dgx-a100", "pcie-8gpu-2numa")}


def ids(*values: int) -> tuple[str, ...]:
    return tuple(str(value) for value in values)


def place(name: str, count: int, used: tuple[str, ...] = ()) -> tuple[str, ...]:
    """What a pod asking for `count` GPUs gets: the kubelet's best hint, then our choice in it."""
    node = TOPOLOGIES[name]
    free = tuple(device.id for device in node.devices[GPU].devices if device.id not in used)
    hints = device_hint_table(node.devices[GPU], node.numa_ids, free, count)
    assert hints, f"{count} GPUs do not fit {name} with {used} used"
    best = ([entry for entry in hints if entry.preferred] or hints)[0]
    request = HintRequest("default/p", "c", Resource.from_list({GPU: count}), QosClass.GUARANTEED)
    chosen = DeviceProvider().allocate(request, best, node, FreeResources(devices={GPU: free}))[GPU]
    assert isinstance(chosen, tuple)
    return chosen


@pytest.mark.parametrize(
    ("name", "count", "used", "expected"),
    [
        # DGX-1 hybrid cube mesh. NUMA 0 holds GPUs 0-3: NV2 on 0-3, 2-3, 1-2; NV1 on 0-1, 0-2, 1-3.
        ("dgx1-v100", 1, (), ids(0)),
        ("dgx1-v100", 2, (), ids(0, 3)),  # an NV2 pair that leaves the NV2 pair 1-2
        ("dgx1-v100", 4, (), ids(0, 1, 2, 3)),
        ("dgx1-v100", 8, (), ids(*range(8))),
        ("dgx1-v100", 1, ids(0), ids(3)),  # 3 costs the fewest links and keeps 1-2
        ("dgx1-v100", 2, ids(0), ids(2, 3)),  # NV2 either way; 2-3 share a PCIe switch
        ("dgx1-v100", 2, ids(1, 2), ids(0, 3)),
        # NUMA 1: 5-6 leaves the NV2 pair 4-7 and the NVLink from the free GPU 3 to 7.
        ("dgx1-v100", 2, ids(0, 1, 2), ids(5, 6)),
        ("dgx1-v100", 4, ids(0), ids(4, 5, 6, 7)),
        # No free quad: a 2-NUMA hint; the best-linked four (7 NVLinks) that leave an NV2 pair (6-7).
        ("dgx1-v100", 4, ids(0, 4), ids(1, 2, 3, 5)),
        # HGX H100: NVSwitch, every pair NV18; one NIC per GPU switch.
        ("hgx-h100", 1, (), ids(0)),
        ("hgx-h100", 2, (), ids(0, 1)),
        ("hgx-h100", 4, (), ids(0, 1, 2, 3)),
        ("hgx-h100", 8, (), ids(*range(8))),
        ("hgx-h100", 2, ids(0, 1, 2), ids(4, 5)),
        ("hgx-h100", 4, ids(5), ids(0, 1, 2, 3)),
        # DGX A100: NVSwitch, 8 NUMA nodes; GPUs on NUMA 3 (0, 1), 1 (2, 3), 7 (4, 5), 5 (6, 7).
        ("dgx-a100", 1, (), ids(2)),
        ("dgx-a100", 2, (), ids(2, 3)),
        ("dgx-a100", 4, (), ids(0, 1, 2, 3)),
        ("dgx-a100", 8, (), ids(*range(8))),
        ("dgx-a100", 1, ids(2), ids(3)),
        ("dgx-a100", 2, ids(2), ids(0, 1)),
        # PCIe only: two GPUs per switch, GPUs 0-3 on NUMA 0.
        ("pcie-8gpu-2numa", 1, (), ids(0)),
        ("pcie-8gpu-2numa", 2, (), ids(0, 1)),
        ("pcie-8gpu-2numa", 4, (), ids(0, 1, 2, 3)),
        ("pcie-8gpu-2numa", 8, (), ids(*range(8))),
        ("pcie-8gpu-2numa", 1, ids(0), ids(1)),  # keeps the switch pair 2-3 whole
        ("pcie-8gpu-2numa", 2, ids(1), ids(2, 3)),
        ("pcie-8gpu-2numa", 2, ids(1, 2), ids(0, 3)),
        ("pcie-8gpu-2numa", 4, ids(3), ids(4, 5, 6, 7)),
    ],
)
def test_exact_sets(name: str, count: int, used: tuple[str, ...], expected: tuple[str, ...]) -> None:
    assert place(name, count, used) == expected


def test_dgx1_two_gpus_take_an_nv2_pair_whenever_numa_node_has_one() -> None:
    node = TOPOLOGIES["dgx1-v100"]
    group = node.devices[GPU]
    for free_count in range(2, 5):
        for free in itertools.combinations(ids(0, 1, 2, 3), free_count):
            chosen = choose_devices(GPU, 2, free, node, free=free)
            has_nv2 = any(
                pair_weight(node, (GPU, group.by_id[a]), (GPU, group.by_id[b])).nvlinks == 2
                for a, b in itertools.combinations(free, 2)
            )
            links = pair_weight(node, (GPU, group.by_id[chosen[0]]), (GPU, group.by_id[chosen[1]])).nvlinks
            assert links == (2 if has_nv2 else 1), (free, chosen)


def test_set_quality_orders_nodes() -> None:
    node = TOPOLOGIES["dgx1-v100"]
    everything = ids(*range(8))
    nv2 = set_quality(GPU, ids(0, 3), node, everything)
    nv1 = set_quality(GPU, ids(0, 1), node, everything)
    none = set_quality(GPU, ids(0, 6), node, everything)
    assert nv2 > nv1 > none
    assert nv2 == SetQuality(nvlinks=2, pcie_closeness=2, largest_block_left=4)
    assert set_quality(GPU, ids(0, 1, 2, 3), node, everything).largest_block_left == 4
    assert set_quality(GPU, ids(0, 4), node, ids(0, 1, 4, 5)) == SetQuality(2, 1, 1)
    assert set_quality("amd.com/gpu", ids(0), node) == SetQuality(0, 0, 0)


def test_partitions_confine_the_set() -> None:
    base = TOPOLOGIES["hgx-h100"]
    group = DeviceGroup(
        resource=GPU, devices=base.devices[GPU].devices, partitions=(frozenset(ids(0, 5)), frozenset(ids(1, 2, 3, 4)))
    )
    node = NumaTopology(node_name="p", numa_ids=base.numa_ids, devices={GPU: group}, links=base.links)
    everything = ids(*range(8))
    assert choose_devices(GPU, 2, everything, node, free=everything) == ids(0, 5)
    assert choose_devices(GPU, 3, everything, node, free=everything) == ids(1, 2, 3)
    assert choose_devices(GPU, 5, everything, node, free=everything) == ()


# --- GPU + NIC on the HGX H100 -----------------------------------------------------------------

HGX = TOPOLOGIES["hgx-h100"]
ALL_NICS = tuple(f"mlx5_{number}" for number in range(8))


def gpu_nic(
    gpus: int,
    nics: int,
    free_gpus: tuple[str, ...] = ids(*range(8)),
    free_nics: tuple[str, ...] = ALL_NICS,
    alignment: NicAlignment = NicAlignment.PREFERRED,
) -> dict[str, tuple[str, ...]]:
    provider = DeviceProvider(nic_alignment=alignment)
    request = HintRequest("default/p", "c", Resource.from_list({GPU: gpus, NIC: nics}), QosClass.GUARANTEED)
    free = FreeResources(devices={GPU: free_gpus, NIC: free_nics})
    hints = provider.hints(request, HGX, free)
    assert hints is not None
    gpu_hints = hints[GPU]
    assert gpu_hints
    best = ([entry for entry in gpu_hints if entry.preferred] or gpu_hints)[0]
    allocation = provider.allocate(request, best, HGX, free)
    return {resource: ids_ for resource, ids_ in allocation.items() if isinstance(ids_, tuple)}


def test_gpus_get_the_nics_on_their_switches() -> None:
    assert gpu_nic(2, 2) == {GPU: ids(0, 1), NIC: ("mlx5_0", "mlx5_1")}
    assert gpu_nic(8, 8) == {GPU: ids(*range(8)), NIC: ALL_NICS}
    assert gpu_nic(1, 1, free_gpus=ids(1, 2, 3, 4)) == {GPU: ids(1), NIC: ("mlx5_1",)}


def test_gpus_follow_the_free_nics() -> None:
    # NICs 0 and 1 are taken: the GPUs on the switches of NICs 2 and 3 win the tie of the fabric.
    allocation = gpu_nic(2, 2, free_nics=("mlx5_2", "mlx5_3", "mlx5_4", "mlx5_5"))
    assert allocation == {GPU: ids(2, 3), NIC: ("mlx5_2", "mlx5_3")}


def test_one_nic_per_gpu_switch_before_a_second() -> None:
    allocation = gpu_nic(2, 1, free_gpus=ids(0, 1), free_nics=("mlx5_1", "mlx5_2"))
    assert allocation == {GPU: ids(0, 1), NIC: ("mlx5_1",)}


def test_required_alignment_refuses_nics_off_the_gpus_switches() -> None:
    free_gpus, free_nics = ids(0, 1), ("mlx5_2", "mlx5_3")
    preferred = gpu_nic(2, 2, free_gpus=free_gpus, free_nics=free_nics)
    assert preferred == {GPU: ids(0, 1), NIC: ("mlx5_2", "mlx5_3")}
    with pytest.raises(ProviderError, match="rdma/hca: 2 NIC"):
        gpu_nic(2, 2, free_gpus=free_gpus, free_nics=free_nics, alignment=NicAlignment.REQUIRED)
    required = gpu_nic(2, 2, free_gpus=ids(2, 3), free_nics=free_nics, alignment=NicAlignment.REQUIRED)
    assert required == {GPU: ids(2, 3), NIC: ("mlx5_2", "mlx5_3")}


def test_required_alignment_falls_back_to_numa_without_switch_information() -> None:
    gpus = DeviceGroup(resource=GPU, devices=(DeviceInfo("0", 0), DeviceInfo("1", 1)))
    nics = DeviceGroup(resource=NIC, devices=(DeviceInfo("n0", 0), DeviceInfo("n1", 1)))
    node = NumaTopology(node_name="plain", numa_ids=(0, 1), devices={GPU: gpus, NIC: nics})
    provider = DeviceProvider(nic_alignment=NicAlignment.REQUIRED)
    request = HintRequest("default/p", "c", Resource.from_list({GPU: 1, NIC: 1}), QosClass.GUARANTEED)
    free = FreeResources(devices={GPU: ("1",), NIC: ("n0", "n1")})
    chosen = provider.allocate(request, TopologyHint(NumaMask.of(0, 1), False), node, free)
    assert chosen == {GPU: ("1",), NIC: ("n1",)}
    with pytest.raises(ProviderError):
        provider.allocate(request, TopologyHint(None, False), node, FreeResources(devices={GPU: ("1",), NIC: ("n0",)}))


# --- the search against a brute-force oracle ---------------------------------------------------


def _oracle(node: NumaTopology, candidates: tuple[str, ...], free: tuple[str, ...], count: int) -> tuple[str, ...]:
    """Every set ranked by the documented order, computed directly from its definition."""
    group = node.devices[GPU]
    order = [device.id for device in group.devices]

    def weight(a: str, b: str) -> tuple[int, int]:
        pair = pair_weight(node, (GPU, group.by_id[a]), (GPU, group.by_id[b]))
        return pair.nvlinks, pair.pcie_closeness

    def best_pairs(left: list[str]) -> int:
        local = [(a, b) for a, b in itertools.combinations(order, 2) if group.by_id[a].numa == group.by_id[b].numa]
        top_nv = max((weight(a, b)[0] for a, b in local), default=0)
        top_pc = max((weight(a, b)[1] for a, b in local), default=0)
        edges = {
            frozenset((a, b))
            for a, b in itertools.combinations(left, 2)
            if group.by_id[a].numa == group.by_id[b].numa
            and (weight(a, b)[0] == top_nv if top_nv else top_pc > 0 and weight(a, b)[1] == top_pc)
        }
        best = 0
        for size in range(1, len(left) // 2 + 1):
            for chosen_edges in itertools.combinations(edges, size):
                if len(frozenset().union(*chosen_edges)) == 2 * size:
                    best = size
        return best

    universe = sorted(set(free) | set(candidates), key=order.index)

    def key(chosen: tuple[str, ...]) -> tuple[object, ...]:
        pairs = list(itertools.combinations(chosen, 2))
        left = [device for device in universe if device not in chosen]
        left_pairs = list(itertools.combinations(left, 2))
        return (
            sum(weight(a, b)[0] for a, b in pairs),
            sum(weight(a, b)[1] for a, b in pairs if weight(a, b)[0] == 0),
            best_pairs(left),
            sum(weight(a, b)[1] for a, b in pairs),
            sum(weight(a, b)[0] for a, b in left_pairs),
            sum(weight(a, b)[1] for a, b in left_pairs),
            [-order.index(device) for device in chosen],
        )

    ranked = sorted(candidates, key=order.index)
    return max(itertools.combinations(ranked, count), key=key)


@st.composite
def small_nodes(draw: st.DrawFn) -> tuple[NumaTopology, tuple[str, ...], tuple[str, ...], int]:
    size = draw(st.integers(2, 7))
    numa = [draw(st.integers(0, 1)) for _ in range(size)]
    switches = [draw(st.sampled_from(["s0", "s1", "s2", None])) for _ in range(size)]
    devices = tuple(DeviceInfo(str(index), numa[index], pci_switch=switches[index]) for index in range(size))
    links: dict[tuple[tuple[str, str], tuple[str, str]], DeviceLink] = {}
    for a, b in itertools.combinations(range(size), 2):
        if draw(st.booleans()):
            pcie = draw(st.sampled_from([None, *PcieDistance]))
            links[link_key((GPU, str(a)), (GPU, str(b)))] = DeviceLink(nvlinks=draw(st.integers(0, 3)), pcie=pcie)
    node = NumaTopology(node_name="h", numa_ids=(0, 1), devices={GPU: DeviceGroup(GPU, devices)}, links=links)
    all_ids = [device.id for device in devices]
    free = tuple(draw(st.lists(st.sampled_from(all_ids), min_size=1, unique=True)))
    candidates = tuple(draw(st.lists(st.sampled_from(free), min_size=1, unique=True)))
    count = draw(st.integers(1, len(candidates)))
    return node, candidates, free, count


@settings(max_examples=150, deadline=None)
@given(small_nodes())
def test_search_matches_the_brute_force_oracle(
    case: tuple[NumaTopology, tuple[str, ...], tuple[str, ...], int],
) -> None:
    node, candidates, free, count = case
    order = [device.id for device in node.devices[GPU].devices]
    expected = tuple(sorted(_oracle(node, candidates, free, count), key=order.index))
    assert choose_devices(GPU, count, candidates, node, free=free) == expected


def test_greedy_beyond_the_exact_limit_returns_a_valid_set() -> None:
    node = TOPOLOGIES["dgx1-v100"]
    everything = ids(*range(8))
    chosen = choose_devices(GPU, 4, everything, node, free=everything, exact_limit=2)
    assert len(chosen) == 4 and set(chosen) <= set(everything)
    assert choose_devices(GPU, 2, everything, node, free=everything, exact_limit=2) == ids(0, 3)


def test_exact_search_on_sixteen_nvswitch_gpus_is_fast() -> None:
    devices = tuple(DeviceInfo(str(index), index // 8, pci_switch=f"sw{index // 2}") for index in range(16))
    links = {
        link_key((GPU, str(a)), (GPU, str(b))): DeviceLink(nvlinks=18, nvswitch=True)
        for a, b in itertools.combinations(range(16), 2)
    }
    node = NumaTopology(node_name="hgx2", numa_ids=(0, 1), devices={GPU: DeviceGroup(GPU, devices)}, links=links)
    everything = tuple(str(index) for index in range(16))
    started = time.perf_counter()
    chosen = choose_devices(GPU, 8, everything, node, free=everything)
    assert time.perf_counter() - started < 5.0
    assert chosen == tuple(str(index) for index in range(8))
