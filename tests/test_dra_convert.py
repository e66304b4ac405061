"""resource.k8s.io/v1 objects -> api/dra.py: the values read, the problems named, no crash."""

from __future__ import annotations

import copy
from fractions import Fraction
from typing import Any

import yaml
from conftest import FIXTURES, load_hack_module, load_machine
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from numasched.api.dra import (
    AllocationMode,
    ClaimAllocation,
    DeviceClassInfo,
    DeviceResult,
    DraProblem,
    SemVer,
)
from numasched.cache.convert_dra import (
    allocation_status,
    claim_is_usable,
    convert_claim_template,
    convert_device_class,
    convert_resource_claim,
    convert_resource_slice,
)
from numasched.plugins.dra.allocator import (
    AllocatorOptions,
    ClaimsDoNotFit,
    DevicesInUse,
    NodeDevices,
    PodClaimsAllocation,
    allocate_claims,
    claim_hints,
    slice_applies_to,
)
from numasched.plugins.dra.cel import CelEvaluator

SLICE = next(
    d for d in yaml.safe_load_all((FIXTURES / "dra" / "hgx-h100-numa.yaml").read_text()) if d["kind"] == "ResourceSlice"
)

CLAIM: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"namespace": "ml", "name": "train", "uid": "u-1"},
    "spec": {
        "devices": {
            "requests": [
                {"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 4}},
                {
                    "name": "nic",
                    "firstAvailable": [
                        {"name": "rdma", "deviceClassName": "rdma-nic", "selectors": [{"cel": {"expression": "true"}}]},
                        {"name": "any", "deviceClassName": "nic", "allocationMode": "All"},
                    ],
                },
            ],
            "constraints": [{"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/numaNode"}],
        }
    },
    "status": {
        "allocation": {
            "devices": {
                "results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "hgx-0", "device": "gpu-0"}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["hgx-0"]}]}
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-uid"}],
    },
}


def fields(problems: list[DraProblem]) -> list[str]:
    return [problem.field for problem in problems]


def test_slice_from_the_fixture() -> None:
    info, problems = convert_resource_slice(SLICE)
    assert problems == []
    assert info is not None and info.driver == "gpu.nvidia.com" and info.pool == "hgx-0" and info.node_name == "hgx-0"
    first = info.devices[0]
    assert first.name == "gpu-0" and first.id == ("gpu.nvidia.com", "hgx-0", "gpu-0")
    # Short names are qualified with the driver's domain; standard ones keep theirs.
    assert first.attributes["gpu.nvidia.com/type"] == "gpu"
    assert first.attributes["resource.kubernetes.io/numaNode"] == 0
    assert first.attributes["gpu.nvidia.com/driverVersion"] == SemVer(560, 35, 3, (), "560.35.3")
    assert first.capacity == {"gpu.nvidia.com/memory": Fraction(80 * 2**30)}
    assert first.attribute("productName") == "NVIDIA H100 80GB HBM3"


def test_bad_device_is_left_out_and_named() -> None:
    broken = copy.deepcopy(SLICE)
    broken["spec"]["devices"][3]["attributes"]["index"] = {"int": 1, "string": "1"}
    broken["spec"]["devices"][5]["capacity"]["memory"] = {"value": "lots"}
    broken["spec"]["devices"][6]["bindsToNode"] = True
    info, problems = convert_resource_slice(broken)
    assert info is not None
    assert [d.name for d in info.devices] == ["gpu-0", "gpu-1", "gpu-2", "gpu-4", "gpu-7"]
    assert fields(problems) == [
        "spec.devices[3].attributes['index']",
        "spec.devices[5].capacity['memory'].value",
        "spec.devices[6].bindsToNode",
    ]
    assert (
        problems[0].describe().startswith("ResourceSlice hgx-0-gpu-nvidia-com: spec.devices[3].attributes['index']: ")
    )


def test_slice_wide_problems() -> None:
    no_node = copy.deepcopy(SLICE)
    del no_node["spec"]["nodeName"]
    info, problems = convert_resource_slice(no_node)
    assert info is None and fields(problems) == ["spec"]
    per_device = copy.deepcopy(SLICE)
    per_device["spec"]["perDeviceNodeSelection"] = True
    del per_device["spec"]["nodeName"]
    info, problems = convert_resource_slice(per_device)
    assert info is None and fields(problems) == ["spec.perDeviceNodeSelection"]
    counters = copy.deepcopy(SLICE)
    counters["spec"]["sharedCounters"] = [{"name": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}]
    counters["spec"]["devices"][0]["consumesCounters"] = [
        {"counterSet": "gpu-0", "counters": {"memory": {"value": "80Gi"}}}
    ]
    counters["spec"]["devices"][1]["consumesCounters"] = [{"counterSet": "gpu-9", "counters": {}}]
    info, problems = convert_resource_slice(counters)
    assert info is not None and info.shared_counters == {"gpu-0": {"memory": Fraction(80 * 2**30)}}
    assert info.devices[0].consumes_counters[0].counters == {"memory": Fraction(80 * 2**30)}
    assert "gpu-1" not in [d.name for d in info.devices]
    assert fields(problems) == ["spec.devices[1].consumesCounters"]


def test_slice_node_selection() -> None:
    shared = copy.deepcopy(SLICE)
    del shared["spec"]["nodeName"]
    shared["spec"]["nodeSelector"] = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1", "r2"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["edge-0"]}]},
        ]
    }
    info, problems = convert_resource_slice(shared)
    assert problems == [] and info is not None and info.node_selector is not None
    assert slice_applies_to(info, "hgx-0", {"rack": "r2"})
    assert not slice_applies_to(info, "hgx-0", {"rack": "r3"})
    assert slice_applies_to(info, "edge-0", {})
    own, _ = convert_resource_slice(SLICE)
    assert own is not None and slice_applies_to(own, "hgx-0", {}) and not slice_applies_to(own, "hgx-1", {})
    shared["spec"]["nodeSelector"]["nodeSelectorTerms"][0]["matchExpressions"][0]["operator"] = "Near"
    info, problems = convert_resource_slice(shared)
    assert info is None
    assert fields(problems) == ["spec.nodeSelector.nodeSelectorTerms[0].matchExpressions[0].operator"]


def test_device_class() -> None:
    good: dict[str, Any] = {
        "kind": "DeviceClass",
        "metadata": {"name": "gpu.nvidia.com"},
        "spec": {
            "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}],
            "extendedResourceName": "nvidia.com/gpu",
        },
    }
    info, problems = convert_device_class(good)
    assert problems == [] and info is not None
    assert info.selectors == ("device.driver == 'gpu.nvidia.com'",) and info.extended_resource_name == "nvidia.com/gpu"
    bad = copy.deepcopy(good)
    bad["spec"]["selectors"].append({"cel": {}})
    info, problems = convert_device_class(bad)
    assert info is None and fields(problems) == ["spec.selectors[1].cel.expression"]


def test_claim_spec_status_and_encoding() -> None:
    info, problems = convert_resource_claim(CLAIM)
    assert problems == [] and info is not None and claim_is_usable(problems)
    gpus, nic = info.spec.requests
    assert gpus.exactly is not None and gpus.exactly.count == 4
    assert [alt.name for alt in nic.alternatives()] == ["rdma", "any"]
    assert nic.alternatives()[1].allocation_mode is AllocationMode.ALL
    assert nic.result_name(nic.alternatives()[0]) == "nic/rdma"
    assert info.spec.constraints[0].match_attribute == "resource.kubernetes.io/numaNode"
    assert info.allocation == ClaimAllocation((DeviceResult("gpus", "gpu.nvidia.com", "hgx-0", "gpu-0"),), "hgx-0")
    assert info.reserved_for[0].uid == "pod-uid"
    status = allocation_status(info.allocation, "p", "pod-uid")
    assert status["allocation"] == CLAIM["status"]["allocation"]
    assert status["reservedFor"] == CLAIM["status"]["reservedFor"]


def test_unsupported_request_fields_are_reported() -> None:
    claim = copy.deepcopy(CLAIM)
    claim["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"memory": "10Gi"}}
    claim["spec"]["devices"]["constraints"].append({"matchAttribute": "numaNode"})
    info, problems = convert_resource_claim(claim)
    assert info is not None and not claim_is_usable(problems)
    assert fields(problems) == [
        "spec.devices.requests[0].exactly.capacity",
        "spec.devices.requests[0].exactly",
        "spec.devices.constraints[1].matchAttribute",
    ]
    assert [r.name for r in info.spec.requests] == ["nic"]


def test_unreadable_allocation_makes_the_claim_unusable() -> None:
    claim = copy.deepcopy(CLAIM)
    claim["status"]["allocation"]["devices"]["results"][0]["device"] = 7
    info, problems = convert_resource_claim(claim)
    assert info is not None and info.allocation is None
    assert fields(problems) == ["status.allocation.devices.results[0].device"]
    assert not claim_is_usable(problems)
    claim["status"]["allocation"] = CLAIM["status"]["allocation"]
    claim["status"]["reservedFor"] = [{"resource": "pods"}]
    info, problems = convert_resource_claim(claim)
    assert info is not None and info.reserved_for == () and claim_is_usable(problems)
    assert fields(problems) == ["status.reservedFor[0].name"]


def test_template() -> None:
    template: dict[str, Any] = {
        "kind": "ResourceClaimTemplate",
        "metadata": {"namespace": "ml", "name": "four-gpus"},
        "spec": {"spec": CLAIM["spec"]},
    }
    converted, problems = convert_claim_template(template)
    assert problems == [] and converted is not None
    namespace, name, spec = converted
    assert (namespace, name, len(spec.requests)) == ("ml", "four-gpus", 2)
    template["spec"]["spec"] = {"devices": {"requests": [{"name": "x"}]}}
    converted, problems = convert_claim_template(template)
    assert converted is None and fields(problems) == ["spec.spec.devices.requests[0]"]


# -- fuzz: any JSON-like value anywhere never raises out of a converter ---------------------------


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True)
    | st.text(max_size=12),
    _containers,
    max_leaves=12,
)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _replace(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copied = copy.deepcopy(document)
    target = copied
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return copied


# celpy raises the interpreter's recursion limit when its first environment is made: do that at
# import, not inside a hypothesis test (which warns about the change).
CelEvaluator()

CONVERTERS = [
    (convert_resource_slice, SLICE),
    (convert_resource_claim, CLAIM),
    (
        convert_claim_template,
        {"kind": "ResourceClaimTemplate", "metadata": {"namespace": "a", "name": "b"}, "spec": {"spec": CLAIM["spec"]}},
    ),
    (
        convert_device_class,
        {"kind": "DeviceClass", "metadata": {"name": "c"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}},
    ),
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(range(len(CONVERTERS))), st.data(), json_values)
def test_fuzz_never_raises(which: int, data: st.DataObject, value: Any) -> None:
    convert, document = CONVERTERS[which]
    path = data.draw(st.sampled_from(_paths(document)))
    mutated = _replace(document, path, value)
    result, problems = convert(mutated)
    assert isinstance(problems, list)
    for problem in problems:
        assert isinstance(problem, DraProblem) and problem.kind and problem.message
    if result is None:
        assert problems, "an object left out must say why"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), json_values)
def test_fuzzed_claims_allocate_or_say_why(data: st.DataObject, value: Any) -> None:
    """Whatever a claim says, once converted the allocator answers (a set or a reason), bounded."""
    path = data.draw(st.sampled_from(_paths(CLAIM["spec"], ("spec",))))
    mutated = _replace({**CLAIM, "status": {}}, path, value)
    info, problems = convert_resource_claim(mutated)
    if info is None or not claim_is_usable(problems):
        return
    slice_info, _ = convert_resource_slice(SLICE)
    assert slice_info is not None
    node = NodeDevices.from_slices("hgx-0", [slice_info])
    classes = {"gpu.nvidia.com": DeviceClassInfo("gpu.nvidia.com", ("device.driver == 'gpu.nvidia.com'",))}
    options = AllocatorOptions(max_steps=2_000)
    result = allocate_claims([info], node, DevicesInUse(), classes, CelEvaluator(), options=options)
    assert isinstance(result, (PodClaimsAllocation, ClaimsDoNotFit))
    hints = claim_hints([info], node, DevicesInUse(), classes, CelEvaluator(), options=options)
    assert hints is None or isinstance(hints, list)


def test_fixtures_are_what_the_generator_writes() -> None:
    """tests/fixtures/dra/*.yaml come from hack/dra_slices.py; regenerate them when it changes."""
    generator = load_hack_module("dra_slices")
    cases = [
        ("hgx-h100-numa.yaml", "hgx-h100", "hgx-0", True, True),
        ("hgx-h100.yaml", "hgx-h100", "hgx-0", False, False),
        ("pcie-8gpu-2numa-numa.yaml", "pcie-8gpu-2numa", "pcie-0", True, False),
        ("dgx-a100-numa.yaml", "dgx-a100", "dgx-0", True, False),
    ]
    for file_name, machine, node_name, numa_attribute, classes in cases:
        expected = generator.resource_slices(load_machine(machine), node_name, numa_attribute=numa_attribute)
        if classes:
            expected += generator.device_classes()
        assert list(yaml.safe_load_all((FIXTURES / "dra" / file_name).read_text())) == expected, file_name
