"""The exporter's ValidatingAdmissionPolicy, evaluated on sample AdmissionRequests with cel-python.

The API server evaluates matchConditions first (all must be true for the policy to apply), then
the variables in order (each may use the ones before), then every validation; a false validation
denies the request with its message. This test does the same with an independent CEL
implementation (celpy), so what is checked is the shipped CEL text itself.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from celpy import celtypes
from celpy.adapter import json_to_cel
from test_deploy_rbac import derived_permissions

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"
WRITTEN = [("nodeinfo.volcano.sh", "numatopologies"), ("topology.node.k8s.io", "noderesourcetopologies")]


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def all_objects() -> list[dict[str, Any]]:
    return [doc for path in sorted(DEPLOY.rglob("*.yaml")) for doc in documents(path)]


def the(kind: str) -> dict[str, Any]:
    (found,) = [obj for obj in all_objects() if obj["kind"] == kind]
    return found


def exporter_username() -> str:
    daemonset = next(obj for obj in all_objects() if obj["kind"] == "DaemonSet")
    account = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
    return f"system:serviceaccount:{daemonset['metadata']['namespace']}:{account}"


class Verdict:
    def __init__(self, applies: bool, denials: list[str]) -> None:
        self.applies = applies
        self.denials = denials

    @property
    def allowed(self) -> bool:
        return not self.denials


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    environment = celpy.Environment()
    program = environment.program(environment.compile(expression))
    return program.evaluate(activation)


def admit(request: dict[str, Any]) -> Verdict:
    """What the API server decides for one request under the shipped policy."""
    spec = the("ValidatingAdmissionPolicy")["spec"]
    activation: dict[str, Any] = {
        "request": json_to_cel(request),
        "object": json_to_cel(request.get("object")),
        "oldObject": json_to_cel(request.get("oldObject")),
    }
    for condition in spec.get("matchConditions", []):
        if not evaluate(condition["expression"], activation):
            return Verdict(False, [])
    variables: dict[str, Any] = {}
    for variable in spec.get("variables", []):
        activation["variables"] = celtypes.MapType({celtypes.StringType(k): v for k, v in variables.items()})
        variables[variable["name"]] = evaluate(variable["expression"], activation)
    activation["variables"] = celtypes.MapType({celtypes.StringType(k): v for k, v in variables.items()})
    denials = []
    for validation in spec["validations"]:
        result = evaluate(validation["expression"], activation)
        assert isinstance(result, celtypes.BoolType), f"{validation['expression']!r} gave {result!r}"
        if not result:
            message = validation.get("message")
            if "messageExpression" in validation:
                message = str(evaluate(validation["messageExpression"], activation))
            denials.append(" ".join(str(message).split()))
    return Verdict(True, denials)


def request(
    operation: str,
    name: str,
    *,
    node: str | list[str] | None = "node-a",
    username: str | None = None,
    group: str = "nodeinfo.volcano.sh",
    resource: str = "numatopologies",
) -> dict[str, Any]:
    extra: dict[str, list[str]] = {"authentication.kubernetes.io/pod-name": ["numasched-exporter-x1"]}
    if node is not None:
        extra[NODE_NAME_KEY] = [node] if isinstance(node, str) else node
    obj = {"apiVersion": f"{group}/v1", "kind": "Numatopology", "metadata": {"name": name}}
    return {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "operation": operation,
        "name": name,
        "resource": {"group": group, "version": "v1alpha1", "resource": resource},
        "userInfo": {"username": username or exporter_username(), "groups": ["system:serviceaccounts"], "extra": extra},
        "object": None if operation == "DELETE" else obj,
        "oldObject": None if operation == "CREATE" else obj,
    }


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
@pytest.mark.parametrize(
    ("group", "resource"),
    [("nodeinfo.volcano.sh", "numatopologies"), ("topology.node.k8s.io", "noderesourcetopologies")],
)
def test_the_exporter_writes_its_own_node_object(operation: str, group: str, resource: str) -> None:
    verdict = admit(request(operation, "node-a", group=group, resource=resource))
    assert verdict.applies and verdict.allowed, verdict.denials


@pytest.mark.parametrize("operation", ["CREATE", "UPDATE", "DELETE"])
@pytest.mark.parametrize(
    ("group", "resource"),
    [("nodeinfo.volcano.sh", "numatopologies"), ("topology.node.k8s.io", "noderesourcetopologies")],
)
def test_the_exporter_is_refused_another_node_object(operation: str, group: str, resource: str) -> None:
    verdict = admit(request(operation, "node-b", group=group, resource=resource))
    assert verdict.applies
    assert verdict.denials == ["the exporter on node node-a may write only the object named node-a, not node-b"]


@pytest.mark.parametrize(
    ("node", "why"),
    [
        (None, "token is not bound to a node"),  # a legacy or TokenRequest token without pod binding
        ([], "token is not bound to a node"),
        (["node-a", "node-b"], "token is not bound to a node"),
    ],
)
def test_a_token_without_exactly_one_node_is_refused(node: list[str] | None, why: str) -> None:
    verdict = admit(request("CREATE", "node-a", node=node))
    assert verdict.applies and len(verdict.denials) == 1
    assert why in verdict.denials[0]


def test_a_token_without_any_extra_is_refused_with_the_policy_message() -> None:
    legacy = request("UPDATE", "node-a")
    del legacy["userInfo"]["extra"]
    verdict = admit(legacy)
    assert verdict.applies and len(verdict.denials) == 1
    assert "token is not bound to a node" in verdict.denials[0]


def test_a_prefix_or_suffix_of_the_node_name_is_not_enough() -> None:
    for name in ("node-a2", "node-", "NODE-A", "node-a "):
        assert not admit(request("UPDATE", name)).allowed, name


def test_others_are_not_judged_by_this_policy() -> None:
    for username in ("kubernetes-admin", "system:serviceaccount:kube-system:other", "system:node:node-a"):
        verdict = admit(request("CREATE", "node-b", username=username))
        assert not verdict.applies and verdict.allowed


def test_the_policy_covers_every_object_the_exporter_may_write() -> None:
    """Derived from the exporter's code (test_deploy_rbac): each group/resource it writes is matched."""
    writes = {(group, resource) for group, resource, verb in derived_permissions()["exporter"] if verb != "get"}
    writes.discard(("", "pods"))
    writes.discard(("", "events"))  # the agent's Warning events on pods, not node objects  # it only lists pods
    assert writes, "the derivation found no write of the exporter"
    rules = the("ValidatingAdmissionPolicy")["spec"]["matchConstraints"]["resourceRules"]
    for group, resource in writes:
        rule = next((r for r in rules if group in r["apiGroups"] and resource in r["resources"]), None)
        assert rule is not None, f"{group}/{resource} is written by the exporter but not judged"
        assert {"CREATE", "UPDATE", "DELETE"} <= set(rule["operations"])
        assert rule["apiVersions"] == ["*"]
    # And nothing the exporter cannot write, or unrelated objects, is caught by it.
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert (group, resource.split("/")[0]) in writes, f"{group}/{resource}"


def test_the_binding_enforces_the_policy() -> None:
    policy = the("ValidatingAdmissionPolicy")
    binding = the("ValidatingAdmissionPolicyBinding")
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert binding["spec"]["validationActions"] == ["Deny"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    kustomization = documents(DEPLOY / "exporter" / "kustomization.yaml")[0]
    assert "admission-policy.yaml" in kustomization["resources"]
