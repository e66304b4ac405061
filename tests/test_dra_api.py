"""API level: the claim status write before the binding, and its roll back, against the test API
server with the real kubernetes_asyncio client; DRA informers on a server without the group."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
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
from numasched.cache.machine_shapes import machine_objects
from numasched.scheduler.runner import RunOptions, SchedulerRunner

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


def node_slices(node_name: str) -> list[dict[str, Any]]:
    """The fixture slices of pcie-0 (tests/fixtures/dra), for another node of that machine."""
    path = Path(__file__).parent / "fixtures" / "dra" / "pcie-8gpu-2numa-numa.yaml"
    found = []
    for obj in yaml.safe_load_all(path.read_text()):
        if obj and obj["kind"] == "ResourceSlice":
            obj["metadata"]["name"] = obj["metadata"]["name"].replace("pcie-0", node_name)
            obj["spec"]["nodeName"] = node_name
            obj["spec"]["pool"]["name"] = node_name
            found.append(obj)
    return found


async def test_run_end_to_end_allocates_claims_without_handing_a_device_out_twice(server: KubeApiServer) -> None:
    machine = yaml.safe_load((Path(__file__).parent / "fixtures" / "machines" / "pcie-8gpu-2numa.yaml").read_text())
    for name in ("gpu-a", "gpu-b"):
        node_obj, topology = machine_objects(machine, name)
        server.add(node_obj)
        server.add(topology)
        for slice_obj in node_slices(name):
            server.add(slice_obj)
    server.add(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "gpu.nvidia.com"},
            "spec": {"selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]},
        }
    )
    # 10 claims of 2 GPUs on 16 GPUs: 8 can be allocated.
    for index in range(10):
        two = claim_object(f"c{index}")
        two["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2
        two["spec"]["devices"]["constraints"] = [{"matchAttribute": "resource.kubernetes.io/numaNode"}]
        server.add(two)
        worker = pod(f"p{index}")
        worker["spec"]["resourceClaims"] = [{"name": "gpus", "resourceClaimName": f"c{index}"}]
        limits = {"cpu": "2", "memory": "1Gi"}
        worker["spec"]["containers"][0]["resources"] = {"requests": limits, "limits": limits}
        server.add(worker)

    def bound() -> dict[str, str]:
        return {
            p["metadata"]["name"]: p["spec"]["nodeName"] for p in server.list("v1", "Pod") if p["spec"].get("nodeName")
        }

    server.fail_binds(2, code=500)  # two bindings fail after their claims were written
    options = RunOptions(
        schedule_period=0.2,
        leader_elect=False,
        request_timeout=5.0,
        informer_timing=InformerTiming(request_timeout=5.0, watch_timeout=30, backoff_initial=0.05, missing_retry=1.0),
    )
    async with client.ApiClient(client.Configuration(host=server.url)) as api_client:
        runner = SchedulerRunner(api_client, options)
        async with anyio.create_task_group() as group:
            group.start_soon(runner.run)
            with anyio.fail_after(15):
                while len(bound()) < 8:
                    await anyio.sleep(0.05)
            await anyio.sleep(0.6)  # a few more cycles: nothing else may bind
            runner.stop()
    placed = bound()
    assert len(placed) == 8
    assert server.faults.bind_failures_left == 0  # both failures happened, after claim writes
    owners: dict[tuple[str, str], str] = {}
    for index in range(10):
        stored = server.get("resource.k8s.io/v1", "ResourceClaim", f"c{index}", "default")
        assert stored is not None
        status = stored.get("status") or {}
        name = f"p{index}"
        if name not in placed:
            assert not status.get("allocation") and not status.get("reservedFor"), status
            continue
        assert [entry["name"] for entry in status["reservedFor"]] == [name]
        results = status["allocation"]["devices"]["results"]
        assert len(results) == 2
        for result in results:
            assert result["pool"] == placed[name]  # the devices are on the pod's node
            owner = owners.setdefault((result["pool"], result["device"]), name)
            assert owner == name, f"{result['device']} on {result['pool']} given to {owner} and {name}"
