"""Reading Volcano's Numatopology as its API declares it (volcano.sh/apis
pkg/apis/nodeinfo/v1alpha1/numatopo_types.go) and as Volcano's resource-exporter fills it
(pkg/numatopo/cpunumainfo.go: numares.cpu.allocatable is the FREE cpuset, podAllocations a list).

The machine used throughout: 2 sockets, one NUMA node each, 2 cores of 2 threads per socket, CPU
ids as Linux numbers them (0-3 first threads, 4-7 their siblings):

    NUMA 0 / socket 0: core 0 = CPUs 0,4   core 1 = CPUs 1,5
    NUMA 1 / socket 1: core 0 = CPUs 2,6   core 1 = CPUs 3,7
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest

from numasched.api.allocation import (
    POD_ALLOCATIONS_ANNOTATION,
    ContainerAllocation,
    PodAllocation,
    merge_pod_allocations,
)
from numasched.api.device_topology import DEVICE_TOPOLOGY_ANNOTATION
from numasched.api.idset import IdSet
from numasched.api.numa_detail import NUMA_DETAIL_ANNOTATION, format_numa_detail
from numasched.api.numamask import NumaMask
from numasched.api.topology import CpuManagerPolicy, TopologyPolicy
from numasched.cache.convert_pod import ConversionError
from numasched.cache.convert_topology import numatopology_to_topology, pod_allocation_report


def cpu_detail() -> dict[str, dict[str, int]]:
    detail = {}
    for cpu in range(8):
        entry = {"numa": (cpu % 4) // 2, "socket": (cpu % 4) // 2, "core": cpu % 2}
        detail[str(cpu)] = {key: value for key, value in entry.items() if value}  # omitempty
    return detail


def gpu_annotation() -> str:
    """Eight GPUs, 0-3 on NUMA 0 and 4-7 on NUMA 1, as the device-topology annotation says."""
    devices = [{"id": str(gpu), "numa": 0 if gpu < 4 else 1, "healthy": True} for gpu in range(8)]
    return json.dumps({"version": 1, "devices": {"nvidia.com/gpu": devices}, "links": []})


def volcano_object(**spec: Any) -> dict[str, Any]:
    """A Numatopology shaped as Volcano's resource-exporter writes it (update.go)."""
    body: dict[str, Any] = {
        "policies": {"CPUManagerPolicy": "static", "TopologyManagerPolicy": "single-numa-node"},
        "resReserved": {"cpu": "2"},
        "numares": {"cpu": {"allocatable": "0-7", "capacity": 8}},
        "cpuDetail": cpu_detail(),
    }
    body.update(spec)
    return {
        "apiVersion": "nodeinfo.volcano.sh/v1alpha1",
        "kind": "Numatopology",
        "metadata": {"name": "n1", "annotations": {"timestamp": "1700000000"}},
        "spec": body,
    }


def with_gpus(obj: dict[str, Any], free: str) -> dict[str, Any]:
    obj["metadata"]["annotations"][DEVICE_TOPOLOGY_ANNOTATION] = gpu_annotation()
    obj["spec"]["numares"]["nvidia.com/gpu"] = {"allocatable": free, "capacity": 8}
    return obj


def test_a_volcano_exporter_object_reads_with_free_cpus_and_reserved_cpus_apart() -> None:
    topology = numatopology_to_topology(volcano_object(numares={"cpu": {"allocatable": "0,2-3,6-7", "capacity": 8}}))
    assert topology.numa_ids == (0, 1)
    assert [(c.cpu, c.numa, c.socket, c.core) for c in topology.cpus][:3] == [(0, 0, 0, 0), (1, 0, 0, 1), (2, 1, 1, 0)]
    # Free is what numares says, nothing more: CPUs 1, 4, 5 are taken (or reserved).
    assert topology.available_cpus == IdSet.parse("0,2-3,6-7")
    # resReserved.cpu "2": the kubelet reserves a whole core, the first of socket 0 (CPUs 0 and 4).
    assert topology.reserved_cpus == IdSet.parse("0,4")
    assert topology.allocatable_cpus == IdSet.parse("1-3,5-7")
    assert topology.policies.cpu_manager_policy is CpuManagerPolicy.STATIC
    assert topology.policies.topology_manager_policy is TopologyPolicy.SINGLE_NUMA_NODE


@pytest.mark.parametrize(
    ("reserved", "expected"),
    [
        ({}, ""),
        ({"cpu": "0"}, ""),
        ({"cpu": "1500m"}, "0,4"),  # rounded up to whole CPUs, as the kubelet does
        ({"cpu": "1"}, "0"),
        ({"cpu": "4", "memory": "1Gi"}, "0-1,4-5"),  # a whole socket
    ],
)
def test_reserved_cpus_follow_res_reserved_as_the_kubelet_chooses_them(reserved: dict[str, str], expected: str) -> None:
    assert numatopology_to_topology(volcano_object(resReserved=reserved)).reserved_cpus == IdSet.parse(expected)


def test_reserved_system_cpus_named_in_policies_are_taken_exactly() -> None:
    obj = volcano_object()
    obj["spec"]["policies"]["ReservedSystemCPUs"] = "3,7"
    assert numatopology_to_topology(obj).reserved_cpus == IdSet.parse("3,7")


def test_the_4998_object_says_which_gpus_are_free() -> None:
    topology = numatopology_to_topology(with_gpus(volcano_object(), "0-2,7"))
    assert topology.available_devices == {"nvidia.com/gpu": frozenset({"0", "1", "2", "7"})}
    gpus = topology.devices["nvidia.com/gpu"]
    assert [(d.id, d.numa) for d in gpus.devices] == [(str(i), 0 if i < 4 else 1) for i in range(8)]


def test_a_listed_resource_without_allocatable_has_nothing_free_and_an_unlisted_one_says_nothing() -> None:
    obj = with_gpus(volcano_object(), "")
    del obj["spec"]["numares"]["nvidia.com/gpu"]["allocatable"]  # omitempty drops ""
    obj["spec"]["numares"]["cpu"] = {"capacity": 8}
    topology = numatopology_to_topology(obj)
    assert topology.available_cpus == IdSet()
    assert topology.available_devices == {"nvidia.com/gpu": frozenset()}
    bare = volcano_object()
    del bare["spec"]["numares"]
    topology = numatopology_to_topology(bare)
    assert topology.available_cpus is None and topology.available_devices == {}


def test_free_cpus_say_nothing_without_the_static_cpu_manager() -> None:
    obj = volcano_object(numares={"cpu": {"capacity": 8}})
    obj["spec"]["policies"]["CPUManagerPolicy"] = "none"
    assert numatopology_to_topology(obj).available_cpus is None
    obj["spec"]["numares"]["cpu"]["allocatable"] = "0-9"  # still checked: CPUs 8-9 do not exist
    with pytest.raises(ConversionError, match="CPUs 8-9"):
        numatopology_to_topology(obj)


def test_gpus_known_only_by_numares_keep_their_taken_ones_as_unreported_devices() -> None:
    obj = volcano_object()
    obj["spec"]["numares"]["nvidia.com/gpu"] = {"allocatable": "GPU-aa,GPU-bb", "capacity": 4}
    topology = numatopology_to_topology(obj)
    group = topology.devices["nvidia.com/gpu"]
    assert len(group.devices) == 4 and all(d.numa is None for d in group.devices)
    assert topology.available_devices["nvidia.com/gpu"] == frozenset({"GPU-aa", "GPU-bb"})


def test_gpu_detail_still_reads_when_present() -> None:
    obj = volcano_object(gpuDetail={str(i): ({"numa": 1} if i >= 2 else {}) for i in range(4)})
    obj["spec"]["numares"]["nvidia.com/gpu"] = {"allocatable": "1,3", "capacity": 4}
    topology = numatopology_to_topology(obj)
    assert [(d.id, d.numa) for d in topology.devices["nvidia.com/gpu"].devices] == [
        ("0", 0),
        ("1", 0),
        ("2", 1),
        ("3", 1),
    ]
    assert topology.available_devices["nvidia.com/gpu"] == frozenset({"1", "3"})


def test_volcano_pod_allocations_list_is_read_and_every_listed_pod_is_accounted() -> None:
    obj = volcano_object(
        podAllocations=[
            # From the CPU manager checkpoint: uid only.
            {"uid": "u-1", "containerAllocations": [{"name": "main", "allocations": {"cpu": "1,5"}}]},
            # From PodResources: namespace/name only, with a device quantity (no ids).
            {
                "name": "train",
                "namespace": "ml",
                "containerAllocations": [
                    {"name": "a", "allocations": {"cpu": "3", "nvidia.com/gpu": "4", "memory": "4Gi"}},
                    {"name": "b"},
                ],
            },
        ]
    )
    report = pod_allocation_report(obj, numatopology_to_topology(obj))
    first = report.for_pod("u-1", "default/whatever")
    assert first is not None and first.cpus() == IdSet.parse("1,5")
    train = report.for_pod("", "ml/train")
    assert train is not None and train.cpus() == IdSet.parse("3") and train.devices("nvidia.com/gpu") == frozenset()
    assert report.accounts_for("u-1", "x/y") and report.accounts_for("other", "ml/train")
    assert not report.accounts_for("u-2", "ml/other")
    assert set(report.allocations) == {"u-1", "ml/train"}


def test_our_pod_allocations_annotation_adds_device_ids_and_merges_with_the_list() -> None:
    obj = with_gpus(
        volcano_object(
            podAllocations=[
                {
                    "uid": "u-9",
                    "name": "p",
                    "namespace": "ns",
                    "containerAllocations": [{"name": "main", "allocations": {"cpu": "2"}}],
                }
            ]
        ),
        "0-2,7",
    )
    obj["metadata"]["annotations"][POD_ALLOCATIONS_ANNOTATION] = json.dumps(
        {
            "ns/p": {"uid": "u-9", "containers": {"main": {"cpuset": "6", "devices": {"nvidia.com/gpu": ["3"]}}}},
            "ns/q": {"containers": {"side": {"devices": {"nvidia.com/gpu": ["4", "5", "6"]}}}},
        }
    )
    report = pod_allocation_report(obj, numatopology_to_topology(obj))
    p = report.for_pod("u-9", "ns/p")
    # Either report's ids are held: the cpusets are united.
    assert p is not None and p.cpus() == IdSet.parse("2,6") and p.devices("nvidia.com/gpu") == frozenset({"3"})
    assert report.for_pod("u-9", "") == p
    q = report.for_pod("", "ns/q")
    assert q is not None and q.devices("nvidia.com/gpu") == frozenset({"4", "5", "6"})
    assert report.accounts_for("", "ns/q") and report.accounts_for("u-9", "")


def test_the_legacy_map_form_is_read_with_a_warning() -> None:
    obj = volcano_object(podAllocations={"ns/p": {"uid": "u-1", "containers": {"main": {"cpuset": "1"}}}})
    warnings: list[str] = []
    report = pod_allocation_report(obj, on_warning=warnings.append)
    held = report.for_pod("u-1", "ns/p")
    assert held is not None and held.cpus() == IdSet.parse("1")
    assert len(warnings) == 1 and "list" in warnings[0]


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda o: o["spec"]["numares"]["cpu"].update(allocatable="0-8"), r"spec.numares\['cpu'\].allocatable: CPUs 8"),
        (lambda o: o["spec"]["numares"]["cpu"].update(allocatable="x"), r"spec.numares\['cpu'\].allocatable"),
        (lambda o: o["spec"]["numares"]["cpu"].update(capacity=9), r"spec.numares\['cpu'\].capacity"),
        (lambda o: o["spec"]["numares"]["cpu"].update(capacity="8"), r"spec.numares\['cpu'\].capacity"),
        (lambda o: o["spec"]["numares"].update(cpu=[]), r"spec.numares\['cpu'\]: expected an object"),
        (lambda o: o["spec"].update(numares="0-7"), "spec.numares: expected an object"),
        (lambda o: o["spec"]["cpuDetail"].update({"²": {}}), r"spec.cpuDetail: key '²' is not a decimal id"),
        (lambda o: o["spec"]["cpuDetail"].update({"٣": {}}), "is not a decimal id"),
        (lambda o: o["spec"]["cpuDetail"].update({"3_0": {}}), "is not a decimal id"),
        (lambda o: o["spec"]["cpuDetail"].update({"07": {"core": 1}}), r"spec.cpuDetail\[07\]: CPU 7 is listed twice"),
        (lambda o: o["spec"]["cpuDetail"].update({"8192": {}}), "id 8192 is too large"),
        (lambda o: o["spec"]["cpuDetail"]["0"].update(numa=64), r"spec.cpuDetail\[0\].numa: 64 is too large"),
        (lambda o: o["spec"]["cpuDetail"]["0"].update(numa=-1), r"spec.cpuDetail\[0\].numa: negative"),
        (lambda o: o["spec"]["cpuDetail"]["0"].update(core=True), r"spec.cpuDetail\[0\].core: expected an integer"),
        (lambda o: o["spec"]["cpuDetail"]["0"].update(socket=1.0), r"spec.cpuDetail\[0\].socket: expected an integer"),
        (lambda o: o["spec"].update(cpuDetail={}), "spec.cpuDetail is missing or empty"),
        (lambda o: o["spec"]["policies"].update(TopologyManagerPolicy="strict"), "spec.policies.TopologyManagerPolicy"),
        (lambda o: o["spec"]["policies"].update(CPUManagerPolicy=3), "spec.policies.CPUManagerPolicy"),
        (lambda o: o["spec"]["policies"].update(ReservedSystemCPUs="0-9"), "spec.policies.ReservedSystemCPUs"),
        (lambda o: o["spec"].update(resReserved={"cpu": "lots"}), "spec.resReserved.cpu"),
        (lambda o: o["spec"].update(resReserved={"cpu": "9"}), "spec.resReserved.cpu: 9 CPUs reserved"),
        (lambda o: o["spec"].update(resReserved={"cpu": "-1"}), "spec.resReserved.cpu: negative"),
        (lambda o: o["spec"].update(resReserved={"cpu": "1e999999999"}), "spec.resReserved.cpu"),
        (lambda o: o["spec"].update(resReserved={"cpu": 2}), r"spec.resReserved\['cpu'\]: expected a string"),
        (lambda o: o["spec"].update(numaDistances={"0": {"5": 10}}), r"spec.numaDistances\[0\]\[5\]: unknown"),
        (lambda o: o["spec"].update(gpuDetail={"0": {"numa": 99}}), r"spec.gpuDetail\['0'\].numa"),
        (lambda o: o["metadata"].update(annotations=["x"]), "metadata.annotations: expected an object"),
        (lambda o: o.update(spec=[]), "spec is missing"),
    ],
)
def test_bad_numatopologies_are_refused_naming_the_field(mutate: Any, field: str) -> None:
    obj = volcano_object()
    mutate(obj)
    with pytest.raises(ConversionError, match=field) as caught:
        numatopology_to_topology(obj)
    assert caught.value.kind == "Numatopology" and caught.value.name == "n1"


@pytest.mark.parametrize(
    ("free", "field"),
    [
        ("0-8", "'8' is not a device of this node"),
        ("9", "'9' is not a device of this node"),
        ("0,,1", "has an empty element"),
        ("3-1", "bad range"),
    ],
)
def test_free_device_ids_the_node_does_not_have_are_refused(free: str, field: str) -> None:
    with pytest.raises(ConversionError, match=field):
        numatopology_to_topology(with_gpus(volcano_object(), free))


@pytest.mark.parametrize(
    ("allocations", "annotation", "field"),
    [
        ([{"uid": "u", "containerAllocations": [{"name": "a", "allocations": {"cpu": "9"}}]}], None, "CPUs 9"),
        ([{"uid": "u", "containerAllocations": [{"name": "a", "allocations": {"cpu": 3}}]}], None, "cpuset string"),
        ([{"uid": "u", "containerAllocations": [{"allocations": {"nvidia.com/gpu": "x"}}]}], None, "invalid quantity"),
        ([{"uid": 7}], None, r"spec.podAllocations\[0\].uid: expected a string"),
        ([{"containerAllocations": {}}], None, r"spec.podAllocations\[0\].containerAllocations: expected a list"),
        ("pods", None, "spec.podAllocations: expected a list"),
        (None, "{", "not JSON"),
        (None, "[" * 100000 + "]" * 100000, "not JSON"),
        (None, "1" * 5000, "not JSON"),
        (None, "[]", "expected a JSON object"),
        (None, '{"ns/p": {"containers": {"a": {"cpuset": "9"}}}}', "CPUs 9 are not on this node"),
        (None, '{"ns/p": {"containers": {"a": {"devices": {"nvidia.com/gpu": ["8"]}}}}}', "nvidia.com/gpu 8"),
        (None, '{"ns/p": {"containers": {"a": {"numa": [1e400]}}}}', "numa must be a list"),
    ],
)
def test_bad_pod_allocations_are_refused_naming_the_field(allocations: Any, annotation: str | None, field: str) -> None:
    obj = with_gpus(volcano_object(), "0-7")
    if allocations is not None:
        obj["spec"]["podAllocations"] = allocations
    if annotation is not None:
        obj["metadata"]["annotations"][POD_ALLOCATIONS_ANNOTATION] = annotation
    with pytest.raises(ConversionError, match=field):
        pod_allocation_report(obj, numatopology_to_topology(copy.deepcopy(obj)))


@pytest.mark.parametrize(
    "mutate",
    [
        lambda o: o["spec"]["cpuDetail"].update({"1099511627776": {}}),
        lambda o: o["spec"]["cpuDetail"].update({"9" * 5000: {}}),
        lambda o: o["spec"]["numares"]["cpu"].update(allocatable="0-1099511627776"),
        lambda o: o["spec"]["numares"]["cpu"].update(allocatable="4294967296"),
        lambda o: o["spec"]["numares"].update({"nvidia.com/gpu": {"allocatable": "0-1099511627776"}}),
        lambda o: o["spec"]["numares"].update({"nvidia.com/gpu": {"capacity": 1 << 40}}),
        lambda o: o["spec"]["policies"].update(ReservedSystemCPUs="0-1099511627776"),
        lambda o: o["spec"].update(resReserved={"cpu": "1e400"}),
        lambda o: o["spec"].update(resReserved={"cpu": "9" * 5000}),
        lambda o: o["spec"].update(
            podAllocations=[{"uid": "u", "containerAllocations": [{"allocations": {"cpu": "0-1099511627776"}}]}]
        ),
    ],
)
def test_huge_ids_are_refused_quickly(mutate: Any) -> None:
    obj = volcano_object()
    mutate(obj)
    started = time.perf_counter()
    with pytest.raises(ConversionError):
        numatopology_to_topology(obj)
        pod_allocation_report(obj)
    assert time.perf_counter() - started < 0.5


def test_numa_detail_annotation_adds_distances_l3_groups_and_memory_or_is_only_warned_about() -> None:
    obj = volcano_object()
    obj["metadata"]["annotations"][NUMA_DETAIL_ANNOTATION] = format_numa_detail(
        {0: {0: 10, 1: 32}, 1: {0: 32, 1: 10}},
        {"memory": {0: 64 << 30, 1: 64 << 30}},
        {"memory": {0: 60 << 30, 1: 62 << 30}},
        {0: IdSet.parse("0,4"), 1: IdSet.parse("1,5"), 2: IdSet.parse("2-3,6-7")},
    )
    topology = numatopology_to_topology(obj)
    assert topology.distance(0, 1) == 32
    assert topology.memory == {"memory": {0: 60 << 30, 1: 62 << 30}}
    assert [topology.cpu_info[cpu].l3 for cpu in range(8)] == [0, 1, 2, 2, 0, 1, 2, 2]
    obj["metadata"]["annotations"][NUMA_DETAIL_ANNOTATION] = '{"version": 1, "distances": {"0": {"7": 10}}}'
    warnings: list[str] = []
    topology = numatopology_to_topology(obj, on_warning=warnings.append)
    assert topology.distances == {} and len(warnings) == 1 and NUMA_DETAIL_ANNOTATION in warnings[0]


def test_one_pod_listed_by_uid_and_by_name_holds_what_both_entries_say() -> None:
    # Volcano's exporter: the checkpoint gives the uid, PodResources the name; our annotation links them.
    obj = with_gpus(
        volcano_object(
            podAllocations=[
                {"uid": "u-1", "containerAllocations": [{"name": "main", "allocations": {"cpu": "1"}}]},
                {
                    "name": "p",
                    "namespace": "ns",
                    "containerAllocations": [{"name": "main", "allocations": {"cpu": "5"}}],
                },
            ]
        ),
        "0-7",
    )
    unlinked = pod_allocation_report(obj)
    held = unlinked.for_pod("u-1", "ns/p")
    assert held is not None and held.cpus() == IdSet.parse("1,5")
    obj["metadata"]["annotations"][POD_ALLOCATIONS_ANNOTATION] = json.dumps(
        {
            "ns/p": {
                "uid": "u-1",
                "containers": {"main": {"devices": {"nvidia.com/gpu": ["2"]}, "memory": {"memory": {"0": 5}}}},
            },
        }
    )
    linked = pod_allocation_report(obj)
    for uid, key in (("u-1", ""), ("", "ns/p"), ("u-1", "ns/p")):
        pod = linked.for_pod(uid, key)
        assert pod is not None and pod.cpus() == IdSet.parse("1,5") and pod.devices("nvidia.com/gpu") == {"2"}


def test_merged_reports_keep_the_larger_claim() -> None:
    first = PodAllocation(
        (ContainerAllocation("a", IdSet.parse("1"), NumaMask.of(0), {"g": ("1",)}, {"memory": {0: 5}}),)
    )
    second = PodAllocation(
        (
            ContainerAllocation("a", IdSet.parse("2"), NumaMask.of(1), {"g": ("1", "2")}, {"memory": {0: 3, 1: 4}}),
            ContainerAllocation("b", IdSet.parse("3")),
        )
    )
    merged = merge_pod_allocations(first, second)
    assert [c.name for c in merged.containers] == ["a", "b"]
    a = merged.containers[0]
    assert a.cpuset == IdSet.parse("1-2") and a.numa == NumaMask.of(0, 1)
    assert a.devices == {"g": ("1", "2")} and a.memory == {"memory": {0: 5, 1: 4}}
