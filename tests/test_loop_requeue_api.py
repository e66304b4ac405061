"""`numasched run` against the test API server: a pod that does not fit is decided once and then
sits out the cycles new pods start; deleting the pod that holds its room binds it, long before
the flush interval."""

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
from numasched.scheduler.loop_unschedulable import BackoffPolicy
from numasched.scheduler.runner import RunOptions, SchedulerRunner

pytestmark = pytest.mark.anyio

# One socket, 128 CPUs, 126 allocatable.
MACHINE = Path(__file__).parent / "fixtures" / "machines" / "epyc-1s-nps4.yaml"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def server() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(bookmark_interval=0.5) as running:
        yield running


def pod(name: str, cpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "numasched",
            "containers": [{"name": "main", "resources": {"requests": {"cpu": str(cpus), "memory": "1Gi"}}}],
        },
        "status": {"phase": "Pending"},
    }


async def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    with anyio.move_on_after(timeout):
        while not condition():
            await anyio.sleep(0.02)
        return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def test_a_waiting_pod_sits_out_new_pods_cycles_and_is_bound_when_its_room_is_freed(
    server: KubeApiServer,
) -> None:
    node, topology = machine_objects(yaml.safe_load(MACHINE.read_text()), "node-a")
    server.add(node)
    server.add(topology)
    server.add(pod("hog", 100))
    options = RunOptions(
        schedule_period=5.0,
        lease_namespace="kube-system",
        lease_timing=LeaseTiming(lease_duration=2.0, renew_deadline=1.5, retry_period=0.25),
        request_timeout=5.0,
        informer_timing=InformerTiming(request_timeout=5.0, watch_timeout=30, backoff_initial=0.05, backoff_cap=0.5),
        pod_backoff=BackoffPolicy(initial_s=0.2, max_s=0.4),
        max_unschedulable=60.0,
    )

    def node_of(name: str) -> str:
        return str((server.get("v1", "Pod", name, "default") or {}).get("spec", {}).get("nodeName") or "")

    def bound_to(name: str) -> Callable[[], bool]:
        return lambda: node_of(name) == "node-a"

    def told(name: str) -> int:
        return sum(
            1
            for event in server.list("v1", "Event")
            if event["involvedObject"].get("name") == name and event["reason"] == "FailedScheduling"
        )

    async with client.ApiClient(client.Configuration(host=server.url)) as api:
        runner = SchedulerRunner(api, options)
        with anyio.fail_after(60):
            async with anyio.create_task_group() as group:
                group.start_soon(runner.run)
                await wait_until(bound_to("hog"), 20, "the hog bound")
                server.add(pod("waiter", 100))
                await wait_until(lambda: told("waiter") == 1, 20, "the waiter told it does not fit")
                uid = runner.cache.task_uid("default", "waiter")
                assert uid is not None and runner.unschedulable.attempts(uid) == 1
                # New pods start cycles (the period is 5 s); the waiter is not decided in them.
                for index in range(3):
                    server.add(pod(f"small-{index}", 1))
                    await wait_until(bound_to(f"small-{index}"), 20, f"small-{index} bound")
                assert runner.unschedulable.attempts(uid) == 1
                assert not node_of("waiter")
                stored = server.get("v1", "Pod", "waiter", "default") or {}
                (condition,) = [c for c in stored["status"]["conditions"] if c["type"] == "PodScheduled"]
                assert condition["status"] == "False" and "Insufficient cpu" in condition["message"]
                # The hog goes: its CPUs are free, the waiter is tried again and bound.
                server.delete("v1", "Pod", "hog", "default")
                await wait_until(bound_to("waiter"), 20, "the waiter bound")
                assert told("waiter") == 1
                runner.stop()
