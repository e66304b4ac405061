"""Volcano Queue objects (scheduling.volcano.sh/v1beta1) to QueueInfo.

Every field the queue plugins read is taken as volcano-sh/apis declares it: spec.weight (int32),
spec.capability, spec.guarantee.resource and spec.deserved (ResourceLists), spec.parent,
spec.priority (int32), spec.reclaimable (bool), the annotations volcano.sh/hierarchy and
volcano.sh/hierarchy-weights (hierarchical DRF), status.state and status.allocated (what the
scheduler last wrote, so it writes only a change). A field that cannot be read is
reported by name and the queue keeps working with that field's default, so one typo in a quota
never stops the queue's jobs from being scheduled.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from numasched.api.quantity import QuantityError
from numasched.api.resource import Resource
from numasched.api.snapshot import QueueInfo
from numasched.cache.convert_pod import ConversionError, metadata_of

KIND = "Queue"
_INT32_MAX = 2**31 - 1
_INT32_MIN = -(2**31)
# Volcano's hierarchical DRF reads the queue tree from these (volcano-sh/apis scheduling/v1beta1).
HIERARCHY_ANNOTATION = "volcano.sh/hierarchy"
HIERARCHY_WEIGHTS_ANNOTATION = "volcano.sh/hierarchy-weights"
QUEUE_STATES = frozenset({"Open", "Closed", "Closing", "Unknown"})


def _mapping_field(value: Any, field: str, problems: list[str]) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        problems.append(f"{field}: expected an object, got {type(value).__name__}")
        return {}
    return value


def _int32_field(value: Any, field: str, default: int, low: int, problems: list[str]) -> int:
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= _INT32_MAX:
        problems.append(f"{field}: expected an integer from {low} to {_INT32_MAX}, got {value!r}; using {default}")
        return default
    return value


def _resource_field(value: Any, field: str, problems: list[str]) -> Resource | None:
    """None when absent; an unreadable list is reported and treated as absent."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.append(f"{field}: expected a resource list, got {type(value).__name__}; ignored")
        return None
    try:
        return Resource.from_list(value)
    except QuantityError as error:
        problems.append(f"{field}: {error}; ignored")
        return None


def queue_from_object(obj: Mapping[str, Any]) -> tuple[QueueInfo, list[str]]:
    """The queue and one message per field that could not be used (each names the field; the
    caller names the Queue). Raises ConversionError only when the object has no name."""
    _, name, metadata = metadata_of(obj, KIND)
    problems: list[str] = []
    spec = _mapping_field(obj.get("spec"), "spec", problems)
    status = _mapping_field(obj.get("status"), "status", problems)
    # Volcano's webhook defaults an absent weight to 1; 0 is a queue that deserves nothing.
    weight = _int32_field(spec.get("weight"), "spec.weight", 1, 0, problems)
    guarantee_spec = _mapping_field(spec.get("guarantee"), "spec.guarantee", problems)
    parent = spec.get("parent")
    if parent is not None and not isinstance(parent, str):
        problems.append(f"spec.parent: expected a queue name, got {parent!r}; ignored")
        parent = None
    reclaimable = spec.get("reclaimable")
    if reclaimable is not None and not isinstance(reclaimable, bool):
        problems.append(f"spec.reclaimable: expected true or false, got {reclaimable!r}; using true")
        reclaimable = None
    state = status.get("state")
    if state is None or state == "":
        state = "Open"
    elif not isinstance(state, str) or state not in QUEUE_STATES:
        problems.append(f"status.state: expected one of {', '.join(sorted(QUEUE_STATES))}, got {state!r}; using Open")
        state = "Open"
    annotations = _mapping_field(metadata.get("annotations"), "metadata.annotations", problems)
    hierarchy, weights = annotations.get(HIERARCHY_ANNOTATION), annotations.get(HIERARCHY_WEIGHTS_ANNOTATION)
    for key, value in ((HIERARCHY_ANNOTATION, hierarchy), (HIERARCHY_WEIGHTS_ANNOTATION, weights)):
        if value is not None and not isinstance(value, str):
            problems.append(f"metadata.annotations[{key}]: expected a string, got {value!r}; ignored")
    hierarchy = hierarchy if isinstance(hierarchy, str) else None
    weights = weights if isinstance(weights, str) else None
    queue = QueueInfo(
        name=name,
        hierarchy=hierarchy or "",
        hierarchy_weights=weights or "",
        weight=weight,
        state=state,
        capability=_resource_field(spec.get("capability"), "spec.capability", problems),
        guarantee=_resource_field(guarantee_spec.get("resource"), "spec.guarantee.resource", problems),
        deserved=_resource_field(spec.get("deserved"), "spec.deserved", problems),
        parent=parent or "",
        priority=_int32_field(spec.get("priority"), "spec.priority", 0, _INT32_MIN, problems),
        reclaimable=reclaimable is not False,
        status_allocated=_resource_field(status.get("allocated"), "status.allocated", problems),
    )
    return queue, problems


__all__ = ["KIND", "ConversionError", "queue_from_object"]
