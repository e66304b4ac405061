from fractions import Fraction

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from numasched.api.allocation import (
    AllocationError,
    ContainerAllocation,
    PodAllocation,
    allocation_from_json,
    allocation_to_json,
)
from numasched.api.idset import IdSet, IdSetError
from numasched.api.numamask import NumaMask, NumaMaskError, iterate_masks
from numasched.api.quantity import QuantityError, parse_integer, parse_milli, parse_quantity
from numasched.api.resource import Resource


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("500m", Fraction(1, 2)),
        ("2", Fraction(2)),
        ("2Gi", Fraction(2 * 2**30)),
        ("1e3", Fraction(1000)),
        ("1E-2", Fraction(1, 100)),
        ("1.5k", Fraction(1500)),
        ("0.1", Fraction(1, 10)),
        ("100Mi", Fraction(100 * 2**20)),
        ("-1", Fraction(-1)),
        (".5", Fraction(1, 2)),
        ("3n", Fraction(3, 10**9)),
        (4, Fraction(4)),
    ],
)
def test_quantities_parse_exactly(text: str | int, expected: Fraction) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize("text", ["", "1.2.3", "2GB", "abc", "1 Gi", "Gi", "1e", "--1", "1Ki5"])
def test_bad_quantities_raise_a_clear_error(text: str) -> None:
    with pytest.raises(QuantityError, match="invalid quantity"):
        parse_quantity(text)


def test_milli_and_integer_round_up() -> None:
    assert parse_milli("0.0001") == 1
    assert parse_milli("250m") == 250
    assert parse_integer("1.5") == 2
    assert parse_integer("1Ki") == 1024


def test_resource_from_list_and_fit() -> None:
    request = Resource.from_list({"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": 2})
    assert request.milli_cpu == 2000
    assert request.memory == 2**30
    assert request.scalars == {"nvidia.com/gpu": 2000}
    node = Resource.from_list({"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": 1})
    assert request.insufficient(node) == ["nvidia.com/gpu"]
    node.scalars["nvidia.com/gpu"] = 2000
    assert request.fits_in(node)
    with pytest.raises(QuantityError, match="resource cpu"):
        Resource.from_list({"cpu": "two"})


@given(st.sets(st.integers(0, 300)), st.sets(st.integers(0, 300)))
def test_idset_count_common_is_the_size_of_the_intersection(first: set[int], second: set[int]) -> None:
    assert IdSet(first).count_common(IdSet(second)) == len(first & second)
    assert IdSet(second).count_common(IdSet(first)) == len(first & second)


def test_idset_list_format_round_trip() -> None:
    cpus = IdSet.parse("0-3,8,10-11")
    assert cpus.sorted() == [0, 1, 2, 3, 8, 10, 11]
    assert cpus.format() == "0-3,8,10-11"
    assert (cpus - IdSet.parse("1-2")).format() == "0,3,8,10-11"
    assert (cpus & IdSet.parse("3-9")).format() == "3,8"
    assert (IdSet.parse("0-1") | IdSet.parse("64")).format() == "0-1,64"
    assert IdSet.parse("") == IdSet()
    assert IdSet.parse("0-3") - IdSet.parse("0-3") == IdSet()
    assert hash(IdSet.parse("1,2")) == hash(IdSet([2, 1]))


@pytest.mark.parametrize("text", ["1-", "a", "3-1", "0,,1", "-1"])
def test_idset_rejects_bad_lists(text: str) -> None:
    with pytest.raises(IdSetError):
        IdSet.parse(text)


@given(st.sets(st.integers(min_value=0, max_value=300)), st.sets(st.integers(min_value=0, max_value=300)))
def test_idset_behaves_like_a_set(first: set[int], second: set[int]) -> None:
    a, b = IdSet(first), IdSet(second)
    assert set(a | b) == first | second
    assert set(a & b) == first & second
    assert set(a - b) == first - second
    assert a.is_subset(b) == (first <= second) and b.is_subset(a) == (second <= first)
    assert len(a) == len(first)
    assert IdSet.parse(a.format()) == a
    assert (a == b) == (first == second)
    # Results equal (and hash like) the set built from scratch: no trailing bits survive an
    # operation, whichever operand is longer or empty, and chained results stay exact.
    for result, expected in (
        (a | b, first | second),
        (b | a, first | second),
        (a & b, first & second),
        (a - b, first - second),
        (b - a, second - first),
        ((a | b) - b, first - second),
        ((a - b) | (a & b), first),
    ):
        assert result == IdSet(expected) and hash(result) == hash(IdSet(expected))
        assert result.format() == IdSet(expected).format()


def test_numa_mask_narrower_follows_the_kubelet() -> None:
    assert NumaMask.of(1).is_narrower_than(NumaMask.of(0, 1))
    assert NumaMask.of(0).is_narrower_than(NumaMask.of(1))
    assert not NumaMask.of(1).is_narrower_than(NumaMask.of(0))
    assert NumaMask.of(0, 1).is_narrower_than(NumaMask.of(0, 2))
    assert [m.ids() for m in iterate_masks([0, 1, 2])] == [[0], [1], [2], [0, 1], [0, 2], [1, 2], [0, 1, 2]]
    with pytest.raises(NumaMaskError):
        NumaMask.of(64)
    assert not NumaMask.of(0).is_set(-1) and NumaMask.of(0).is_set(0)


def test_allocation_annotation_round_trip() -> None:
    allocation = PodAllocation(
        (
            ContainerAllocation(
                "train",
                IdSet.parse("0-3"),
                NumaMask.of(0),
                {"nvidia.com/gpu": ("0", "1")},
                {"memory": {0: 1024}},
            ),
            ContainerAllocation("sidecar"),
        )
    )
    assert allocation_from_json(allocation_to_json(allocation)) == allocation
    assert allocation.cpus().format() == "0-3"
    assert allocation.devices("nvidia.com/gpu") == frozenset({"0", "1"})


_container_allocations = st.builds(
    ContainerAllocation,
    name=st.just(""),
    cpuset=st.frozensets(st.integers(0, 255), max_size=12).map(IdSet),
    numa=st.none() | st.frozensets(st.integers(0, 7), max_size=3).map(NumaMask.from_ids),
    devices=st.dictionaries(
        st.sampled_from(["nvidia.com/gpu", "rdma/hca"]),
        st.lists(st.text("abc-0123", min_size=1), max_size=4).map(tuple),
    ),
    memory=st.dictionaries(
        st.sampled_from(["memory", "hugepages-1Gi"]), st.dictionaries(st.integers(0, 7), st.integers(0, 1 << 40))
    ),
)


@given(st.lists(_container_allocations, max_size=4))
def test_every_allocation_reads_back_from_its_annotation_text(containers: list[ContainerAllocation]) -> None:
    # The cache keeps the allocation a binding's text was written from instead of reading the text
    # again (Cache._bound_allocation): that is exact only while every allocation reads back equal.
    allocation = PodAllocation(tuple(attrs.evolve(c, name=f"c{i}") for i, c in enumerate(containers)))
    assert allocation_from_json(allocation.json_text) == allocation
    assert allocation.json_text == allocation_to_json(allocation)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ("[]", "expected"),
        ('{"containers": {"a": {"cpuset": "x"}}}', "container a"),
        ('{"containers": {"a": {"numa": [99]}}}', "container a"),
    ],
)
def test_bad_allocation_annotations_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(AllocationError, match=message):
        allocation_from_json(text)
