"""PodResources over a real gRPC unix socket (a fake kubelet), and the checkpoint fallback."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import structlog

from numasched.api.idset import IdSet
from numasched.exporter.command import build_parser, read_usage
from numasched.exporter.podresources.client import PodResourcesUnavailable, read_pod_resources
from numasched.exporter.usage import parse_cpu_manager_state, read_cpu_manager_state, with_pod_names

api_pb2: Any = importlib.import_module("numasched.exporter.podresources.v1.api_pb2")
api_pb2_grpc: Any = importlib.import_module("numasched.exporter.podresources.v1.api_pb2_grpc")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def topology(*nodes: int) -> Any:
    return api_pb2.TopologyInfo(nodes=[api_pb2.NUMANode(ID=node) for node in nodes])


class FakeKubelet(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    def __init__(self, *, allocatable: bool = True, delay: float = 0.0) -> None:
        self.allocatable = allocatable
        self.delay = delay

    async def List(self, request: Any, context: Any) -> Any:
        await asyncio.sleep(self.delay)
        return api_pb2.ListPodResourcesResponse(
            pod_resources=[
                api_pb2.PodResources(
                    name="trainer-0",
                    namespace="ml",
                    containers=[
                        api_pb2.ContainerResources(
                            name="main",
                            cpu_ids=[2, 3, 42, 43],
                            devices=[
                                api_pb2.ContainerDevices(
                                    resource_name="nvidia.com/gpu", device_ids=["0", "1"], topology=topology(0)
                                )
                            ],
                            memory=[
                                api_pb2.ContainerMemory(memory_type="memory", size=3 << 30, topology=topology(0, 1)),
                                api_pb2.ContainerMemory(
                                    memory_type="hugepages-1Gi", size=2 << 30, topology=topology(0)
                                ),
                            ],
                        ),
                        api_pb2.ContainerResources(name="sidecar"),
                    ],
                ),
                api_pb2.PodResources(
                    name="web", namespace="default", containers=[api_pb2.ContainerResources(name="c")]
                ),
            ]
        )

    async def GetAllocatableResources(self, request: Any, context: Any) -> Any:
        if not self.allocatable:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "feature gate off")
        return api_pb2.AllocatableResourcesResponse(
            cpu_ids=list(range(2, 40)),
            devices=[api_pb2.ContainerDevices(resource_name="nvidia.com/gpu", device_ids=["0", "1", "2"])],
            memory=[api_pb2.ContainerMemory(memory_type="memory", size=100, topology=topology(1))],
        )


async def serve(socket: Path, kubelet: FakeKubelet) -> AsyncIterator[Path]:
    server = grpc.aio.server()
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(kubelet, server)
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    try:
        yield socket
    finally:
        await server.stop(None)


@pytest.mark.anyio
async def test_list_and_allocatable(tmp_path: Path) -> None:
    async for socket in serve(tmp_path / "k.sock", FakeKubelet()):
        usage = await read_pod_resources(socket, timeout=5)
    assert usage.source == "podresources"
    assert [pod.key for pod in usage.pods] == ["ml/trainer-0"]
    container = usage.pods[0].containers[0]
    assert container.name == "main"
    assert container.cpuset == IdSet([2, 3, 42, 43])
    assert container.devices == {"nvidia.com/gpu": ("0", "1")}
    assert container.memory == {"memory": {0: 3 << 29, 1: 3 << 29}, "hugepages-1Gi": {0: 2 << 30}}
    assert usage.allocatable_cpus == IdSet(range(2, 40))
    assert usage.allocatable_devices == {"nvidia.com/gpu": ("0", "1", "2")}
    assert usage.allocatable_memory == {"memory": {1: 100}}
    assert usage.used_devices("nvidia.com/gpu") == {"0", "1"}


@pytest.mark.anyio
async def test_old_kubelet_without_allocatable(tmp_path: Path) -> None:
    async for socket in serve(tmp_path / "k.sock", FakeKubelet(allocatable=False)):
        with structlog.testing.capture_logs() as logs:
            usage = await read_pod_resources(socket, timeout=5)
    assert usage.allocatable_cpus is None and len(usage.pods) == 1
    assert any(entry.get("code") == "UNIMPLEMENTED" for entry in logs)


@pytest.mark.anyio
async def test_slow_kubelet_times_out(tmp_path: Path) -> None:
    async for socket in serve(tmp_path / "k.sock", FakeKubelet(delay=2)):
        with pytest.raises(PodResourcesUnavailable, match="DEADLINE_EXCEEDED"):
            await read_pod_resources(socket, timeout=0.2)


def args_for(tmp_path: Path, *extra: str) -> argparse.Namespace:
    return build_parser().parse_args(
        [
            "--node-name",
            "n1",
            "--pod-resources-socket",
            str(tmp_path / "absent.sock"),
            "--cpu-manager-state",
            str(tmp_path / "cpu_manager_state"),
            *extra,
        ]
    )


@pytest.mark.anyio
async def test_checkpoint_fallback_when_the_socket_is_absent(tmp_path: Path) -> None:
    (tmp_path / "cpu_manager_state").write_text(
        json.dumps(
            {
                "policyName": "static",
                "defaultCpuSet": "0-1,6-79",
                "entries": {"uid-a": {"main": "2-3", "init": ""}, "uid-b": {"app": "4-5"}},
                "checksum": 1,
            }
        )
    )
    with structlog.testing.capture_logs() as logs:
        usage = await read_usage(args_for(tmp_path))
    assert usage.source == "checkpoint"
    assert [(pod.uid, pod.key) for pod in usage.pods] == [("uid-a", "uid-a"), ("uid-b", "uid-b")]
    assert usage.used_cpus() == IdSet([2, 3, 4, 5])
    assert any("falling back to the kubelet's checkpoints" in entry["event"] for entry in logs)
    named = with_pod_names(usage, {"uid-a": ("ml", "trainer-0")})
    assert [pod.key for pod in named.pods] == ["ml/trainer-0", "uid-b"]


def test_bad_checkpoints_degrade(tmp_path: Path) -> None:
    bad = tmp_path / "state"
    bad.write_text("{not json")
    assert read_cpu_manager_state(bad).pods == ()
    with structlog.testing.capture_logs() as logs:
        usage = parse_cpu_manager_state({"entries": {"u1": {"c": "0-x", "d": "7"}, "u2": "nope"}}, "state")
    assert [(pod.uid, [c.name for c in pod.containers]) for pod in usage.pods] == [("u1", ["d"])]
    assert len(logs) == 2
    assert read_cpu_manager_state(tmp_path / "absent").source == "none"
