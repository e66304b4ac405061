"""PodDisruptionBudget objects (policy/v1) to DisruptionBudget.

Read as the API declares them: spec.selector (a LabelSelector), spec.minAvailable and
spec.maxUnavailable (an integer or a "N%" string), status.disruptionsAllowed (int32) and
status.disruptedPods (pod name -> time). A field that cannot be read is reported by name (the
caller names the budget) and the budget stays on the safe side: an unreadable selector protects
no pod (as Volcano, which skips such a budget), an unreadable minAvailable / maxUnavailable
without a status allows no disruption.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from numasched.api.disruption_budget import DisruptionBudget, IntOrPercent, LabelRequirement, SelectorOperator
from numasched.cache.convert_pod import ConversionError, metadata_of

KIND = "PodDisruptionBudget"
_INT32_MAX = 2**31 - 1
_PERCENT = re.compile(r"(0|[1-9][0-9]*)%")


def _int_or_percent(value: Any, field: str, problems: list[str]) -> IntOrPercent | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _INT32_MAX:
        return IntOrPercent(value)
    if isinstance(value, str):
        found = _PERCENT.fullmatch(value)
        if found is not None:
            return IntOrPercent(int(found.group(1)), percent=True)
        if value.isdigit():
            # intstr keeps a quoted number a string; the controller then fails to read it.
            problems.append(f"{field}: {value!r} is a string but not a percentage (write {value} unquoted)")
            return None
    problems.append(f"{field}: expected a non-negative integer or a percentage like '50%', got {value!r}")
    return None


def _requirement(raw: Any, field: str) -> LabelRequirement:
    """One matchExpressions entry, or ValueError naming what is wrong with it."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{field}: expected an object, got {type(raw).__name__}")
    key, operator, values = raw.get("key"), raw.get("operator"), raw.get("values")
    if not isinstance(key, str) or not key:
        raise ValueError(f"{field}.key: a label key is required")
    try:
        parsed = SelectorOperator(str(operator))
    except ValueError:
        known = ", ".join(op.value for op in SelectorOperator)
        raise ValueError(f"{field}.operator: expected one of {known}, got {operator!r}") from None
    if values is None:
        values = []
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{field}.values: expected a list of strings, got {values!r}")
    if parsed in (SelectorOperator.IN, SelectorOperator.NOT_IN) and not values:
        raise ValueError(f"{field}.values: {parsed.value} needs at least one value")
    if parsed in (SelectorOperator.EXISTS, SelectorOperator.DOES_NOT_EXIST) and values:
        raise ValueError(f"{field}.values: {parsed.value} takes no values")
    return LabelRequirement(key, parsed, frozenset(values))


# policy/v1: a null selector selects no pod, an empty one ({}) every pod of the namespace. A
# selector that cannot be read is taken as the empty one, and its budget allows no disruption, so
# no pod it may have meant is chosen as a victim (the Eviction API would refuse it anyway).
_UNREADABLE = "; the budget covers every pod of its namespace and allows no disruption"


def _selector(raw: Any, problems: list[str]) -> tuple[dict[str, str], tuple[LabelRequirement, ...], bool]:
    """(matchLabels, matchExpressions, selects anything); a problem ends with _UNREADABLE."""
    if raw is None:
        return {}, (), False
    if not isinstance(raw, Mapping):
        problems.append(f"spec.selector: expected an object, got {type(raw).__name__}{_UNREADABLE}")
        return {}, (), True
    labels_raw = raw.get("matchLabels") or {}
    expressions_raw = raw.get("matchExpressions") or []
    if not isinstance(labels_raw, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in labels_raw.items()
    ):
        problems.append(f"spec.selector.matchLabels: expected a map of strings{_UNREADABLE}")
        return {}, (), True
    if not isinstance(expressions_raw, list):
        problems.append(f"spec.selector.matchExpressions: expected a list{_UNREADABLE}")
        return {}, (), True
    try:
        expressions = tuple(
            _requirement(item, f"spec.selector.matchExpressions[{index}]") for index, item in enumerate(expressions_raw)
        )
    except ValueError as error:
        problems.append(f"{error}{_UNREADABLE}")
        return {}, (), True
    return dict(labels_raw), expressions, True


def pdb_from_object(obj: Mapping[str, Any]) -> tuple[DisruptionBudget, list[str]]:
    """The budget and one message per field that could not be used. Raises ConversionError only
    when the object has no name."""
    namespace, name, _ = metadata_of(obj, KIND)
    problems: list[str] = []
    raw_spec, raw_status = obj.get("spec"), obj.get("status")
    spec: Mapping[str, Any] = raw_spec if isinstance(raw_spec, Mapping) else {}
    status: Mapping[str, Any] = raw_status if isinstance(raw_status, Mapping) else {}
    match_labels, match_expressions, selects = _selector(spec.get("selector"), problems)
    selector_unreadable = bool(problems)
    before = len(problems)
    min_available = _int_or_percent(spec.get("minAvailable"), "spec.minAvailable", problems)
    max_unavailable = _int_or_percent(spec.get("maxUnavailable"), "spec.maxUnavailable", problems)
    if min_available is not None and max_unavailable is not None:
        problems.append("spec: minAvailable and maxUnavailable are both set (the API allows one); minAvailable is used")
        max_unavailable = None
    bounds_unreadable = len(problems) > before and min_available is None and max_unavailable is None
    allowed = status.get("disruptionsAllowed")
    if allowed is not None and (not isinstance(allowed, int) or isinstance(allowed, bool) or allowed < 0):
        problems.append(f"status.disruptionsAllowed: expected an integer of 0 or more, got {allowed!r}; computed")
        allowed = None
    if allowed is None and bounds_unreadable:
        problems[-1] += "; the budget allows no disruption"
        allowed = 0
    if selector_unreadable:
        allowed = 0
    disrupted = status.get("disruptedPods") or {}
    if not isinstance(disrupted, Mapping):
        problems.append(f"status.disruptedPods: expected a map of pod names, got {type(disrupted).__name__}; ignored")
        disrupted = {}
    budget = DisruptionBudget(
        namespace=namespace or "default",
        name=name,
        match_labels=match_labels,
        match_expressions=match_expressions,
        selects=selects,
        min_available=min_available,
        max_unavailable=max_unavailable,
        disruptions_allowed=allowed,
        disrupted_pods=frozenset(str(pod) for pod in disrupted),
    )
    return budget, problems


__all__ = ["KIND", "ConversionError", "pdb_from_object"]
