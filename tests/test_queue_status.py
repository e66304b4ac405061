"""Queue status.allocated as Volcano writes it: the sum of allocated-status task requests per queue,
in Kubernetes' canonical quantities, written only when it changed; through the status subresource
of the test API server, and on the simulated cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubeapi_server import KubeApiServer
from kubernetes_asyncio import client

from numasched.api.job import JobInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import QueueInfo
from numasched.api.task import TaskInfo, TaskStatus
from numasched.cache.cache import Cache
from numasched.cache.convert_queue import queue_from_object
from numasched.cache.kube.queue_status import KubeQueueStatusWriter
from numasched.cache.queue_status import (
    SimQueueStatusWriter,
    binary_quantity,
    changed_queue_status,
    decimal_quantity,
    queue_allocated,
    resource_list,
)
from numasched.cache.simcluster import SimCluster

GPU = "nvidia.com/gpu"


@pytest.mark.parametrize(
    ("milli", "text"),
    [(0, "0"), (1500, "1500m"), (4000, "4"), (2_000_000, "2k"), (250, "250m"), (3_000_000_000, "3M")],
)
def test_decimal_quantities_print_as_kubernetes_prints_them(milli: int, text: str) -> None:
    assert decimal_quantity(milli, -3) == text


@pytest.mark.parametrize(
    ("amount", "text"),
    [(0, "0"), (1000, "1k"), (1024, "1Ki"), (2**30, "1Gi"), (3 * 2**30, "3Gi"), (1536, "1536"), (10**9, "1G")],
)
def test_byte_quantities_print_as_kubernetes_prints_them(amount: int, text: str) -> None:
    assert binary_quantity(amount) == text


def task(uid: str, status: TaskStatus, cpu: float, gpus: int) -> TaskInfo:
    request = Resource(cpu, 2**30, {GPU: gpus * 1000.0})
    return TaskInfo(uid, "ns", uid, "j", request, request.clone(), status=status)


def job(uid: str, queue: str, tasks: list[TaskInfo]) -> JobInfo:
    result = JobInfo(uid, "ns", uid, queue=queue)
    for member in tasks:
        result.add_task(member)
    return result


def test_allocated_sums_the_allocated_statuses_only() -> None:
    jobs = [
        job("a", "q1", [task("a0", TaskStatus.RUNNING, 1000, 1), task("a1", TaskStatus.PIPELINED, 500, 1)]),
        job("b", "q1", [task("b0", TaskStatus.PENDING, 8000, 4), task("b1", TaskStatus.RELEASING, 8000, 4)]),
        job("c", "q2", [task("c0", TaskStatus.BINDING, 2000, 0)]),
        job("d", "no-such-queue", [task("d0", TaskStatus.RUNNING, 1000, 1)]),
    ]
    queues = {name: QueueInfo(name) for name in ("q1", "q2", "idle")}
    totals = queue_allocated(jobs, queues)
    assert resource_list(totals["q1"]) == {"cpu": "1500m", "memory": "2Gi", GPU: "2"}
    assert resource_list(totals["q2"]) == {"cpu": "2", "memory": "1Gi", GPU: "0"}
    assert resource_list(totals["idle"]) == {"cpu": "0", "memory": "0"}


def test_only_a_change_is_written() -> None:
    jobs = [job("a", "q1", [task("a0", TaskStatus.RUNNING, 1000, 1)]), job("c", "q2", [])]
    already, _ = queue_from_object(
        {"metadata": {"name": "q1"}, "status": {"allocated": {"cpu": "1", "memory": "1Gi", GPU: "1"}}}
    )
    queues = {"q1": already, "q2": QueueInfo("q2")}
    assert changed_queue_status(jobs, queues) == {"q2": {"cpu": "0", "memory": "0"}}


def queue_object(name: str) -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name}, "spec": {}}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def server() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(bookmark_interval=0.1) as running:
        yield running


@pytest.mark.anyio
async def test_written_through_the_status_subresource(server: KubeApiServer) -> None:
    server.add({**queue_object("q1"), "spec": {"weight": 3}})
    async with client.ApiClient(client.Configuration(host=server.url)) as api:
        writer = KubeQueueStatusWriter(api, timeout=2.0)
        assert await writer.write("q1", {"cpu": "1500m", "memory": "2Gi"})
        stored = server.get("scheduling.volcano.sh/v1beta1", "Queue", "q1")
        assert stored is not None
        assert stored["status"]["allocated"] == {"cpu": "1500m", "memory": "2Gi"}
        assert stored["spec"] == {"weight": 3}
        assert not await writer.write("missing", {"cpu": "0"})


@pytest.mark.anyio
async def test_the_simulated_cluster_keeps_it() -> None:
    cluster = SimCluster(Cache())
    cluster.add(queue_object("q1"))
    assert await SimQueueStatusWriter(cluster).write("q1", {"cpu": "2", "memory": "1Gi"})
    stored = cluster.objects["Queue"]["q1"]
    assert stored["status"]["allocated"] == {"cpu": "2", "memory": "1Gi"}
    queue, problems = queue_from_object(stored)
    assert problems == [] and queue.status_allocated == Resource(2000, 2**30)
    assert not await SimQueueStatusWriter(cluster).write("missing", {})


def test_the_implicit_default_queue_gets_no_status_write() -> None:
    # A cluster without a Queue named default: the cache stands one in, and there is no object to
    # patch (the API server would answer 404 every cycle).
    cluster = SimCluster(Cache())
    snapshot = cluster.cache.snapshot()
    assert snapshot.queues["default"].implicit
    jobs = [job("a", "default", [task("a0", TaskStatus.RUNNING, 1000, 1)])]
    assert changed_queue_status(jobs, snapshot.queues) == {}
    cluster.add(queue_object("default"))
    declared = cluster.cache.snapshot().queues
    assert not declared["default"].implicit
    assert changed_queue_status(jobs, declared) == {"default": {"cpu": "1", "memory": "1Gi", GPU: "1"}}
