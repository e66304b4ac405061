"""The DRA claim allocator: requests, constraints, counters, scoring and hints.

Expectations are computed by hand from the fixture machines (tests/fixtures/machines): on
hgx-h100 GPUs gpu-0..3 and NICs nic-0..3 sit on NUMA 0, gpu-4..7 / nic-4..7 on NUMA 1, and GPU k
shares its PCIe switch (hence its root, see hack/dra_slices.py) with NIC k. On pcie-8gpu-2numa
GPUs 2k and 2k+1 share a switch/root; gpu-0..3 on NUMA 0, gpu-4..7 on NUMA 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import attrs
import pytest
import yaml
from conftest import FIXTURES, load_machine

from numasched.api.dra import (
    ClaimAllocation,
    ClaimInfo,
    CounterConsumption,
    DeviceClassInfo,
    DeviceResult,
    DraDevice,
    ResourceSliceInfo,
    device_numa,
)
from numasched.api.hint import TopologyHint
from numasched.api.numamask import NumaMask
from numasched.api.topology import DeviceGroup, DeviceInfo, NumaTopology, TopologyPolicy
from numasched.cache.convert_dra import convert_device_class, convert_resource_claim, convert_resource_slice
from numasched.cache.convert_topology import numatopology_to_topology
from numasched.cache.machine_shapes import machine_objects
from numasched.plugins.dra.allocator import (
    AllocatorOptions,
    ClaimsDoNotFit,
    DeviceSetScore,
    DevicesInUse,
    NodeDevices,
    PodClaimsAllocation,
    Strategy,
    allocate_claims,
    claim_hints,
)
from numasched.plugins.dra.cel import CelEvaluator
from numasched.plugins.numaaware.policy import merge

DRA = FIXTURES / "dra"
NUMA = "resource.kubernetes.io/numaNode"
ROOT = "resource.kubernetes.io/pcieRoot"
FIRST_FIT = AllocatorOptions(strategy=Strategy.FIRST_FIT)


def load_node(path: Path, node_name: str) -> tuple[NodeDevices, dict[str, DeviceClassInfo]]:
    slices: list[ResourceSliceInfo] = []
    classes: dict[str, DeviceClassInfo] = {}
    for document in yaml.safe_load_all(path.read_text()):
        if document["kind"] == "ResourceSlice":
            info, problems = convert_resource_slice(document)
            assert info is not None and not problems
            slices.append(info)
    for document in yaml.safe_load_all((DRA / "hgx-h100-numa.yaml").read_text()):
        if document["kind"] == "DeviceClass":
            device_class, problems = convert_device_class(document)
            assert device_class is not None and not problems
            classes[device_class.name] = device_class
    return NodeDevices.from_slices(node_name, slices), classes


def claim(name: str, requests: list[dict[str, Any]], constraints: Sequence[dict[str, Any]] = ()) -> ClaimInfo:
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "ml", "name": name, "uid": f"uid-{name}"},
        "spec": {"devices": {"requests": requests, "constraints": list(constraints)}},
    }
    info, problems = convert_resource_claim(body)
    assert info is not None and not problems, problems
    return info


def gpus(count: int, name: str = "gpus") -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count}}


def nics(count: int, name: str = "nic") -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": "rdma-nic", "count": count}}


def busy(node: NodeDevices, *names: str) -> DevicesInUse:
    ids = {device.name: device.id for device in node.devices}
    return DevicesInUse(frozenset(ids[name] for name in names))


def chosen(result: PodClaimsAllocation | ClaimsDoNotFit) -> list[str]:
    assert isinstance(result, PodClaimsAllocation), result
    return sorted(r.device for _, allocation in result.allocations for r in allocation.results)


@pytest.fixture(scope="module")
def hgx() -> tuple[NodeDevices, dict[str, DeviceClassInfo]]:
    return load_node(DRA / "hgx-h100-numa.yaml", "hgx-0")


@pytest.fixture(scope="module")
def pcie() -> tuple[NodeDevices, dict[str, DeviceClassInfo]]:
    return load_node(DRA / "pcie-8gpu-2numa-numa.yaml", "pcie-0")


def _gpu_result(request: str, device: str) -> DeviceResult:
    return DeviceResult(request, "gpu.nvidia.com", "hgx-0", device)


# -- the Done-when cases of issue 17 --------------------------------------------------------------


def test_four_gpus_match_numa_follow_the_cpus_restriction(hgx: tuple[NodeDevices, dict[str, DeviceClassInfo]]) -> None:
    """All GPUs free; the pod's 16 exclusive CPUs fit only on NUMA 1 (the CPU side's hint), so the
    merged hint restricts the claim to NUMA 1. Upstream's first fit ignores the CPUs and takes
    gpu-0..3 on NUMA 0: GPUs and CPUs on different NUMA nodes. (The CPU side and the merge are the
    numa-aware plugin's; here the restriction is what its merge gives.)"""
    node, classes = hgx
    pod_claim = claim("train", [gpus(4)], [{"requests": ["gpus"], "matchAttribute": NUMA}])
    evaluator = CelEvaluator()
    hints = claim_hints([pod_claim], node, DevicesInUse(), classes, evaluator)
    assert hints == [
        TopologyHint(NumaMask.of(0), True),
        TopologyHint(NumaMask.of(1), True),
        TopologyHint(NumaMask.of(0, 1), False),
    ]
    ours = allocate_claims([pod_claim], node, DevicesInUse(), classes, evaluator, numa_restriction=NumaMask.of(1))
    assert chosen(ours) == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]
    assert isinstance(ours, PodClaimsAllocation) and ours.numa == NumaMask.of(1)
    first_fit = allocate_claims([pod_claim], node, DevicesInUse(), classes, evaluator, options=FIRST_FIT)
    assert chosen(first_fit) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


@pytest.mark.parametrize(
    "policy", [TopologyPolicy.SINGLE_NUMA_NODE, TopologyPolicy.RESTRICTED, TopologyPolicy.BEST_EFFORT]
)
def test_claim_hints_merge_with_cpu_hints(
    hgx: tuple[NodeDevices, dict[str, DeviceClassInfo]], policy: TopologyPolicy
) -> None:
    """The claim's hints go through the kubelet's merge with the CPU manager's: 16 exclusive CPUs
    that only NUMA 1 has free give the CPU hints {1} (preferred) and {0,1}; merged with the
    claim's {0}, {1} (preferred) and {0,1}, the best hint is NUMA 1 under every policy, and the
    claim allocated inside it is gpu-4..7."""
    node, classes = hgx
    pod_claim = claim("train", [gpus(4)], [{"requests": ["gpus"], "matchAttribute": NUMA}])
    evaluator = CelEvaluator()
    dra_hints = claim_hints([pod_claim], node, DevicesInUse(), classes, evaluator)
    cpu_side = [TopologyHint(NumaMask.of(1), True), TopologyHint(NumaMask.of(0, 1), False)]
    best, admitted = merge(policy, [{"cpu": cpu_side}, {"dra": dra_hints}], [0, 1])
    assert admitted and best == TopologyHint(NumaMask.of(1), True)
    assert best.affinity is not None
    result = allocate_claims([pod_claim], node, DevicesInUse(), classes, evaluator, numa_restriction=best.affinity)
    assert chosen(result) == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]


def test_four_gpus_stay_on_one_numa_node_where_first_fit_splits(
    hgx: tuple[NodeDevices, dict[str, DeviceClassInfo]],
) -> None:
    """gpu-1 is in use: NUMA 0 has 3 free GPUs, NUMA 1 has 4. Without any constraint first fit
    takes gpu-0,2,3,4 (two NUMA nodes); ours takes the whole of NUMA 1."""
    node, classes = hgx
    in_use = busy(node, "gpu-1")
    pod_claim = claim("train", [gpus(4)])
    evaluator = CelEvaluator()
    ours = allocate_claims([pod_claim], node, in_use, classes, evaluator)
    assert chosen(ours) == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]
    assert isinstance(ours, PodClaimsAllocation) and ours.score.numa_span == 1
    first_fit = allocate_claims([pod_claim], node, in_use, classes, evaluator, options=FIRST_FIT)
    assert chosen(first_fit) == ["gpu-0", "gpu-2", "gpu-3", "gpu-4"]
    # The hints say so too: only NUMA 1 alone can hold the claim.
    assert claim_hints([pod_claim], node, in_use, classes, evaluator) == [
        TopologyHint(NumaMask.of(1), True),
        TopologyHint(NumaMask.of(0, 1), False),
    ]


def test_hints_prefer_like_the_kubelet_device_manager(hgx: tuple[NodeDevices, dict[str, DeviceClassInfo]]) -> None:
    """gpu-1 and gpu-5 in use: 4 GPUs fit only across both NUMA nodes now. The kubelet's device
    manager prefers a mask as narrow as the node's devices allow regardless of use (one NUMA node
    here), so {0,1} is not preferred; asked for the narrowest that works now, it is."""
    node, classes = hgx
    in_use = busy(node, "gpu-1", "gpu-5")
    pod_claim = claim("train", [gpus(4)])
    evaluator = CelEvaluator()
    assert claim_hints([pod_claim], node, in_use, classes, evaluator) == [TopologyHint(NumaMask.of(0, 1), False)]
    now = claim_hints([pod_claim], node, in_use, classes, evaluator, preferred_from_all_devices=False)
    assert now == [TopologyHint(NumaMask.of(0, 1), True)]


def test_gpu_and_nic_match_pcie_root(hgx: tuple[NodeDevices, dict[str, DeviceClassInfo]]) -> None:
    """gpu-0 and nic-1 are in use. The pair must share a root: gpu-1's NIC is taken, so the first
    pair on one root is gpu-2 + nic-2 (slice order), both on NUMA 0 like the pod's CPUs."""
    node, classes = hgx
    in_use = busy(node, "gpu-0", "nic-1")
    pod_claim = claim("rdma", [gpus(1, "gpu"), nics(1)], [{"requests": ["gpu", "nic"], "matchAttribute": ROOT}])
    result = allocate_claims([pod_claim], node, in_use, classes, CelEvaluator())
    assert chosen(result) == ["gpu-2", "nic-2"]
    assert isinstance(result, PodClaimsAllocation)
    ((_, allocation),) = result.allocations
    assert {(r.request, r.driver, r.pool) for r in allocation.results} == {
        ("gpu", "gpu.nvidia.com", "hgx-0"),
        ("nic", "dra.net", "hgx-0"),
    }
    assert allocation.node_name == "hgx-0"


def test_gpu_and_nic_share_a_root_by_score_without_a_constraint(
    hgx: tuple[NodeDevices, dict[str, DeviceClassInfo]],
) -> None:
    """gpu-0 in use, no constraint: first fit takes gpu-1 and nic-0 (two roots); the PCIe score
    pairs gpu-1 with nic-1 on its own root (NUMA 0, already in use, before NUMA 1)."""
    node, classes = hgx
    in_use = busy(node, "gpu-0")
    pod_claim = claim("rdma", [gpus(1, "gpu"), nics(1)])
    evaluator = CelEvaluator()
    assert chosen(allocate_claims([pod_claim], node, in_use, classes, evaluator)) == ["gpu-1", "nic-1"]
    first_fit = allocate_claims([pod_claim], node, in_use, classes, evaluator, options=FIRST_FIT)
    assert chosen(first_fit) == ["gpu-1", "nic-0"]


# -- scoring beyond NUMA --------------------------------------------------------------------------


def test_fragmentation_prefers_a_root_already_in_use(pcie: tuple[NodeDevices, dict[str, DeviceClassInfo]]) -> None:
    """gpu-2 is in use (root of gpu-2/gpu-3). One GPU: first fit takes gpu-0 and breaks the
    wholly free root of gpu-0/gpu-1; ours takes gpu-3 (same NUMA 0 already in use, root too)."""
    node, classes = pcie
    in_use = busy(node, "gpu-2")
    pod_claim = claim("one", [gpus(1)])
    evaluator = CelEvaluator()
    ours = allocate_claims([pod_claim], node, in_use, classes, evaluator)
    assert chosen(ours) == ["gpu-3"]
    assert isinstance(ours, PodClaimsAllocation) and ours.score.broken_roots == 0 and ours.score.broken_numa == 0
    assert chosen(allocate_claims([pod_claim], node, in_use, classes, evaluator, options=FIRST_FIT)) == ["gpu-0"]


def test_two_gpus_on_one_root(pcie: tuple[NodeDevices, dict[str, DeviceClassInfo]]) -> None:
    """gpu-0 and gpu-3 in use: two GPUs on NUMA 0 would be gpu-1 + gpu-2 (two roots, first fit);
    NUMA 1 has whole roots, but NUMA 0 is already in use... span is 1 either way, so the PCIe
    score decides: gpu-4 + gpu-5 (one root) beats gpu-1 + gpu-2 (two roots)."""
    node, classes = pcie
    in_use = busy(node, "gpu-0", "gpu-3")
    pod_claim = claim("two", [gpus(2)])
    evaluator = CelEvaluator()
    assert chosen(allocate_claims([pod_claim], node, in_use, classes, evaluator)) == ["gpu-4", "gpu-5"]
    assert chosen(allocate_claims([pod_claim], node, in_use, classes, evaluator, options=FIRST_FIT)) == [
        "gpu-1",
        "gpu-2",
    ]


def test_partition_attribute_scores_fewest_partitions() -> None:
    """Four GPUs on one NUMA node in two NVLink partitions (a, b); two GPUs should come from one
    partition even though slice order interleaves them."""
    devices = tuple(
        DraDevice(
            "gpu.nvidia.com",
            "p",
            f"gpu-{i}",
            {"gpu.nvidia.com/type": "gpu", NUMA: 0, "example.com/partition": "ab"[i % 2]},
        )
        for i in range(4)
    )
    node = NodeDevices("n", devices)
    classes = {"gpu.nvidia.com": DeviceClassInfo("gpu.nvidia.com", ("device.driver == 'gpu.nvidia.com'",))}
    options = AllocatorOptions(partition_attributes=("example.com/partition",))
    result = allocate_claims([claim("p", [gpus(2)])], node, DevicesInUse(), classes, CelEvaluator(), options=options)
    assert chosen(result) == ["gpu-0", "gpu-2"]
    assert isinstance(result, PodClaimsAllocation) and result.score.partitions == 1


# -- the API's request semantics ------------------------------------------------------------------


def test_first_available_takes_the_first_alternative_that_fits(
    hgx: tuple[NodeDevices, dict[str, DeviceClassInfo]],
) -> None:
    node, classes = hgx
    request = {
        "name": "acc",
        "firstAvailable": [
            {"name": "mig", "deviceClassName": "mig.nvidia.com"},
            {"name": "eight", "deviceClassName": "gpu.nvidia.com", "count": 8},
            {"name": "two", "deviceClassName": "gpu.nvidia.com", "count": 2},
        ],
    }
    in_use = busy(node, "gpu-0")
    result = allocate_claims([claim("fa", [request])], node, in_use, classes, CelEvaluator())
    assert isinstance(result, PodClaimsAllocation)
    ((_, allocation),) = result.allocations
    assert {r.request for r in allocation.results} == {"acc/two"}
    assert sorted(r.device for r in allocation.results) == ["gpu-1", "gpu-2"]


def test_allocation_mode_all_needs_every_matching_device_free(
    hgx: tuple[NodeDevices, dict[str, DeviceClassInfo]],
) -> None:
    node, classes = hgx
    everything = {"name": "all", "exactly": {"deviceClassName": "rdma-nic", "allocationMode": "All"}}
    evaluator = CelEvaluator()
    assert chosen(allocate_claims([claim("all", [everything])], node, DevicesInUse(), classes, evaluator)) == [
        f"nic-{i}" for i in range(8)
    ]
    refused = allocate_claims([claim("all", [everything])], node, busy(node, "nic-3"), classes, evaluator)
    assert isinstance(refused, ClaimsDoNotFit) and "in use" in refused.reason


def test_admin_access_uses_devices_in_use_without_consuming(
    hgx: tuple[NodeDevices, dict[str, DeviceClassInfo]],
) -> None:
    node, classes = hgx
    in_use = busy(node, *[f"gpu-{i}" for i in range(8)])
    monitor = {"name": "mon", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 8, "adminAccess": True}}
    result = allocate_claims([claim("mon", [monitor])], node, in_use, classes, CelEvaluator())
    assert isinstance(result, PodClaimsAllocation)
    ((_, allocation),) = result.allocations
    assert all(r.admin_access for r in allocation.results) and len(allocation.results) == 8
    assert DevicesInUse().plus(allocation, node).devices == frozenset()


def test_distinct_attribute_and_selectors(hgx: tuple[NodeDevices, dict[str, DeviceClassInfo]]) -> None:
    """Two GPUs on distinct NUMA nodes, each of them with productName containing H100."""
    node, classes = hgx
    request = gpus(2)
    request["exactly"]["selectors"] = [
        {"cel": {"expression": "device.attributes['gpu.nvidia.com'].productName.contains('H100')"}}
    ]
    result = allocate_claims(
        [claim("spread", [request], [{"distinctAttribute": NUMA}])], node, DevicesInUse(), classes, CelEvaluator()
    )
    assert chosen(result) == ["gpu-0", "gpu-4"]
    none = dict(request, exactly=dict(request["exactly"], selectors=[{"cel": {"expression": "false"}}]))
    refused = allocate_claims([claim("none", [none])], node, DevicesInUse(), classes, CelEvaluator())
    assert isinstance(refused, ClaimsDoNotFit) and "0 free matching devices, 2 requested" in refused.reason


def test_cel_error_is_reported_and_the_device_does_not_match(
    hgx: tuple[NodeDevices, dict[str, DeviceClassInfo]],
) -> None:
    """GPUs have no dra.net attributes: the class's selector errors on them (reported, no match);
    the NICs match."""
    node, classes = hgx
    wide = {"name": "any", "exactly": {"deviceClassName": "everything", "count": 1}}
    classes = dict(classes, everything=DeviceClassInfo("everything", ("device.attributes['dra.net'].rdma",)))
    result = allocate_claims([claim("x", [wide])], node, DevicesInUse(), classes, CelEvaluator())
    assert chosen(result) == ["nic-0"]
    assert isinstance(result, PodClaimsAllocation)
    assert any("gpu.nvidia.com/hgx-0/gpu-0" in problem and "rdma" in problem for problem in result.problems)
    # Eight GPUs erred; 8 are named, and when nothing matches the errors say why.
    assert len(result.problems) == 8
    gpu_only = dict(classes, everything=DeviceClassInfo("everything", ("device.attributes['gpu.nvidia.com'].rdma",)))
    refused = allocate_claims([claim("x", [wide])], node, DevicesInUse(), gpu_only, CelEvaluator())
    assert isinstance(refused, ClaimsDoNotFit) and "0 free matching devices" in refused.reason
    assert len(refused.problems) == 9 and refused.problems[-1] == "... and 8 more CEL errors"


def test_node_score() -> None:
    """Hand-computed from the formula in DeviceSetScore.node_score."""
    assert DeviceSetScore(numa_span=1, pcie_roots=1).node_score(2) == 100
    assert DeviceSetScore(numa_span=2, pcie_roots=2).node_score(2) == 30  # 100 - 60 - 10
    assert DeviceSetScore(numa_span=1, pcie_roots=1, broken_numa=1).node_score(2) == 90  # 100 - 20 * 1/2
    # 100 - 60 * 2/7 - 10 - 10 - 20 * 3/8 = 55.4
    assert DeviceSetScore(numa_span=3, partitions=2, pcie_roots=3, broken_numa=3).node_score(8) == 55
    assert DeviceSetScore().node_score(0) == 100


def test_match_attribute_across_two_claims_is_per_claim(hgx: tuple[NodeDevices, dict[str, DeviceClassInfo]]) -> None:
    """Constraints bind the requests of their own claim only; two claims of one pod each take a
    GPU, and the pod's devices stay on one NUMA node by score."""
    node, classes = hgx
    first = claim("a", [gpus(2)], [{"matchAttribute": NUMA}])
    second = claim("b", [gpus(1)])
    result = allocate_claims([first, second], node, busy(node, "gpu-0"), classes, CelEvaluator())
    assert isinstance(result, PodClaimsAllocation)
    assert [key for key, _ in result.allocations] == ["ml/a", "ml/b"]
    assert chosen(result) == ["gpu-1", "gpu-2", "gpu-3"]
    assert result.numa == NumaMask.of(0)


def test_already_allocated_claim_counts_for_the_span(hgx: tuple[NodeDevices, dict[str, DeviceClassInfo]]) -> None:
    node, classes = hgx
    shared = attrs.evolve(
        claim("shared", [gpus(1)]),
        allocation=ClaimAllocation(
            (_gpu_result("gpus", "gpu-5"),),
            "hgx-0",
        ),
    )
    result = allocate_claims([shared, claim("mine", [gpus(1)])], node, busy(node, "gpu-5"), classes, CelEvaluator())
    assert chosen(result) == ["gpu-4"]
    assert isinstance(result, PodClaimsAllocation) and result.numa == NumaMask.of(1)
    elsewhere = attrs.evolve(shared, allocation=ClaimAllocation((_gpu_result("gpus", "gpu-5"),), "other"))
    refused = allocate_claims([elsewhere], node, DevicesInUse(), classes, CelEvaluator())
    assert isinstance(refused, ClaimsDoNotFit) and "allocated on node other" in refused.reason


def test_claim_that_fits_no_numa_node_has_no_hints(
    hgx: tuple[NodeDevices, dict[str, DeviceClassInfo]],
) -> None:
    node, classes = hgx
    result = allocate_claims(
        [claim("x", [gpus(5)], [{"matchAttribute": NUMA}])], node, DevicesInUse(), classes, CelEvaluator()
    )
    assert isinstance(result, ClaimsDoNotFit)
    assert (
        claim_hints([claim("x", [gpus(5)], [{"matchAttribute": NUMA}])], node, DevicesInUse(), classes, CelEvaluator())
        == []
    )


# -- counters (partitionable devices) -------------------------------------------------------------


def test_shared_counters_limit_partitions_of_one_gpu() -> None:
    """A GPU published as a whole and as two halves, all drawing on one counter set of 8
    memory slices: the whole GPU (8) excludes the halves (4 each), two halves fit."""

    def part(name: str, slices: int) -> DraDevice:
        return DraDevice(
            "gpu.nvidia.com",
            "p",
            name,
            {"gpu.nvidia.com/type": "gpu"},
            consumes_counters=(CounterConsumption("gpu-0-counters", {"memorySlices": Fraction(slices)}),),
        )

    node = NodeDevices(
        "n",
        (part("gpu-0", 8), part("gpu-0-half-a", 4), part("gpu-0-half-b", 4)),
        {("gpu.nvidia.com", "p", "gpu-0-counters"): {"memorySlices": Fraction(8)}},
    )
    classes = {"gpu.nvidia.com": DeviceClassInfo("gpu.nvidia.com", ("device.driver == 'gpu.nvidia.com'",))}
    evaluator = CelEvaluator()
    two = allocate_claims([claim("two", [gpus(2)])], node, DevicesInUse(), classes, evaluator)
    assert chosen(two) == ["gpu-0-half-a", "gpu-0-half-b"]
    three = allocate_claims([claim("three", [gpus(3)])], node, DevicesInUse(), classes, evaluator)
    assert isinstance(three, ClaimsDoNotFit)
    assert isinstance(two, PodClaimsAllocation)
    ((_, allocation),) = two.allocations
    after = DevicesInUse.from_allocations([allocation], node)
    assert after.counters == {("gpu.nvidia.com", "p", "gpu-0-counters"): {"memorySlices": Fraction(8)}}
    assert isinstance(allocate_claims([claim("one", [gpus(1)])], node, after, classes, evaluator), ClaimsDoNotFit)


# -- NUMA of a device through its PCIe root -------------------------------------------------------


def _topology_with_bus_ids(machine_devices: Mapping[str, Iterable[tuple[str, int, str]]]) -> NumaTopology:
    groups = {
        resource: DeviceGroup(resource, tuple(DeviceInfo(id=i, numa=numa, pci_bus_id=bus) for i, numa, bus in entries))
        for resource, entries in machine_devices.items()
    }
    return NumaTopology(node_name="hgx-0", numa_ids=(0, 1), devices=groups)


def test_numa_through_pcie_root_and_the_node_topology() -> None:
    """The slices without the numaNode attribute: the NUMA node of gpu-k comes from the topology
    device on its root (NIC k on hgx-h100: same switch, so same root); the claim then aligns."""
    node, classes = load_node(DRA / "hgx-h100.yaml", "hgx-0")
    # The node topology knows the NICs' PCI addresses only (the GPUs' are not published there).
    nic_bus = {
        d.attributes["dra.net/rdmaDevice"]: d.attributes["resource.kubernetes.io/pciBusID"]
        for d in node.devices
        if d.driver == "dra.net"
    }
    topology = _topology_with_bus_ids(
        {"rdma/hca": [(f"mlx5_{k}", 0 if k < 4 else 1, str(nic_bus[f"mlx5_{k}"])) for k in range(8)]}
    )
    by_name = {d.name: d for d in node.devices}
    assert [device_numa(by_name[f"gpu-{k}"], topology, node.pcie_roots) for k in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert device_numa(by_name["gpu-0"], None) is None
    in_use = busy(node, "gpu-1")
    result = allocate_claims([claim("t", [gpus(4)])], node, in_use, classes, CelEvaluator(), topology=topology)
    assert chosen(result) == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]


def test_search_limit_is_reported() -> None:
    """Eight GPUs on distinct NUMA nodes out of two: impossible. With a small budget the reason
    says the search stopped at its limit; with the default one, that no set satisfies the claim."""
    devices = tuple(DraDevice("d", "p", f"x-{i}", {"d/type": "gpu", NUMA: i % 2}) for i in range(16))
    node = NodeDevices("n", devices)
    classes = {"gpu.nvidia.com": DeviceClassInfo("gpu.nvidia.com", ())}
    result = allocate_claims(
        [claim("big", [gpus(8)], [{"distinctAttribute": NUMA}])],
        node,
        DevicesInUse(),
        classes,
        CelEvaluator(),
        options=AllocatorOptions(max_steps=50),
    )
    assert isinstance(result, ClaimsDoNotFit) and "search limit" in result.reason
    unlimited = allocate_claims(
        [claim("big", [gpus(8)], [{"distinctAttribute": NUMA}])], node, DevicesInUse(), classes, CelEvaluator()
    )
    assert isinstance(unlimited, ClaimsDoNotFit) and unlimited.reason.startswith("no device set")


def test_two_numa_nodes_on_one_socket_beat_two_sockets() -> None:
    """dgx-a100 (NPS4: NUMA 0-3 on socket 0, 4-7 on socket 1; SLIT 12 within, 32 across): GPUs
    sit two per NUMA node on NUMA 3, 1, 7, 5. With gpu-1 in use, 4 GPUs need two NUMA nodes; of
    {1,5}, {1,7} and {5,7} only {5,7} is on one socket: gpu-4..7. First fit: gpu-0, 2, 3, 4 (three
    NUMA nodes)."""
    node, classes = load_node(DRA / "dgx-a100-numa.yaml", "dgx-0")
    _, numatopology = machine_objects(load_machine("dgx-a100"), "dgx-0")
    topology = numatopology_to_topology(numatopology)
    in_use = busy(node, "gpu-1")
    evaluator = CelEvaluator()
    ours = allocate_claims([claim("t", [gpus(4)])], node, in_use, classes, evaluator, topology=topology)
    assert chosen(ours) == ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]
    assert isinstance(ours, PodClaimsAllocation) and ours.numa == NumaMask.of(5, 7)
    assert ours.score.numa_distance == topology.distance(5, 7) == 12
    first_fit = allocate_claims([claim("t", [gpus(4)])], node, in_use, classes, evaluator, options=FIRST_FIT)
    assert chosen(first_fit) == ["gpu-0", "gpu-2", "gpu-3", "gpu-4"]


def test_topology_partitions_through_pci_bus_ids(hgx: tuple[NodeDevices, dict[str, DeviceClassInfo]]) -> None:
    """Fabric partitions {0,1,4,5} and {2,3,6,7} in the node topology, found through the GPUs'
    pciBusID. gpu-0 in use, two GPUs on NUMA 0: gpu-2 + gpu-3 (one partition) rather than first
    fit's gpu-1 + gpu-2 (two)."""
    node, classes = hgx
    bus = {d.name: str(d.attributes["resource.kubernetes.io/pciBusID"]) for d in node.devices}
    group = DeviceGroup(
        "nvidia.com/gpu",
        tuple(DeviceInfo(id=str(k), numa=k // 4, pci_bus_id=bus[f"gpu-{k}"]) for k in range(8)),
        partitions=(frozenset({"0", "1", "4", "5"}), frozenset({"2", "3", "6", "7"})),
    )
    topology = NumaTopology(node_name="hgx-0", numa_ids=(0, 1), devices={"nvidia.com/gpu": group})
    in_use = busy(node, "gpu-0")
    evaluator = CelEvaluator()
    ours = allocate_claims([claim("p", [gpus(2)])], node, in_use, classes, evaluator, topology=topology)
    assert chosen(ours) == ["gpu-2", "gpu-3"]
    assert isinstance(ours, PodClaimsAllocation) and ours.score.partitions == 1
    first_fit = allocate_claims([claim("p", [gpus(2)])], node, in_use, classes, evaluator, options=FIRST_FIT)
    assert chosen(first_fit) == ["gpu-1", "gpu-2"]


def test_device_numa_sources_in_order() -> None:
    """The standard attribute first, then the driver's own (`numa` on NVIDIA's vfio devices); a
    NUMA id the topology lacks is unknown."""
    topology = NumaTopology(node_name="n", numa_ids=(0, 1))
    vfio = DraDevice("gpu.nvidia.com", "p", "gpu-vfio-0", {"gpu.nvidia.com/type": "vfio", "gpu.nvidia.com/numa": 1})
    assert device_numa(vfio, topology) == 1
    both = attrs.evolve(vfio, attributes={**vfio.attributes, NUMA: 0})
    assert device_numa(both, topology) == 0
    assert device_numa(attrs.evolve(vfio, attributes={NUMA: 5}), topology) is None
    assert device_numa(attrs.evolve(vfio, attributes={NUMA: 5}), None) == 5
    other_driver = DraDevice("x.example.com", "p", "d", {"x.example.com/numa": 1})
    assert device_numa(other_driver, topology) is None
