"""The manifests in deploy/: they load, they agree with the code, and the RBAC allows exactly what a
running scheduler asks the API server for."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from kubeapi_server import RESOURCE_TYPES, KubeApiServer
from kubernetes_asyncio import client

from numasched.cache.kube.informer import InformerTiming
from numasched.cache.kube.resources import ConfigMapRef
from numasched.cache.machine_shapes import machine_objects
from numasched.conf.defaults import default_config
from numasched.conf.watch import ConfigSource
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.leader import LeaseTiming
from numasched.scheduler.runner import RunOptions, SchedulerRunner, add_run_arguments

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def scheduler_objects() -> dict[tuple[str, str], dict[str, Any]]:
    found: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted((DEPLOY / "scheduler").glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in documents(path):
            found[(doc["kind"], doc["metadata"]["name"])] = doc
    return found


def test_kustomizations_name_existing_files() -> None:
    top = documents(DEPLOY / "kustomization.yaml")[0]
    assert top["resources"] == ["scheduler", "exporter"]
    for folder in top["resources"]:
        inner = documents(DEPLOY / folder / "kustomization.yaml")[0]
        for resource in inner["resources"]:
            assert (DEPLOY / folder / resource).is_file(), f"{folder}/{resource}"


def test_config_map_holds_the_default_configuration() -> None:
    config_map = scheduler_objects()[("ConfigMap", "numasched")]
    registry = default_registry()
    source = ConfigSource.from_text(
        config_map["data"]["volcano-scheduler.conf"],
        "deploy ConfigMap",
        registry.known_plugin_names(),
        registry.known_action_names(),
    )
    assert source.current() == default_config()


def test_deployment_is_hardened_and_its_arguments_parse() -> None:
    objects = scheduler_objects()
    deployment = objects[("Deployment", "numasched")]
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod_spec = spec["template"]["spec"]
    assert pod_spec["securityContext"]["runAsNonRoot"] is True
    (container,) = pod_spec["containers"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["requests"]["cpu"] and container["resources"]["requests"]["memory"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["args"][0] == "run"
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    args = parser.parse_args(container["args"][1:])
    namespace = deployment["metadata"]["namespace"]
    assert args.config_map == ConfigMapRef(namespace, "numasched")
    assert ("ConfigMap", args.config_map.name) in objects
    assert args.metrics_addr.endswith(f":{container['ports'][0]['containerPort']}")
    assert pod_spec["serviceAccountName"] == objects[("ServiceAccount", "numasched")]["metadata"]["name"]
    lease_rule = next(r for r in objects[("Role", "numasched")]["rules"] if r.get("resourceNames"))
    assert lease_rule["resourceNames"] == [args.lease_name]
    assert args.lease_duration > args.renew_deadline > args.retry_period
    assert pod_spec["terminationGracePeriodSeconds"] > args.shutdown_grace


def matches(schema: dict[str, Any], value: Any, path: str) -> list[str]:
    """The subset of structural-schema validation the CRD uses."""
    if schema.get("x-kubernetes-preserve-unknown-fields") and not schema.get("properties"):
        return []
    expected = schema.get("type")
    checks = {"object": dict, "string": str, "integer": int, "array": list}
    if expected in checks and (not isinstance(value, checks[expected]) or isinstance(value, bool)):
        return [f"{path}: expected {expected}, got {type(value).__name__}"]
    problems: list[str] = []
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            if key in properties:
                problems += matches(properties[key], item, f"{path}.{key}")
            elif isinstance(extra, dict):
                problems += matches(extra, item, f"{path}.{key}")
            elif not schema.get("x-kubernetes-preserve-unknown-fields") and path != "":
                problems.append(f"{path}.{key}: unknown field (would be pruned)")
    return problems


def test_simulated_numatopologies_fit_the_shipped_volcano_crd() -> None:
    # The simulator's objects (example cluster, scenarios, benchmarks) must be what a cluster with
    # Volcano's CRD would store; the exporter's own objects are checked in test_volcano_schema.py.
    crd = scheduler_objects()[("CustomResourceDefinition", "numatopologies.nodeinfo.volcano.sh")]
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    machine = yaml.safe_load((ROOT / "tests" / "fixtures" / "machines" / "pcie-8gpu-2numa.yaml").read_text())
    _, topology = machine_objects(machine, "gpu-0")
    topology["spec"]["podAllocations"] = [
        {
            "uid": "u1",
            "name": "p",
            "namespace": "default",
            "containerAllocations": [{"name": "main", "allocations": {"cpu": "2-3", "nvidia.com/gpu": "1"}}],
        }
    ]
    assert matches(schema["properties"]["spec"], topology["spec"], "spec") == []
    assert matches(schema["properties"]["spec"], {"numares": {"cpu": {"capacity": "many"}}}, "spec")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def server() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(bookmark_interval=0.2) as running:
        yield running


VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def requested_permissions(server: KubeApiServer) -> set[tuple[str, str, str, str]]:
    """(namespace or "", API group, resource[/subresource], verb) of every request the server saw."""
    wanted = set()
    for method, path in server.request_counts:
        parts = [p for p in path.split("/") if p]
        group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1], parts[3:])
        namespace = ""
        if rest[:1] == ["namespaces"] and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        resource = "/".join([rest[0], *rest[2:3]])
        named = len(rest) >= 2
        # A watch needs list and watch alike.
        verb = ("get" if named else "list") if method == "GET" else VERBS[method]
        wanted.add((namespace, group, resource, verb))
        if method == "GET" and not named:
            wanted.add((namespace, group, resource, "watch"))
    return wanted


def allowed(rules: list[dict[str, Any]], group: str, resource: str, verb: str) -> bool:
    return any(group in rule["apiGroups"] and resource in rule["resources"] and verb in rule["verbs"] for rule in rules)


@pytest.mark.anyio
async def test_rbac_allows_every_request_a_running_scheduler_makes(server: KubeApiServer) -> None:
    objects = scheduler_objects()
    server.add(objects[("ConfigMap", "numasched")])
    machine = yaml.safe_load((ROOT / "tests" / "fixtures" / "machines" / "pcie-8gpu-2numa.yaml").read_text())
    node, topology = machine_objects(machine, "gpu-0")
    server.add(node)
    server.add(topology)
    container = {"name": "main", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
    server.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "fits", "namespace": "default"},
                "spec": {"schedulerName": "numasched", "containers": [container]}})  # fmt: skip
    too_big = {"name": "main", "resources": {"requests": {"cpu": "999", "memory": "1Gi"}}}
    for index in range(2):
        server.add({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"gang-{index}", "namespace": "default",
                    "annotations": {"scheduling.k8s.io/group-name": "g"}},
                    "spec": {"schedulerName": "numasched", "containers": [too_big]}})  # fmt: skip
    server.add({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
                "metadata": {"name": "g", "namespace": "default"}, "spec": {"minMember": 2}})  # fmt: skip
    namespace = "numasched-system"
    options = RunOptions(
        config_map=ConfigMapRef(namespace, "numasched"),
        schedule_period=0.1,
        lease_namespace=namespace,
        lease_timing=LeaseTiming(2.0, 1.5, 0.2),
        identity="rbac-check",
        informer_timing=InformerTiming(request_timeout=5.0, backoff_initial=0.05, backoff_cap=0.2),
    )
    async with client.ApiClient(client.Configuration(host=server.url)) as api_client:
        runner = SchedulerRunner(api_client, options)
        async with anyio.create_task_group() as group:
            group.start_soon(runner.run)
            with anyio.fail_after(10):
                while not (
                    server.bind_counts[("default", "fits")]
                    and any(e["reason"] == "FailedScheduling" for e in server.list("v1", "Event"))
                    and (server.get("scheduling.volcano.sh/v1beta1", "PodGroup", "g", "default") or {}).get("status")
                ):
                    await anyio.sleep(0.05)
            runner.stop()
    cluster_rules = objects[("ClusterRole", "numasched")]["rules"]
    role_rules = objects[("Role", "numasched")]["rules"]
    wanted = requested_permissions(server)
    assert ("", "pods/binding", "create") in {(g, r, v) for _, g, r, v in wanted}
    assert ("", "pods/status", "patch") in {(g, r, v) for _, g, r, v in wanted}
    for request_namespace, group_name, resource, verb in sorted(wanted):
        by_role = request_namespace == namespace and allowed(role_rules, group_name, resource, verb)
        assert by_role or allowed(cluster_rules, group_name, resource, verb), (
            f"RBAC does not allow {verb} {group_name or 'core'}/{resource} in {request_namespace or 'all namespaces'}"
        )
    # Least privilege: nothing granted that the scheduler never uses.
    used = {(g, r) for _, g, r, _ in wanted}
    for rule in cluster_rules + role_rules:
        for group_name in rule["apiGroups"]:
            for resource in rule["resources"]:
                known = any(t.group == group_name and resource.split("/")[0] == t.plural for t in RESOURCE_TYPES)
                assert known, f"RBAC grants {group_name}/{resource}, which the scheduler never reads"
                if resource != "events" and "/" not in resource:
                    assert (group_name, resource) in used, (
                        f"RBAC grants {group_name}/{resource} but the scheduler made no request for it"
                    )
