"""PodDisruptionBudgets (policy/v1) as the disruption controller counts them, for plans that evict.

A budget covers the pods of its namespace its selector matches (an empty selector matches every
pod of the namespace, a missing one none). How many of them may be disrupted now:

- `status.disruptionsAllowed` when the object carries a status (the controller's own count, from a
  live cluster or a dump of one);
- else computed as the controller computes it (pkg/controller/disruption): `minAvailable` (an
  integer, or a percentage of the matched pods rounded up) gives the desired healthy count, or
  `maxUnavailable` (the same forms) gives matched minus that; allowed = healthy - desired, never
  below 0. Healthy here is a matched pod that runs (it holds a node), since readiness is not in
  the scheduler's view. The controller scales percentages by the owning controller's replicas;
  the matched pods stand in for that (the same number while nothing is being scaled).

A budget that cannot be read (a bad selector, a quantity that is neither an integer nor a
percentage) allows nothing: the pods it might cover stay where they are.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

_PERCENT = re.compile(r"^(\d+)%$")


@attrs.frozen(slots=True)
class Requirement:
    """One matchExpressions entry (In, NotIn, Exists, DoesNotExist)."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.operator == "In":
            return labels.get(self.key) in self.values
        if self.operator == "NotIn":
            return labels.get(self.key) not in self.values
        if self.operator == "Exists":
            return self.key in labels
        return self.key not in labels  # DoesNotExist


@attrs.frozen(slots=True)
class DisruptionBudget:
    namespace: str
    name: str
    # None: the selector is missing (matches nothing).
    match_labels: Mapping[str, str] | None
    expressions: tuple[Requirement, ...]
    # Disruptions allowed now when known from the object's status, else None.
    status_allowed: int | None
    min_available: str | None
    max_unavailable: str | None
    # Why the budget cannot be read ("" when it can): it then allows nothing.
    problem: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def covers(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if namespace != self.namespace or self.match_labels is None:
            return False
        if any(labels.get(key) != value for key, value in self.match_labels.items()):
            return False
        return all(requirement.matches(labels) for requirement in self.expressions)

    def allowed(self, matched: int, healthy: int) -> int:
        """Disruptions allowed now, given how many pods it matches and how many of them run."""
        if self.problem:
            return 0
        if self.status_allowed is not None:
            return max(0, self.status_allowed)
        if self.min_available is not None:
            desired = scaled(self.min_available, matched)
        elif self.max_unavailable is not None:
            desired = matched - scaled(self.max_unavailable, matched)
        else:
            # policy/v1 defaults minAvailable to 1 when neither is set.
            desired = 1
        return max(0, healthy - desired)


def scaled(value: str, total: int) -> int:
    """An IntOrString as the controller scales it: an integer as is, a percentage of total rounded up."""
    found = _PERCENT.match(value)
    if found:
        return math.ceil(int(found.group(1)) * total / 100)
    return int(value)


def _int_or_percent(raw: Any, field: str) -> tuple[str | None, str]:
    if raw is None:
        return None, ""
    if isinstance(raw, bool):
        return None, f"{field} {raw!r} is neither an integer nor a percentage"
    if isinstance(raw, int):
        return (str(raw), "") if raw >= 0 else (None, f"{field} {raw} is negative")
    text = str(raw).strip()
    if text.isdigit() or _PERCENT.match(text):
        return text, ""
    return None, f"{field} {raw!r} is neither an integer nor a percentage"


def _requirements(raw: Any) -> tuple[tuple[Requirement, ...], str]:
    if raw is None:
        return (), ""
    if not isinstance(raw, list):
        return (), "spec.selector.matchExpressions is not a list"
    found: list[Requirement] = []
    for index, entry in enumerate(raw):
        field = f"spec.selector.matchExpressions[{index}]"
        if not isinstance(entry, Mapping):
            return (), f"{field} is not an object"
        operator = str(entry.get("operator") or "")
        if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return (), f"{field}.operator {operator!r} is not In, NotIn, Exists or DoesNotExist"
        values = entry.get("values") or []
        if not isinstance(values, list):
            return (), f"{field}.values is not a list"
        found.append(Requirement(str(entry.get("key") or ""), operator, frozenset(str(value) for value in values)))
    return tuple(found), ""


def budget_from_object(obj: Mapping[str, Any]) -> DisruptionBudget:
    """A PodDisruptionBudget object as read from YAML or the API; never raises (a budget it cannot
    read carries the problem and allows nothing)."""
    metadata = obj.get("metadata") if isinstance(obj.get("metadata"), Mapping) else {}
    assert isinstance(metadata, Mapping)
    namespace = str(metadata.get("namespace") or "default")
    name = str(metadata.get("name") or "")
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    assert isinstance(spec, Mapping)
    problems: list[str] = []
    selector = spec.get("selector")
    match_labels: Mapping[str, str] | None = None
    expressions: tuple[Requirement, ...] = ()
    if isinstance(selector, Mapping):
        labels = selector.get("matchLabels") or {}
        if isinstance(labels, Mapping):
            match_labels = {str(key): str(value) for key, value in labels.items()}
        else:
            problems.append("spec.selector.matchLabels is not an object")
        expressions, problem = _requirements(selector.get("matchExpressions"))
        if problem:
            problems.append(problem)
    elif selector is not None:
        problems.append("spec.selector is not an object")
    min_available, problem = _int_or_percent(spec.get("minAvailable"), "spec.minAvailable")
    if problem:
        problems.append(problem)
    max_unavailable, problem = _int_or_percent(spec.get("maxUnavailable"), "spec.maxUnavailable")
    if problem:
        problems.append(problem)
    if min_available is not None and max_unavailable is not None:
        problems.append("spec.minAvailable and spec.maxUnavailable are both set")
    status = obj.get("status")
    status_allowed: int | None = None
    if isinstance(status, Mapping) and isinstance(status.get("disruptionsAllowed"), int):
        status_allowed = int(status["disruptionsAllowed"])
    return DisruptionBudget(
        namespace,
        name,
        match_labels,
        expressions,
        status_allowed,
        min_available,
        max_unavailable,
        "; ".join(problems),
    )


@attrs.frozen(slots=True)
class BudgetPod:
    """What a budget needs of a pod: where it lives, its labels, whether it runs."""

    key: str
    namespace: str
    labels: Mapping[str, str]
    running: bool


def disruptions_left(budgets: Sequence[DisruptionBudget], pods: Iterable[BudgetPod]) -> dict[str, int]:
    """Per budget key, the disruptions it allows now."""
    listed = list(pods)
    left: dict[str, int] = {}
    for budget in budgets:
        matched = [pod for pod in listed if budget.covers(pod.namespace, pod.labels)]
        left[budget.key] = budget.allowed(len(matched), sum(1 for pod in matched if pod.running))
    return left


def covering(budgets: Sequence[DisruptionBudget], namespace: str, labels: Mapping[str, str]) -> tuple[str, ...]:
    """The keys of the budgets that cover a pod."""
    return tuple(budget.key for budget in budgets if budget.covers(namespace, labels))
