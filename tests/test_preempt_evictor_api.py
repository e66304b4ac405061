"""The Kubernetes evictor against the test API server, extended here with the Eviction subresource
and PodDisruptionBudget checks as the API server does them (policy/v1: 429 while a budget allows
no disruption, 409 on a uid precondition that fails); and the simulated cluster's evictor."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import anyio
import pytest
from aiohttp import web
from kubeapi_server import RESOURCE_TYPES, ApiError, KubeApiServer
from kubernetes_asyncio import client

from numasched.api.resource import Resource
from numasched.api.task import TaskInfo, TaskStatus
from numasched.cache.cache import Cache
from numasched.cache.eviction import EvictRequest, EvictStatus
from numasched.cache.kube.evictor import KubeEvictor
from numasched.cache.sim_evictor import SimEvictor
from numasched.cache.simcluster import SimCluster

pytestmark = pytest.mark.anyio
PODS = next(resource for resource in RESOURCE_TYPES if resource.plural == "pods")
BUDGET_MESSAGE = "Cannot evict pod as it would violate the pod's disruption budget."


# kubeapi_server is a test module mypy does not follow (ignore_missing_imports): its class is Any.
class EvictingApiServer(KubeApiServer):  # type: ignore[misc]
    """KubeApiServer plus POST pods/<name>/eviction checked against PodDisruptionBudgets given as
    (namespace, matchLabels, disruptionsAllowed)."""

    def __init__(self) -> None:
        super().__init__(bookmark_interval=0.1)
        self.budgets: list[dict[str, Any]] = []
        self.evictions: list[tuple[str, str]] = []

    def add_budget(self, namespace: str, match_labels: Mapping[str, str], allowed: int) -> None:
        self.budgets.append({"namespace": namespace, "labels": dict(match_labels), "allowed": allowed})

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if (
            len(parts) == 7
            and parts[:3] == ["api", "v1", "namespaces"]
            and parts[4] == "pods"
            and parts[6] == "eviction"
        ):
            if request.method != "POST":
                raise ApiError(405, "MethodNotAllowed", "eviction accepts POST only")
            return web.json_response(self._evict(parts[3], parts[5], await request.json()), status=201)
        response: web.StreamResponse = await super()._route(request)
        return response

    def _evict(self, namespace: str, name: str, body: Mapping[str, Any]) -> dict[str, Any]:
        if body.get("kind") != "Eviction" or body.get("apiVersion") != "policy/v1":
            raise ApiError(
                400, "BadRequest", f"expected a policy/v1 Eviction, got {body.get('apiVersion')}/{body.get('kind')}"
            )
        pod = self.objects[PODS].get((namespace, name))
        if pod is None:
            raise ApiError(404, "NotFound", f'pods "{name}" not found')
        wanted_uid = ((body.get("deleteOptions") or {}).get("preconditions") or {}).get("uid")
        if wanted_uid and wanted_uid != pod["metadata"].get("uid"):
            raise ApiError(409, "Conflict", f"Precondition failed: UID in precondition: {wanted_uid}")
        labels = pod["metadata"].get("labels") or {}
        covering = [
            budget
            for budget in self.budgets
            if budget["namespace"] == namespace and all(labels.get(k) == v for k, v in budget["labels"].items())
        ]
        if any(budget["allowed"] <= 0 for budget in covering):
            raise ApiError(429, "TooManyRequests", BUDGET_MESSAGE)
        for budget in covering:
            budget["allowed"] -= 1
        self._delete(PODS, (namespace, name))
        self.evictions.append((namespace, name))
        return {"kind": "Status", "apiVersion": "v1", "status": "Success"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def server() -> AsyncIterator[EvictingApiServer]:
    async with EvictingApiServer() as running:
        yield running


@pytest.fixture
async def api(server: EvictingApiServer) -> AsyncIterator[client.ApiClient]:
    async with client.ApiClient(client.Configuration(host=server.url)) as api_client:
        yield api_client


def pod(name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team", "labels": dict(labels or {})},
        "spec": {"schedulerName": "numasched", "nodeName": "n1", "containers": [{"name": "main"}]},
        "status": {"phase": "Running"},
    }


def request_for(name: str, uid: str) -> EvictRequest:
    task = TaskInfo(uid, "team", name, "job", Resource(), Resource(), status=TaskStatus.RUNNING, node_name="n1")
    return EvictRequest(task, "n1", "preempted by team/trainer (preempt)")


def condition_of(server: KubeApiServer, name: str) -> dict[str, Any] | None:
    stored = server.get("v1", "Pod", name, "team")
    if stored is None:
        return None
    found = [c for c in stored.get("status", {}).get("conditions", []) if c["type"] == "DisruptionTarget"]
    return found[0] if found else None


async def test_eviction_goes_through_the_eviction_api_with_condition_and_event(
    server: EvictingApiServer, api: client.ApiClient
) -> None:
    created = server.add(pod("victim"))
    outcome = await KubeEvictor(api, timeout=2.0).evict(request_for("victim", created["metadata"]["uid"]))
    assert outcome.status is EvictStatus.EVICTED
    assert server.evictions == [("team", "victim")]
    assert server.get("v1", "Pod", "victim", "team") is None
    events = [e for e in server.list("v1", "Event") if e["reason"] == "Preempted"]
    assert len(events) == 1
    assert events[0]["involvedObject"]["name"] == "victim"
    assert events[0]["message"] == "Preempted by team/trainer (preempt) on node n1"
    # The condition was written before the eviction: the DELETED object carried it.
    deleted = [entry for entry in server.history if entry.type == "DELETED"]
    conditions = deleted[-1].obj["status"]["conditions"]
    target = next(c for c in conditions if c["type"] == "DisruptionTarget")
    assert (target["status"], target["reason"]) == ("True", "PreemptionByScheduler")
    assert "team/trainer" in target["message"]


async def test_a_disruption_budget_blocks_the_eviction(server: EvictingApiServer, api: client.ApiClient) -> None:
    first = server.add(pod("db-0", {"app": "db"}))
    second = server.add(pod("db-1", {"app": "db"}))
    server.add_budget("team", {"app": "db"}, allowed=1)
    evictor = KubeEvictor(api, timeout=2.0)
    assert (await evictor.evict(request_for("db-0", first["metadata"]["uid"]))).status is EvictStatus.EVICTED
    blocked = await evictor.evict(request_for("db-1", second["metadata"]["uid"]))
    assert blocked.status is EvictStatus.BLOCKED and "disruption budget" in blocked.message
    assert server.get("v1", "Pod", "db-1", "team") is not None
    condition = condition_of(server, "db-1")
    assert condition is not None and (condition["status"], condition["reason"]) == ("False", "EvictionBlocked")
    assert not [e for e in server.list("v1", "Event") if e["involvedObject"]["name"] == "db-1"]


async def test_a_replaced_pod_or_a_missing_one_is_gone(server: EvictingApiServer, api: client.ApiClient) -> None:
    server.add(pod("p"))
    evictor = KubeEvictor(api, timeout=2.0)
    assert (await evictor.evict(request_for("p", "an-older-uid"))).status is EvictStatus.GONE
    assert server.get("v1", "Pod", "p", "team") is not None
    assert (await evictor.evict(request_for("missing", "x"))).status is EvictStatus.GONE


async def test_a_slow_api_server_is_bounded_by_the_timeout(server: EvictingApiServer, api: client.ApiClient) -> None:
    created = server.add(pod("slow"))
    server.slow_down(2.0, methods=["POST", "PATCH"])
    with anyio.fail_after(5):
        outcome = await KubeEvictor(api, timeout=0.3).evict(request_for("slow", created["metadata"]["uid"]))
    assert outcome.status is EvictStatus.FAILED


async def test_the_simulated_cluster_evicts_at_once_and_says_why() -> None:
    cache = Cache()
    cluster = SimCluster(cache)
    cluster.add(pod("victim"))
    evictor = SimEvictor(cluster)
    uid = cluster.objects["Pod"]["team/victim"]["metadata"]["uid"]
    outcome = await evictor.evict(request_for("victim", uid))
    assert outcome.status is EvictStatus.EVICTED
    assert "team/victim" not in cluster.objects["Pod"]
    assert [(e.reason, e.message) for e in cluster.events] == [
        ("Preempted", "Preempted by team/trainer (preempt) on node n1")
    ]
    assert [(e.pod, e.node) for e in evictor.evicted] == [("team/victim", "n1")]
    assert (await evictor.evict(request_for("victim", uid))).status is EvictStatus.GONE
