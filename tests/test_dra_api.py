"""API level: the claim status write before the binding, and its roll back, against the test API
server with the real kubernetes_asyncio client; DRA informers on a server without the group."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from kubeapi_server import KubeApiServer
from kubernetes_asyncio import client

from numasched.api.allocation import ContainerAllocation, PodAllocation
from numasched.api.dra import ClaimAllocation, ClaimInfo, DeviceResult
from numasched.api.dra_claims import PodClaims, ledger_entries
from numasched.api.resource import Resource
from numasched.api.task import TaskInfo
from numasched.cache.binder import BindRequest, BindStatus
from numasched.cache.cache import Cache
from numasched.cache.kube.binder import KubeBinder
from numasched.cache.kube.informer import InformerTiming
from numasched.cache.kube.resources import build_informers

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def server() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(bookmark_interval=0.1) as running:
        yield running


@pytest.fixture
async def api(server: KubeApiServer) -> AsyncIterator[client.ApiClient]:
    async with client.ApiClient(client.Configuration(host=server.url)) as api_client:
        yield api_client


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "numasched",
            "containers": [{"name": "c"}],
            "resourceClaims": [{"name": "gpus", "resourceClaimName": "gpus"}],
        },
    }


def claim_object(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "gpus", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    }


def placed_task(name: str, uid: str, devices: tuple[str, ...]) -> TaskInfo:
    """A task as the session leaves it: its claim resolved, the claim's devices in its ledger."""
    results = tuple(DeviceResult("gpus", "gpu.nvidia.com", "node-1", device) for device in devices)
    entries = ledger_entries([("default/gpus", ClaimAllocation(results, "node-1"))])
    return TaskInfo(
        uid=uid,
        namespace="default",
        name=name,
        job_id=name,
        resreq=Resource(),
        init_resreq=Resource(),
        allocation=PodAllocation((ContainerAllocation("", devices=entries),)),
        claims=PodClaims((ClaimInfo("default", "gpus"),)),
    )


async def test_the_claim_status_is_written_before_the_binding(server: KubeApiServer, api: client.ApiClient) -> None:
    created = server.add(pod("trainer"))
    server.add(claim_object("gpus"))
    binder = KubeBinder(api, timeout=2.0)
    outcome = await binder.bind(
        BindRequest(placed_task("trainer", created["metadata"]["uid"], ("gpu-4", "gpu-5")), "node-1")
    )
    assert outcome.status is BindStatus.BOUND, outcome.message
    stored = server.get("resource.k8s.io/v1", "ResourceClaim", "gpus", "default")
    assert stored is not None
    status = stored["status"]
    assert [
        (r["request"], r["driver"], r["pool"], r["device"]) for r in status["allocation"]["devices"]["results"]
    ] == [
        ("gpus", "gpu.nvidia.com", "node-1", "gpu-4"),
        ("gpus", "gpu.nvidia.com", "node-1", "gpu-5"),
    ]
    terms = status["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}]
    assert status["reservedFor"] == [{"resource": "pods", "name": "trainer", "uid": created["metadata"]["uid"]}]
    bound = server.get("v1", "Pod", "trainer", "default")
    assert bound is not None and bound["spec"]["nodeName"] == "node-1"


async def test_a_failed_binding_takes_the_claim_status_back(server: KubeApiServer, api: client.ApiClient) -> None:
    created = server.add(pod("trainer"))
    server.add(claim_object("gpus"))
    binder = KubeBinder(api, timeout=2.0)
    server.fail_binds(1, code=500)
    outcome = await binder.bind(BindRequest(placed_task("trainer", created["metadata"]["uid"], ("gpu-4",)), "node-1"))
    assert outcome.status is BindStatus.FAILED
    stored = server.get("resource.k8s.io/v1", "ResourceClaim", "gpus", "default")
    assert stored is not None and not stored.get("status", {}).get("allocation")
    assert not stored.get("status", {}).get("reservedFor")
    bound = server.get("v1", "Pod", "trainer", "default")
    assert bound is not None and not bound["spec"].get("nodeName")


async def test_a_claim_allocated_by_someone_else_is_not_overwritten(
    server: KubeApiServer, api: client.ApiClient
) -> None:
    created = server.add(pod("trainer"))
    taken = claim_object("gpus")
    taken["status"] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpus", "driver": "gpu.nvidia.com", "pool": "node-1", "device": "gpu-0"}]
            }
        }
    }
    server.add(taken)
    binder = KubeBinder(api, timeout=2.0)
    outcome = await binder.bind(BindRequest(placed_task("trainer", created["metadata"]["uid"], ("gpu-4",)), "node-1"))
    assert outcome.status is BindStatus.FAILED and "allocated by someone else" in outcome.message
    stored = server.get("resource.k8s.io/v1", "ResourceClaim", "gpus", "default")
    assert stored is not None and stored["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    bound = server.get("v1", "Pod", "trainer", "default")
    assert bound is not None and not bound["spec"].get("nodeName")


async def test_a_missing_claim_refuses_the_binding(server: KubeApiServer, api: client.ApiClient) -> None:
    created = server.add(pod("trainer"))
    binder = KubeBinder(api, timeout=2.0)
    outcome = await binder.bind(BindRequest(placed_task("trainer", created["metadata"]["uid"], ("gpu-4",)), "node-1"))
    assert outcome.status is BindStatus.FAILED and "ResourceClaim default/gpus not found" in outcome.message


async def test_dra_informers_feed_the_cache_and_a_server_without_the_group_stalls_nothing(
    server: KubeApiServer, api: client.ApiClient
) -> None:
    server.uninstall_group("resource.k8s.io")
    server.add({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"}, "status": {}})
    cache = Cache()
    timing = InformerTiming(request_timeout=2.0, watch_timeout=5, backoff_initial=0.05, missing_retry=0.2)
    informers = build_informers(api, cache, timing=timing)
    async with anyio.create_task_group() as group:
        for informer in informers:
            group.start_soon(informer.run)
        with anyio.fail_after(5):
            while "node-1" not in cache.snapshot().nodes:
                await anyio.sleep(0.02)
        server.install_group("resource.k8s.io")
        server.add(claim_object("gpus"))
        with anyio.fail_after(5):
            while "default/gpus" not in cache.dra.claims:
                await anyio.sleep(0.02)
        group.cancel_scope.cancel()
