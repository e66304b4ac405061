"""Total conversion: any JSON value in any field the topology converters read either converts or
raises ConversionError (never ValueError, KeyError, TypeError, OverflowError, MemoryError, ...)."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numasched.api.allocation import POD_ALLOCATIONS_ANNOTATION
from numasched.api.device_topology import DEVICE_TOPOLOGY_ANNOTATION
from numasched.cache.convert_pod import ConversionError
from numasched.cache.convert_topology import (
    nrt_pod_allocation_report,
    nrt_to_topology,
    numatopology_to_topology,
    pod_allocation_report,
)

TRICKY_TEXT = [
    "²",
    "٣",
    "3_0",
    "0-1099511627776",
    "4294967296",
    "1e400",
    "1e999999999",
    "9" * 5000,
    "-1",
    "0-7",
    "0-2,7",
    "",
    ",",
    "node-1",
    "node-²",
    "single-numa-node",
    "SingleNUMANodePodLevel",
    "static",
    "prefer-closest-numa-nodes=yes",
    "max-allowable-numa-nodes=1",
    "[" * 50,
]
SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(1 << 70), max_value=1 << 70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(TRICKY_TEXT)
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=6) | st.sampled_from(TRICKY_TEXT), children, max_size=4)
    ),
    max_leaves=12,
)


# Each place gets scalars as often as nested values: most readers go wrong on a wrong scalar.
FIELD_VALUES = SCALARS | JSON_VALUES


# The objects fuzzed: a small version of each shape the readers take (the reader tests hold the
# full ones), every optional part present so that each field gets its turn.
GPU_ANNOTATION = json.dumps(
    {
        "version": 1,
        "devices": {"nvidia.com/gpu": [{"id": str(gpu), "numa": gpu // 4, "healthy": True} for gpu in range(8)]},
        "links": [{"a": ["nvidia.com/gpu", "0"], "b": ["nvidia.com/gpu", "1"], "nvlinks": 2, "pcie": "PIX"}],
        "partitions": {"nvidia.com/gpu": [["0", "1", "2", "3"], ["4", "5", "6", "7"]]},
    }
)


def numatopology_base() -> dict[str, Any]:
    """Volcano's shape (list podAllocations, free ids in numares) plus every field of ours."""
    return {
        "apiVersion": "nodeinfo.volcano.sh/v1alpha1",
        "kind": "Numatopology",
        "metadata": {
            "name": "n1",
            "annotations": {
                DEVICE_TOPOLOGY_ANNOTATION: GPU_ANNOTATION,
                POD_ALLOCATIONS_ANNOTATION: json.dumps(
                    {
                        "ns/q": {
                            "uid": "v",
                            "containers": {"b": {"cpuset": "2", "numa": [1], "devices": {"nvidia.com/gpu": ["4"]}}},
                        }
                    }
                ),
            },
        },
        "spec": {
            "policies": {
                "CPUManagerPolicy": "static",
                "TopologyManagerPolicy": "single-numa-node",
                "TopologyManagerPolicyOptions": "prefer-closest-numa-nodes=true",
            },
            "resReserved": {"cpu": "2"},
            "numares": {
                "cpu": {"allocatable": "0-7", "capacity": 8},
                "nvidia.com/gpu": {"allocatable": "0-2,7", "capacity": 8},
            },
            "cpuDetail": {str(cpu): {"numa": cpu // 4, "socket": cpu // 4, "core": cpu % 4} for cpu in range(8)},
            "podAllocations": [
                {
                    "uid": "u",
                    "name": "p",
                    "namespace": "ns",
                    "containerAllocations": [{"name": "a", "allocations": {"cpu": "1", "nvidia.com/gpu": "1"}}],
                }
            ],
            "gpuDetail": {"0": {"numa": 1}},
            "numaDistances": {"0": {"0": 10, "1": 21}, "1": {"0": 21, "1": 10}},
            "MemoryDetail": {"0": {"memoryMap": {"memory": {"allocatable": 1024}}}},
        },
    }


def nrt_base() -> dict[str, Any]:
    """NodeResourceTopology v1alpha2 with attributes, a non-NUMA zone, costs and every resource kind."""
    return {
        "apiVersion": "topology.node.k8s.io/v1alpha2",
        "kind": "NodeResourceTopology",
        "metadata": {"name": "n1"},
        "topologyPolicies": ["SingleNUMANodePodLevel"],
        "attributes": [
            {"name": "topologyManagerPolicy", "value": "single-numa-node"},
            {"name": "topologyManagerScope", "value": "pod"},
            {"name": "topologyManagerOptionPreferClosestNumaNodes", "value": "true"},
            {"name": "nodeTopologyPodsFingerprint", "value": "pfp0v001fe53c4dbd2c1a3"},
        ],
        "zones": [
            {"name": "socket-0", "type": "Socket"},
            *[
                {
                    "name": f"node-{numa}",
                    "type": "Node",
                    "costs": [{"name": "node-0", "value": 10 + 11 * numa}, {"name": "node-1", "value": 21 - 11 * numa}],
                    "resources": [
                        {"name": "cpu", "capacity": "24", "allocatable": "22", "available": "2"},
                        {"name": "memory", "capacity": "64Gi", "allocatable": "60Gi", "available": "10Gi"},
                        {"name": "hugepages-1Gi", "capacity": "8Gi", "allocatable": "8Gi", "available": "8Gi"},
                        {"name": "nvidia.com/gpu", "capacity": 4, "allocatable": 4, "available": 1},
                    ],
                }
                for numa in (0, 1)
            ],
        ],
    }


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in a JSON document: object members and list items, the root excluded."""
    if isinstance(value, dict):
        for key, child in value.items():
            yield (*prefix, key)
            yield from paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield (*prefix, index)
            yield from paths(child, (*prefix, index))


NUMATOPOLOGY_PATHS = sorted(paths(numatopology_base()), key=repr)
NRT_PATHS = sorted(paths(nrt_base()), key=repr)


def replaced(document: dict[str, Any], path: tuple[Any, ...], value: Any, as_key: bool) -> dict[str, Any]:
    """The document with the value at path replaced, or (as_key) an extra member beside it."""
    result = copy.deepcopy(document)
    parent: Any = result
    for step in path[:-1]:
        parent = parent[step]
    if as_key and isinstance(parent, dict):
        parent[value if isinstance(value, str) else json.dumps(value, default=str)] = copy.deepcopy(parent[path[-1]])
    else:
        parent[path[-1]] = value
    return result


def annotation_values() -> st.SearchStrategy[Any]:
    """Annotations are strings holding JSON: fuzz the JSON inside too."""
    return JSON_VALUES.map(lambda value: json.dumps(value, allow_nan=True)) | FIELD_VALUES


FUZZ_SETTINGS = settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ_SETTINGS
@given(path=st.sampled_from(NUMATOPOLOGY_PATHS), value=annotation_values(), as_key=st.booleans())
def test_any_json_in_any_numatopology_field_converts_or_is_a_conversion_error(
    path: tuple[Any, ...], value: Any, as_key: bool
) -> None:
    obj = replaced(numatopology_base(), path, value, as_key)
    try:
        topology = numatopology_to_topology(obj, on_warning=lambda message: None)
    except ConversionError:
        topology = None
    with contextlib.suppress(ConversionError):
        pod_allocation_report(obj, topology, on_warning=lambda message: None)


@FUZZ_SETTINGS
@given(path=st.sampled_from(NRT_PATHS), value=FIELD_VALUES, as_key=st.booleans())
def test_any_json_in_any_nrt_field_converts_or_is_a_conversion_error(
    path: tuple[Any, ...], value: Any, as_key: bool
) -> None:
    with contextlib.suppress(ConversionError):
        nrt_to_topology(replaced(nrt_base(), path, value, as_key))


@FUZZ_SETTINGS
@given(document=JSON_VALUES)
def test_any_json_as_a_whole_object_converts_or_is_a_conversion_error(document: Any) -> None:
    for convert in (numatopology_to_topology, nrt_to_topology, pod_allocation_report):
        with contextlib.suppress(ConversionError):
            convert(document if not isinstance(document, dict) else {**document, "metadata": {"name": "n"}})


def device_topology_base() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(GPU_ANNOTATION)
    return document


DEVICE_TOPOLOGY_PATHS = sorted(paths(device_topology_base()), key=repr)


@FUZZ_SETTINGS
@given(path=st.sampled_from(DEVICE_TOPOLOGY_PATHS), value=FIELD_VALUES, as_key=st.booleans())
def test_any_json_inside_the_device_topology_annotation_is_read_or_only_warned_about(
    path: tuple[Any, ...], value: Any, as_key: bool
) -> None:
    obj = numatopology_base()
    document = replaced(device_topology_base(), path, value, as_key)
    obj["metadata"]["annotations"][DEVICE_TOPOLOGY_ANNOTATION] = json.dumps(document, allow_nan=True)
    warnings: list[str] = []
    with contextlib.suppress(ConversionError):
        numatopology_to_topology(obj, on_warning=warnings.append)
    assert len(warnings) <= 1


KOORDLET_DOCUMENTS: dict[str, Any] = {
    "node.koordinator.sh/cpu-topology": {
        "detail": [{"id": cpu, "core": cpu % 2, "socket": cpu // 2, "node": cpu // 2} for cpu in range(4)]
    },
    "kubelet.koordinator.sh/cpu-manager-policy": {
        "policy": "static",
        "options": {"full-pcpus-only": "true"},
        "reservedCPUs": "0",
    },
    "node.koordinator.sh/cpu-shared-pools": [
        {"socket": 0, "node": 0, "cpuset": "0"},
        {"socket": 1, "node": 1, "cpuset": "2-3"},
    ],
    "node.koordinator.sh/pod-cpu-allocs": [
        {"namespace": "ns", "name": "p", "uid": "u", "cpuset": "1", "managedByKubelet": True}
    ],
}
KOORDLET_PATHS = sorted(paths(KOORDLET_DOCUMENTS), key=repr)


@FUZZ_SETTINGS
@given(path=st.sampled_from(KOORDLET_PATHS), value=FIELD_VALUES, as_key=st.booleans())
def test_any_json_inside_koordlet_annotations_is_read_or_only_warned_about(
    path: tuple[Any, ...], value: Any, as_key: bool
) -> None:
    documents = replaced(KOORDLET_DOCUMENTS, path, value, as_key)
    obj = nrt_base()
    obj["metadata"]["annotations"] = {key: json.dumps(document, allow_nan=True) for key, document in documents.items()}
    warnings: list[str] = []
    topology = nrt_to_topology(obj, on_warning=warnings.append)
    assert len(warnings) <= 1
    with contextlib.suppress(ConversionError):
        nrt_pod_allocation_report(obj, topology, on_warning=warnings.append)


POD_ALLOCATIONS_DOCUMENT: dict[str, Any] = {
    "ns/q": {
        "uid": "v",
        "containers": {
            "b": {"cpuset": "2", "numa": [1], "devices": {"nvidia.com/gpu": ["4"]}, "memory": {"memory": {"1": 1024}}}
        },
    }
}
POD_ALLOCATIONS_PATHS = sorted(paths(POD_ALLOCATIONS_DOCUMENT), key=repr)


@FUZZ_SETTINGS
@given(path=st.sampled_from(POD_ALLOCATIONS_PATHS), value=FIELD_VALUES, as_key=st.booleans())
def test_any_json_inside_the_pod_allocations_annotation_converts_or_is_a_conversion_error(
    path: tuple[Any, ...], value: Any, as_key: bool
) -> None:
    obj = numatopology_base()
    document = replaced(POD_ALLOCATIONS_DOCUMENT, path, value, as_key)
    obj["metadata"]["annotations"][POD_ALLOCATIONS_ANNOTATION] = json.dumps(document, allow_nan=True)
    topology = numatopology_to_topology(obj)
    with contextlib.suppress(ConversionError):
        pod_allocation_report(obj, topology)
