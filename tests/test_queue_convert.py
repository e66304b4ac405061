"""cache/convert_queue: Volcano Queue objects read field by field; a bad field is named and the
queue keeps working with that field's default."""

from __future__ import annotations

from typing import Any

import pytest

from numasched.api.resource import Resource
from numasched.cache.convert_pod import ConversionError
from numasched.cache.convert_queue import queue_from_object


def queue(spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": "q1"},
        "spec": spec or {},
        "status": status or {},
    }


def test_every_field_as_volcano_declares_it() -> None:
    info, problems = queue_from_object(
        queue(
            {
                "weight": 3,
                "capability": {"cpu": "8", "memory": "16Gi", "nvidia.com/gpu": 4},
                "guarantee": {"resource": {"cpu": "2"}},
                "deserved": {"cpu": "4"},
                "parent": "root",
                "priority": 10,
                "reclaimable": False,
            },
            {"state": "Closed"},
        )
    )
    assert problems == []
    assert (info.name, info.weight, info.state, info.parent, info.priority, info.reclaimable) == (
        "q1",
        3,
        "Closed",
        "root",
        10,
        False,
    )
    assert info.capability == Resource(8000, 16 * 2**30, {"nvidia.com/gpu": 4000})
    assert info.guarantee == Resource(2000, 0)
    assert info.deserved == Resource(4000, 0)


def test_absent_fields_take_volcano_defaults() -> None:
    info, problems = queue_from_object(queue())
    assert problems == []
    assert (info.weight, info.state, info.capability, info.guarantee, info.deserved, info.reclaimable) == (
        1,
        "Open",
        None,
        None,
        None,
        True,
    )


@pytest.mark.parametrize(
    ("spec", "status", "field"),
    [
        ({"weight": "heavy"}, {}, "spec.weight"),
        ({"weight": -1}, {}, "spec.weight"),
        ({"capability": {"cpu": "lots"}}, {}, "spec.capability"),
        ({"capability": ["cpu"]}, {}, "spec.capability"),
        ({"guarantee": {"resource": {"memory": "-1Gi"}}}, {}, "spec.guarantee.resource"),
        ({"deserved": {"nvidia.com/gpu": "x"}}, {}, "spec.deserved"),
        ({"priority": 1.5}, {}, "spec.priority"),
        ({"reclaimable": "no"}, {}, "spec.reclaimable"),
        ({"parent": 7}, {}, "spec.parent"),
        ({}, {"state": "Sleeping"}, "status.state"),
    ],
)
def test_a_bad_field_is_named_and_the_queue_still_works(
    spec: dict[str, Any], status: dict[str, Any], field: str
) -> None:
    info, problems = queue_from_object(queue(spec, status))
    assert len(problems) == 1 and problems[0].startswith(field + ":"), problems
    assert info.name == "q1" and info.state in ("Open", "Closed")
    assert info.weight >= 0


def test_a_queue_without_a_name_is_refused() -> None:
    with pytest.raises(ConversionError, match=r"metadata\.name"):
        queue_from_object({"kind": "Queue", "metadata": {}})
