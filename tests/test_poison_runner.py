"""`numasched run` (SchedulerRunner, leader election on) tells a poison pod why and binds the rest."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from kubeapi_server import KubeApiServer
from kubernetes_asyncio import client

from numasched.cache.kube.informer import InformerTiming
from numasched.cache.machine_shapes import machine_objects
from numasched.scheduler.leader import LeaseTiming
from numasched.scheduler.runner import RunOptions, SchedulerRunner

pytestmark = pytest.mark.anyio

MACHINE = Path(__file__).parent / "fixtures" / "machines" / "epyc-1s-nps4.yaml"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def server() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(bookmark_interval=0.5) as running:
        yield running


def pod(name: str, cpu: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "numasched",
            "containers": [{"name": "main", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
        },
        "status": {"phase": "Pending"},
    }


async def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    with anyio.move_on_after(timeout):
        while not condition():
            await anyio.sleep(0.05)
        return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def test_the_runner_tells_a_poison_pod_and_binds_the_others(server: KubeApiServer) -> None:
    node, topology = machine_objects(yaml.safe_load(MACHINE.read_text()), "node-a")
    server.add(node)
    server.add(topology)
    server.add(pod("good", "1"))
    server.add(pod("poison", "1e400"))
    options = RunOptions(
        schedule_period=0.2,
        lease_namespace="kube-system",
        lease_timing=LeaseTiming(lease_duration=2.0, renew_deadline=1.5, retry_period=0.25),
        request_timeout=5.0,
        informer_timing=InformerTiming(request_timeout=5.0, watch_timeout=30, backoff_initial=0.05, backoff_cap=0.5),
    )

    def bound(name: str) -> bool:
        return bool((server.get("v1", "Pod", name, "default") or {}).get("spec", {}).get("nodeName"))

    def told(name: str) -> list[dict[str, Any]]:
        return [
            event
            for event in server.list("v1", "Event")
            if event["involvedObject"].get("name") == name and event["reason"] == "FailedScheduling"
        ]

    async with client.ApiClient(client.Configuration(host=server.url)) as api:
        runner = SchedulerRunner(api, options)
        async with anyio.create_task_group() as group:
            group.start_soon(runner.run)
            await wait_until(lambda: bound("good"), 20, "the good pod bound")
            await wait_until(lambda: bool(told("poison")), 20, "the FailedScheduling event on the poison pod")
            stored = server.get("v1", "Pod", "poison", "default") or {}
            (condition,) = [c for c in stored["status"]["conditions"] if c["type"] == "PodScheduled"]
            assert condition["status"] == "False" and condition["reason"] == "Unschedulable"
            assert "spec.containers[0].resources.requests: resource cpu" in condition["message"]
            assert not bound("poison")
            runner.stop()
