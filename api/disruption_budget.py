"""A PodDisruptionBudget (policy/v1) as the pdb plugin and the simulated Eviction API read it.

The selector follows metav1.LabelSelectorAsSelector as Volcano's pdb plugin uses it: matchLabels
and matchExpressions (In, NotIn, Exists, DoesNotExist) all hold; a budget with no selector or an
empty one protects no pod (Volcano skips it: `selector.Empty()`), and one whose selector cannot
be read (an unknown operator, In without values) protects no pod either, with a problem naming
the budget and the field.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable, Mapping

import attrs


class SelectorOperator(enum.StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"


@attrs.frozen(slots=True)
class LabelRequirement:
    key: str
    operator: SelectorOperator
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator is SelectorOperator.IN:
            return present and labels[self.key] in self.values
        if self.operator is SelectorOperator.NOT_IN:
            return not present or labels[self.key] not in self.values
        if self.operator is SelectorOperator.EXISTS:
            return present
        return not present


@attrs.frozen(slots=True)
class IntOrPercent:
    """An intstr value: a count, or a percentage of the expected pods (rounded up, as the
    disruption controller scales both minAvailable and maxUnavailable)."""

    value: int
    percent: bool = False

    def scaled(self, total: int) -> int:
        if not self.percent:
            return self.value
        return math.ceil(self.value * total / 100)


@attrs.frozen(slots=True)
class DisruptionBudget:
    namespace: str
    name: str
    match_labels: Mapping[str, str] = attrs.field(factory=dict)
    match_expressions: tuple[LabelRequirement, ...] = ()
    # False: no selector (null); the budget matches nothing. An empty selector matches every pod of
    # the namespace (policy/v1), and so does one that could not be read (cache/convert_pdb.py).
    selects: bool = False
    min_available: IntOrPercent | None = None
    max_unavailable: IntOrPercent | None = None
    # status.disruptionsAllowed as the disruption controller (or the Eviction API) last wrote it;
    # None when the object has no status yet.
    disruptions_allowed: int | None = None
    # status.disruptedPods: pod names the API server already let go; they use no more budget.
    disrupted_pods: frozenset[str] = frozenset()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        if not self.selects or namespace != self.namespace:
            return False
        if any(labels.get(key) != value for key, value in self.match_labels.items()):
            return False
        return all(requirement.matches(labels) for requirement in self.match_expressions)


def computed_disruptions_allowed(budget: DisruptionBudget, expected: int, healthy: int) -> int:
    """What the disruption controller would write: healthy pods beyond the desired healthy count.

    `expected` is the number of pods the budget covers (numasched has no view of the owning
    controller's scale, so it counts the matching pods that have not finished); `healthy` those of
    them running and not terminating. minAvailable wins over maxUnavailable; with neither the
    desired count is 0, as the controller leaves it."""
    if budget.min_available is not None:
        desired = budget.min_available.scaled(expected)
    elif budget.max_unavailable is not None:
        desired = max(0, expected - budget.max_unavailable.scaled(expected))
    else:
        desired = 0
    return max(0, healthy - desired)


def budgets_of(
    budgets: Iterable[DisruptionBudget], namespace: str, labels: Mapping[str, str]
) -> list[DisruptionBudget]:
    """The budgets that protect a pod of this namespace with these labels."""
    return [budget for budget in budgets if budget.matches(namespace, labels)]
