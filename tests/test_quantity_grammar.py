"""Quantities as apimachinery reads them (its own TestQuantityParse table, re-expressed as exact
values), our bounds where Go is looser than a scheduler can afford, and QoS classes as the kubelet's
ComputePodQOS gives them (cases from its rule: zero quantities ignored, init containers counted,
pod-level resources deciding when present)."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from numasched.api.quantity import MAX_INT64, QuantityError, parse_integer, parse_milli, parse_nanos, parse_quantity
from numasched.api.resource import Resource
from numasched.api.task import QosClass
from numasched.cache.convert_pod import ConversionError, pod_to_task


def dec(value: int, scale: int) -> Fraction:
    """apimachinery's decQuantity(value, scale): value * 10**scale."""
    return Fraction(value) * Fraction(10) ** scale


# k8s.io/apimachinery pkg/api/resource/quantity_test.go TestQuantityParse, the rows that fit int64.
GO_PARSE_TABLE = [
    ("0", dec(0, 0)),
    ("0n", dec(0, 0)),
    ("0u", dec(0, 0)),
    ("0m", dec(0, 0)),
    ("0Ki", dec(0, 0)),
    ("0k", dec(0, 0)),
    ("0Mi", dec(0, 0)),
    ("0M", dec(0, 0)),
    ("0Gi", dec(0, 0)),
    ("0G", dec(0, 0)),
    ("0Ti", dec(0, 0)),
    ("0T", dec(0, 0)),
    ("1", dec(1, 0)),
    ("1Ki", dec(1024, 0)),
    ("8Ki", dec(8 * 1024, 0)),
    ("7Mi", dec(7 * 1024**2, 0)),
    ("6Gi", dec(6 * 1024**3, 0)),
    ("5Ti", dec(5 * 1024**4, 0)),
    ("4Pi", dec(4 * 1024**5, 0)),
    ("3Ei", dec(3 * 1024**6, 0)),
    ("10Ti", dec(10 * 1024**4, 0)),
    ("100Ti", dec(100 * 1024**4, 0)),
    ("5n", dec(5, -9)),
    ("4u", dec(4, -6)),
    ("3m", dec(3, -3)),
    ("9", dec(9, 0)),
    ("8k", dec(8, 3)),
    ("50k", dec(5, 4)),
    ("7M", dec(7, 6)),
    ("6G", dec(6, 9)),
    ("5T", dec(5, 12)),
    ("40T", dec(4, 13)),
    ("300T", dec(3, 14)),
    ("2P", dec(2, 15)),
    ("1E", dec(1, 18)),
    ("1E-3", dec(1, -3)),
    ("1e3", dec(1, 3)),
    ("1E6", dec(1, 6)),
    ("1e9", dec(1, 9)),
    ("1E12", dec(1, 12)),
    ("1e15", dec(1, 15)),
    ("1E18", dec(1, 18)),
    ("1e14", dec(1, 14)),
    ("1e13", dec(1, 13)),
    ("100.035k", dec(100035, 0)),
    ("0.001", dec(1, -3)),
    ("0.0005k", dec(5, -1)),
    ("0.005", dec(5, -3)),
    ("0.05", dec(5, -2)),
    ("0.5", dec(5, -1)),
    ("0.00050k", dec(5, -1)),
    ("0.00500", dec(5, -3)),
    ("0.05000", dec(5, -2)),
    ("0.50000", dec(5, -1)),
    ("0.5e0", dec(5, -1)),
    ("0.5e-1", dec(5, -2)),
    ("0.5e-2", dec(5, -3)),
    ("10.035M", dec(10035, 3)),
    ("1.2e3", dec(12, 2)),
    ("1.3E+6", dec(13, 5)),
    ("1.40e9", dec(14, 8)),
    ("1.53E12", dec(153, 10)),
    ("1.6e15", dec(16, 14)),
    ("1.7E18", dec(17, 17)),
    ("9.01", dec(901, -2)),
    ("8.1k", dec(81, 2)),
    ("7.123456M", dec(7123456, 0)),
    ("6.987654321G", dec(6987654321, 0)),
    ("5.444T", dec(5444, 9)),
    ("40.1T", dec(401, 11)),
    ("300.2T", dec(3002, 11)),
    ("2.5P", dec(25, 14)),
    ("1.01E", dec(101, 16)),
    # Things that saturate/round: a non-zero remainder goes up to the next nano unit.
    ("3.001n", dec(4, -9)),
    ("1.1E-9", dec(2, -9)),
    ("0.0000000001", dec(1, -9)),
    ("0.0000000005", dec(1, -9)),
    ("0.00000000050", dec(1, -9)),
    ("0.5e-9", dec(1, -9)),
    ("0.9n", dec(1, -9)),
    ("0.00000012345", dec(124, -9)),
    ("0.00000012354", dec(124, -9)),
    ("12E", dec(12, 18)),
    ("100.035Ki", dec(10243584, -2)),
    ("0.5Mi", dec(524288, 0)),
    ("0.05Gi", dec(536870912, -1)),
    ("0.025Ti", dec(274877906944, -1)),
    ("0.000000000001Ki", dec(2, -9)),
    (".001", dec(1, -3)),
    (".0001k", dec(100, -3)),
    ("1.", dec(1, 0)),
    ("1.G", dec(1, 9)),
]
# The same test's invalid list; surrounding whitespace is left out because a quantity read from
# JSON is trimmed first (Quantity.UnmarshalJSON).
GO_INVALID = ["1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-"]


@pytest.mark.parametrize(("text", "expected"), GO_PARSE_TABLE)
def test_apimachinery_parse_table(text: str, expected: Fraction) -> None:
    assert parse_quantity(text) == expected
    assert parse_quantity("-" + text) == -expected
    assert parse_quantity("+" + text) == expected
    # Every quantity is a whole number of nano units, and parse_nanos gives it exactly.
    assert Fraction(parse_nanos(text), 10**9) == expected


@pytest.mark.parametrize("text", GO_INVALID)
def test_apimachinery_invalid_list(text: str) -> None:
    with pytest.raises(QuantityError, match="invalid quantity"):
        parse_quantity(text)


def test_json_reading_trims_whitespace_and_reads_numbers_by_their_text() -> None:
    assert parse_quantity(" 1 ") == 1
    assert parse_quantity(0.1) == Fraction(1, 10)
    assert parse_quantity(1e3) == 1000
    assert parse_quantity(2) == 2
    assert parse_milli(0.1) == 100


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("1e400", "beyond the largest quantity"),
        ("9" * 5000, "longer than 64 characters"),
        ("1e2147483648", "out of range"),
        ("1e99999999999999999999", "out of range"),
        (float("inf"), "not a finite number"),
        (float("nan"), "not a finite number"),
        (2**63, "beyond the largest quantity"),
        (True, "boolean"),
        ([1], "expected a string or number"),
        ({"cpu": 1}, "expected a string or number"),
        (None, "expected a string or number"),
        ("²", "expected a number"),
        ("\u0661", "expected a number"),  # an Arabic-Indic digit one: Go takes ASCII digits only
        ("", "empty"),
        ("Gi", "no digits"),
        ("1ki", "unknown suffix"),
        ("1K", "unknown suffix"),
        ("1e", "unknown suffix"),
    ],
    ids=lambda value: repr(value)[:20],
)
def test_beyond_the_grammar_or_the_bounds_is_refused(value: Any, reason: str) -> None:
    with pytest.raises(QuantityError, match=reason):
        parse_quantity(value)


def test_int64_bounds_in_the_unit_counted() -> None:
    assert parse_integer(str(MAX_INT64)) == MAX_INT64
    with pytest.raises(QuantityError, match="beyond the largest quantity"):
        parse_integer(str(MAX_INT64 + 1))
    # Go caps 9Ei at the int64 maximum without a word; a scheduler must not guess the request.
    with pytest.raises(QuantityError, match="beyond the largest quantity"):
        parse_integer("9Ei")
    # CPU is counted in thousandths: 9.3e15 cores is 9.3e18m, beyond int64.
    assert parse_milli("9e15") == 9 * 10**18
    with pytest.raises(QuantityError, match="beyond the largest quantity"):
        parse_milli("9.3e15")
    # Tiny values round up, never down to nothing.
    assert parse_milli("1e-400") == 1
    assert parse_integer("1n") == 1


@pytest.mark.parametrize("name", ["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage"])
def test_negative_quantities_are_refused_by_resource_lists(name: str) -> None:
    with pytest.raises(QuantityError, match=f"resource {name}: .*must not be negative"):
        Resource.from_list({name: "-2"})
    assert Resource.from_list({name: None}).is_empty()


# -- QoS ----------------------------------------------------------------------------------------


def pod_with(
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]] | None = None,
    pod_resources: dict[str, Any] | None = None,
    qos: str | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(containers)],
    }
    if init is not None:
        spec["initContainers"] = [{"name": f"i{i}", "resources": r} for i, r in enumerate(init)]
    if pod_resources is not None:
        spec["resources"] = pod_resources
    status = {"qosClass": qos} if qos else {}
    return {"metadata": {"name": "p", "namespace": "default"}, "spec": spec, "status": status}


def exact(cpu: str, memory: str) -> dict[str, Any]:
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"cpu": cpu, "memory": memory}}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(pod_with([{}]), QosClass.BEST_EFFORT, id="nothing"),
        pytest.param(pod_with([exact("1", "1Gi")]), QosClass.GUARANTEED, id="equal"),
        pytest.param(pod_with([exact("1", "0")]), QosClass.BURSTABLE, id="memory-zero"),
        pytest.param(pod_with([exact("0", "0")]), QosClass.BEST_EFFORT, id="all-zero"),
        pytest.param(pod_with([{"limits": {"cpu": "2", "memory": "1Gi"}}]), QosClass.GUARANTEED, id="limits-only"),
        pytest.param(
            pod_with([{"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "1Gi"}}]),
            QosClass.BURSTABLE,
            id="request-below-limit",
        ),
        pytest.param(pod_with([exact("1", "1Gi"), {}]), QosClass.BURSTABLE, id="second-container-unlimited"),
        pytest.param(pod_with([exact("1", "1Gi")], init=[{}]), QosClass.BURSTABLE, id="init-unlimited"),
        pytest.param(pod_with([exact("1", "1Gi")], init=[exact("2", "1Gi")]), QosClass.GUARANTEED, id="init-equal"),
        pytest.param(pod_with([{"requests": {"nvidia.com/gpu": "1"}}]), QosClass.BEST_EFFORT, id="gpu-only"),
        pytest.param(pod_with([{"requests": {"ephemeral-storage": "1Gi"}}]), QosClass.BEST_EFFORT, id="storage-only"),
        pytest.param(
            pod_with(
                [
                    {
                        "requests": {"cpu": "1", "memory": "1Gi", "hugepages-2Mi": "2Mi"},
                        "limits": exact("1", "1Gi")["limits"],
                    }
                ]
            ),
            QosClass.GUARANTEED,
            id="hugepages-ignored",
        ),
        pytest.param(
            pod_with([{}], pod_resources={"limits": {"cpu": "2", "memory": "1Gi"}}), QosClass.GUARANTEED, id="pod-level"
        ),
        pytest.param(
            pod_with([exact("1", "1Gi")], pod_resources={"requests": {"cpu": "1"}}),
            QosClass.BURSTABLE,
            id="pod-level-decides",
        ),
        pytest.param(pod_with([exact("1", "1Gi")], qos="BestEffort"), QosClass.BEST_EFFORT, id="status-first"),
        pytest.param(pod_with([exact("1", "1Gi")], qos="Platinum"), QosClass.GUARANTEED, id="status-unknown"),
    ],
)
def test_qos_as_the_kubelet_computes_it(pod: dict[str, Any], expected: QosClass) -> None:
    assert pod_to_task(pod).qos is expected


def test_pod_level_requests_replace_the_containers_sum() -> None:
    task = pod_to_task(
        pod_with([exact("1", "1Gi"), exact("1", "1Gi")], pod_resources={"limits": {"cpu": "3", "memory": "4Gi"}})
    )
    assert task.resreq.milli_cpu == 3000
    assert task.resreq.memory == 4 * 2**30


@pytest.mark.parametrize("cpu", ["1e400", "9" * 5000, "abc", "-2"])
def test_a_bad_request_names_the_pod_and_the_field(cpu: str) -> None:
    with pytest.raises(ConversionError) as raised:
        pod_to_task(pod_with([{"requests": {"cpu": cpu}}]))
    assert raised.value.kind == "Pod" and raised.value.name == "default/p"
    assert raised.value.message.startswith("spec.containers[0].resources.requests: resource cpu: invalid quantity")
    assert len(raised.value.message) < 300
