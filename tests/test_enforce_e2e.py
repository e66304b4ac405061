"""`numasched agent --once` end to end: the test API server, a generated sysfs, a fake kubelet
PodResources socket and a fake cgroup v2 tree. The agent pins the Burstable pod numasched decided,
sees that the kubelet gave the Guaranteed pod other CPUs than decided, sends an event about it,
and publishes what the node did (not what was predicted) in podAllocations."""

from __future__ import annotations

import argparse
import importlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import grpc
import pytest
import yaml
from conftest import load_hack_module
from kubeapi_server import KubeApiServer
from kubernetes_asyncio import client
from kubernetes_asyncio.config import load_kube_config
from prometheus_client import CollectorRegistry

from numasched.api.idset import IdSet
from numasched.cache.kube.informer import Informer, InformerTiming
from numasched.cli import build_parser
from numasched.cli_exit_codes import EXIT_INPUT
from numasched.exporter.enforce_agent import EnforceMetrics, Enforcer
from numasched.exporter.enforce_command import NodeFacts, pin_until_next_period, run_agent

api_pb2: Any = importlib.import_module("numasched.exporter.podresources.v1.api_pb2")
api_pb2_grpc: Any = importlib.import_module("numasched.exporter.podresources.v1.api_pb2_grpc")
gen_sysfs = load_hack_module("gen_sysfs")

NODE = "node-a"
WEB_UID = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
DB_UID = "2c5f39cb-3fb2-22e3-994f-1127e4ddb538"
WEB_ID = "a" * 64
DB_ID = "b" * 64


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class FakeKubelet(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    """The kubelet's static CPU manager gave db CPUs 8-9 (numasched decided 2-3)."""

    async def List(self, request: Any, context: Any) -> Any:
        return api_pb2.ListPodResourcesResponse(
            pod_resources=[
                api_pb2.PodResources(
                    name="db", namespace="prod", containers=[api_pb2.ContainerResources(name="main", cpu_ids=[8, 9])]
                ),
                api_pb2.PodResources(
                    name="web", namespace="prod", containers=[api_pb2.ContainerResources(name="main")]
                ),
            ]
        )

    async def GetAllocatableResources(self, request: Any, context: Any) -> Any:
        return api_pb2.AllocatableResourcesResponse(cpu_ids=list(range(2, 128)))


async def serve(socket: Path) -> AsyncIterator[None]:
    server = grpc.aio.server()
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(FakeKubelet(), server)
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    try:
        yield
    finally:
        await server.stop(None)


def pod(name: str, uid: str, container_id: str, qos: str, cpu: str, decided: dict[str, Any]) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": cpu}}
    if qos == "Guaranteed":
        resources = {"requests": {"cpu": cpu, "memory": "1Gi"}, "limits": {"cpu": cpu, "memory": "1Gi"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "prod",
            "uid": uid,
            "annotations": {"numasched.io/allocation": json.dumps({"containers": {"main": decided}})},
        },
        "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "x", "resources": resources}]},
        "status": {
            "qosClass": qos,
            "containerStatuses": [
                {"name": "main", "containerID": f"containerd://{container_id}", "state": {"running": {}}}
            ],
        },
    }


def cgroup(root: Path, relative: str) -> Path:
    directory = root / relative
    directory.mkdir(parents=True)
    (directory / "cpuset.cpus").write_text("")  # v2: empty means the parent's CPUs
    (directory / "cpuset.mems").write_text("")
    return directory


def agent_args(tmp_path: Path, config: Path, cgroup_root: Path) -> argparse.Namespace:
    machine = gen_sysfs.load_machine("epyc-1s-nps4")
    gen_sysfs.generate_sysfs(machine, tmp_path / "sys")
    kubelet_config = tmp_path / "kubelet.yaml"
    kubelet_config.write_text(
        yaml.safe_dump(
            {
                "kind": "KubeletConfiguration",
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "cpuManagerPolicy": "static",
                "reservedSystemCPUs": "0-1",
            }
        )
    )
    argv = [
        "agent",
        "--node-name",
        NODE,
        "--sysfs",
        str(tmp_path / "sys"),
        "--kubelet-config",
        str(kubelet_config),
        "--pod-resources-socket",
        str(tmp_path / "kubelet.sock"),
        "--cgroup-root",
        str(cgroup_root),
        "--kubeconfig",
        str(config),
        "--timeout",
        "5s",
        "--once",
    ]
    return build_parser(argv).parse_args(argv)


@pytest.mark.anyio
async def test_agent_pins_reports_and_publishes_what_the_node_did(tmp_path: Path) -> None:
    cgroup_root = tmp_path / "cgroup"
    cgroup_root.mkdir()
    (cgroup_root / "cgroup.controllers").write_text("cpuset cpu memory\n")
    web = cgroup(
        cgroup_root,
        "kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice/"
        f"cri-containerd-{WEB_ID}.scope",
    )
    async with KubeApiServer() as server:
        config = tmp_path / "kubeconfig"
        config.write_text(yaml.safe_dump(server.kubeconfig()))
        server.add(pod("web", WEB_UID, WEB_ID, "Burstable", "3500m", {"cpuset": "16-19", "numa": [1]}))
        server.add(pod("db", DB_UID, DB_ID, "Guaranteed", "2", {"cpuset": "2-3", "numa": [0]}))
        async for _ in serve(tmp_path / "kubelet.sock"):
            args = agent_args(tmp_path, config, cgroup_root)
            assert await run_agent(args, nvml=gen_sysfs.FakeNvml(gen_sysfs.load_machine("epyc-1s-nps4"))) == 0
        assert (web / "cpuset.cpus").read_text() == "16-19"
        assert (web / "cpuset.mems").read_text() == "1"
        events = server.list("v1", "Event")
        assert [(e["involvedObject"]["name"], e["reason"], e["type"]) for e in events] == [
            ("db", "NumaschedDecisionMismatch", "Warning")
        ]
        assert "cpu decided 2-3, the node has 8-9" in events[0]["message"]
        stored = server.get("nodeinfo.volcano.sh/v1alpha1", "Numatopology", NODE)
        assert stored is not None
        allocations = {
            entry["name"]: entry["containerAllocations"][0]["allocations"] for entry in stored["spec"]["podAllocations"]
        }
        assert allocations == {"db": {"cpu": "8-9"}, "web": {"cpu": "16-19"}}


@pytest.mark.anyio
async def test_the_agent_refuses_a_missing_cgroup_mount(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = agent_args(tmp_path, tmp_path / "no-kubeconfig", tmp_path / "nowhere")
    assert await run_agent(args) == EXIT_INPUT
    assert "--cgroup-root" in capsys.readouterr().err


@pytest.mark.anyio
async def test_a_container_start_is_pinned_before_the_period_ends(tmp_path: Path) -> None:
    """The watch, not the period: a pod whose container starts is pinned within a fraction of a
    second while the agent waits out a 60 s period."""
    cgroup_root = tmp_path / "cgroup"
    cgroup_root.mkdir()
    (cgroup_root / "cgroup.controllers").write_text("cpuset\n")
    waiting = pod("web", WEB_UID, WEB_ID, "Burstable", "2", {"cpuset": "4-5", "numa": [0]})
    waiting["status"]["containerStatuses"] = [{"name": "main", "state": {"waiting": {}}}]
    async with KubeApiServer() as server:
        config = tmp_path / "kubeconfig"
        config.write_text(yaml.safe_dump(server.kubeconfig()))
        configuration = client.Configuration()
        await load_kube_config(config_file=str(config), client_configuration=configuration)
        server.add(waiting)
        async with client.ApiClient(configuration) as api_client:
            enforcer = Enforcer(NODE, cgroup_root, EnforceMetrics(CollectorRegistry()))
            informer = Informer(
                "Pod",
                "v1",
                client.CoreV1Api(api_client).list_pod_for_all_namespaces,
                enforcer,
                field_selector=f"spec.nodeName={NODE}",
                timing=InformerTiming(request_timeout=5.0),
            )
            facts = NodeFacts(static_cpu_manager=False, numa_of_cpu={4: 0, 5: 0}, cpus=IdSet(range(8)))
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(informer.run)
                with anyio.fail_after(5):
                    await informer.synced.wait()
                tasks.start_soon(pin_until_next_period, enforcer, facts, 60.0)
                # The runtime creates the container's cgroup, then the kubelet reports it running.
                web = cgroup(
                    cgroup_root,
                    "kubepods.slice/kubepods-burstable.slice/"
                    "kubepods-burstable-pod1b4e28ba_2fa1_11d2_883f_0016d3cca427.slice/"
                    f"cri-containerd-{WEB_ID}.scope",
                )
                running = pod("web", WEB_UID, WEB_ID, "Burstable", "2", {"cpuset": "4-5", "numa": [0]})
                core: Any = client.CoreV1Api(api_client)  # raw mode: a dict body, a raw response
                response = await core.replace_namespaced_pod_status("web", "prod", running, _preload_content=False)
                assert response.status == 200
                response.release()
                with anyio.fail_after(5):
                    while (web / "cpuset.cpus").read_text() != "4-5":
                        await anyio.sleep(0.02)
                tasks.cancel_scope.cancel()
        assert (web / "cpuset.mems").read_text() == "0"
