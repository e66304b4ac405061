"""predicates: can this node take this task at all (Volcano's predicates plugin).

The checks and their messages are kube-scheduler's filters: node readiness, NodeUnschedulable,
TaintToleration, NodeAffinity (nodeSelector and required node affinity) and NodeResourcesFit
(pod count and requests against what the node has free). Each check is a small pure function;
the plugin runs them in kube-scheduler's order and reports the first that fails.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable, Mapping

from numasched.api.node import NodeInfo, Taint
from numasched.api.resource import Resource
from numasched.api.task import NodeSelectorRequirement, NodeSelectorTerm, TaskInfo, Toleration
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import Session
from numasched.scheduler.framework.status import SUCCESS, Status, StatusCode

PLUGIN_NAME = "predicates"

NOT_READY = "node(s) were not ready"
UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"

UNSCHEDULABLE_TAINT_KEY = "node.kubernetes.io/unschedulable"
NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
# PreferNoSchedule only steers scoring; it never keeps a pod off a node.
_FILTERING_EFFECTS = frozenset({NO_SCHEDULE, NO_EXECUTE})
# The only field a node selector term may match on.
NODE_NAME_FIELD = "metadata.name"
_INTEGER = re.compile(r"[+-]?[0-9]+")


# -- resources -----------------------------------------------------------------------------------


def insufficient_resources(request: Resource, available: Resource) -> list[str]:
    """kube-scheduler's reasons, one per resource the node lacks: ["Insufficient cpu", ...]."""
    return [f"Insufficient {name}" for name in request.insufficient(available)]


def too_many_pods(node: NodeInfo) -> bool:
    """The node already runs as many pods as it may (its allocatable "pods")."""
    return node.pod_count() >= node.max_pods


# -- node selector and affinity ------------------------------------------------------------------


def matches_node_selector(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Every key of a pod's nodeSelector is a node label with that value."""
    return all(key in labels and labels[key] == value for key, value in selector.items())


def _integer(text: str) -> int | None:
    """A base-10 integer as Go's strconv.ParseInt reads it (no spaces, no underscores)."""
    return int(text) if _INTEGER.fullmatch(text) else None


def requirement_matches(requirement: NodeSelectorRequirement, values: Mapping[str, str]) -> bool:
    """One match expression against a node's labels (or fields), with Kubernetes' operators.

    An operator Kubernetes does not know, or a Gt/Lt whose numbers do not parse, matches nothing.
    """
    key, operator, wanted = requirement.key, requirement.operator, requirement.values
    present = key in values
    if operator == "In":
        return present and values[key] in wanted
    if operator == "NotIn":
        return not present or values[key] not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt"):
        if not present or len(wanted) != 1:
            return False
        actual, bound = _integer(values[key]), _integer(wanted[0])
        if actual is None or bound is None:
            return False
        return actual > bound if operator == "Gt" else actual < bound
    return False


def term_matches(term: NodeSelectorTerm, labels: Mapping[str, str], node_name: str) -> bool:
    """All of a term's expressions and fields hold; a term with neither matches no node."""
    if not term.match_expressions and not term.match_fields:
        return False
    fields = {NODE_NAME_FIELD: node_name}
    return all(requirement_matches(requirement, labels) for requirement in term.match_expressions) and all(
        requirement_matches(requirement, fields) for requirement in term.match_fields
    )


def required_affinity_matches(terms: Iterable[NodeSelectorTerm], labels: Mapping[str, str], node_name: str) -> bool:
    """requiredDuringSchedulingIgnoredDuringExecution: the terms are ORed; none given matches all."""
    listed = tuple(terms)
    return not listed or any(term_matches(term, labels, node_name) for term in listed)


def node_affinity_matches(task: TaskInfo, node: NodeInfo) -> bool:
    if not task.node_selector and not task.required_node_terms:
        return True
    return matches_node_selector(task.node_selector, node.labels) and required_affinity_matches(
        task.required_node_terms, node.labels, node.name
    )


# -- taints and tolerations ----------------------------------------------------------------------


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Kubernetes' ToleratesTaint: effect and key must match when given; Exists ignores the value,
    Equal (or no operator) compares it. An empty key with Exists tolerates every taint."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if toleration.operator == "Exists":
        return True
    if toleration.operator in ("", "Equal"):
        return toleration.value == taint.value
    return False


def untolerated_taint(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> Taint | None:
    """The first NoSchedule / NoExecute taint no toleration covers."""
    covering = tuple(tolerations)
    for taint in taints:
        if taint.effect in _FILTERING_EFFECTS and not any(tolerates(toleration, taint) for toleration in covering):
            return taint
    return None


def untolerated_taint_message(taint: Taint) -> str:
    return f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"


def tolerates_unschedulable(tolerations: Iterable[Toleration]) -> bool:
    """A cordoned node still takes pods that tolerate its unschedulable taint (DaemonSet style)."""
    taint = Taint(key=UNSCHEDULABLE_TAINT_KEY, effect=NO_SCHEDULE)
    return any(tolerates(toleration, taint) for toleration in tolerations)


# -- all together --------------------------------------------------------------------------------


def check_node(task: TaskInfo, node: NodeInfo) -> Status:
    """The first failing check in kube-scheduler's filter order; SUCCESS when all pass.

    What the node cannot change by itself (readiness aside, which it can) is unresolvable, so
    preemption does not try; missing room is plain unschedulable.
    """
    if not node.ready:
        return Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, NOT_READY, PLUGIN_NAME)
    if node.unschedulable and not tolerates_unschedulable(task.tolerations):
        return Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, UNSCHEDULABLE, PLUGIN_NAME)
    taint = untolerated_taint(node.taints, task.tolerations) if node.taints else None
    if taint is not None:
        return Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, untolerated_taint_message(taint), PLUGIN_NAME)
    if not node_affinity_matches(task, node):
        return Status(StatusCode.UNSCHEDULABLE_AND_UNRESOLVABLE, AFFINITY_MISMATCH, PLUGIN_NAME)
    reasons = [TOO_MANY_PODS] if too_many_pods(node) else []
    missing = task.init_resreq.insufficient_after(node.idle, node.releasing, node.pipelined)
    reasons.extend(f"Insufficient {name}" for name in missing)
    if reasons:
        return Status(StatusCode.UNSCHEDULABLE, ", ".join(reasons), PLUGIN_NAME)
    return SUCCESS


class PredicatesPlugin:
    name = PLUGIN_NAME

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_predicate_fn(self.name, check_node)

    def equivalence_key(self, task: TaskInfo) -> Hashable:
        """check_node reads the pod's selector, required node affinity, tolerations and requests
        (the requests are in every class key already)."""
        return (tuple(sorted(task.node_selector.items())), task.required_node_terms, task.tolerations)

    def on_session_close(self, ssn: Session) -> None:
        return None


def build(arguments: Arguments) -> PredicatesPlugin:
    return PredicatesPlugin(arguments)
