"""Publishing against the test API server: create, skip unchanged, PUT conflicts, metrics, --dry-run."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import load_hack_module
from kubeapi_server import KubeApiServer
from kubernetes_asyncio import client
from kubernetes_asyncio.config import load_kube_config

from numasched.api.allocation import POD_ALLOCATIONS_ANNOTATION
from numasched.exporter.command import build_parser, discover_once, run_exporter
from numasched.exporter.metrics import ExporterMetrics
from numasched.exporter.numatopology import NUMATOPOLOGY_GROUP, NUMATOPOLOGY_PLURAL, NUMATOPOLOGY_VERSION
from numasched.exporter.publisher import ObjectPublisher

REPO = Path(__file__).resolve().parent.parent
API_VERSION = f"{NUMATOPOLOGY_GROUP}/{NUMATOPOLOGY_VERSION}"


gen_sysfs = load_hack_module("gen_sysfs")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def exporter_args(tmp_path: Path, machine: dict[str, Any], *extra: str) -> argparse.Namespace:
    root = tmp_path / "sys"
    if not root.exists():
        gen_sysfs.generate_sysfs(machine, root)
    (tmp_path / "cpu_manager_state").write_text(json.dumps({"entries": {"uid-1": {"main": "2-3,42-43"}}}))
    return build_parser().parse_args(
        [
            "--node-name",
            "node-a",
            "--sysfs",
            str(root),
            "--kubelet-config",
            str(tmp_path / "none.yaml"),
            "--pod-resources-socket",
            str(tmp_path / "none.sock"),
            "--cpu-manager-state",
            str(tmp_path / "cpu_manager_state"),
            "--device-id-format",
            "nvidia.com/gpu=index",
            "--timeout",
            "5s",
            *extra,
        ]
    )


@pytest.mark.anyio
async def test_create_skip_unchanged_and_retry_a_stale_put(tmp_path: Path) -> None:
    machine = gen_sysfs.load_machine("dgx1-v100")
    args = exporter_args(tmp_path, machine)
    _, objects = await discover_once(args, nvml=gen_sysfs.FakeNvml(machine))
    async with KubeApiServer() as server:
        config_file = tmp_path / "kubeconfig"
        config_file.write_text(yaml.safe_dump(server.kubeconfig()))
        configuration = client.Configuration()
        await load_kube_config(config_file=str(config_file), client_configuration=configuration)
        async with client.ApiClient(configuration) as api_client:
            publisher = ObjectPublisher(
                client.CustomObjectsApi(api_client),
                NUMATOPOLOGY_GROUP,
                NUMATOPOLOGY_VERSION,
                NUMATOPOLOGY_PLURAL,
                timeout=5,
            )
            assert await publisher.publish(objects.numatopology)
            stored = server.get(API_VERSION, "Numatopology", "node-a")
            assert stored is not None
            assert stored["spec"] == objects.numatopology["spec"]
            # Volcano's list (CPUs as a cpuset) in spec; the ids per container in our annotation.
            assert stored["spec"]["podAllocations"] == [
                {"uid": "uid-1", "containerAllocations": [{"name": "main", "allocations": {"cpu": "2-3,42-43"}}]}
            ]
            assert json.loads(stored["metadata"]["annotations"][POD_ALLOCATIONS_ANNOTATION]) == {
                "uid-1": {"uid": "uid-1", "containers": {"main": {"cpuset": "2-3,42-43", "numa": [0]}}}
            }
            # The held CPUs are not free: numares.cpu.allocatable lists the free ones, as Volcano's does.
            assert stored["spec"]["numares"]["cpu"] == {"allocatable": "0-1,4-41,44-79", "capacity": 80}
            # Unchanged: no request at all.
            assert not await publisher.publish(objects.numatopology)
            # Someone else writes (a label): our cached resourceVersion is now stale.
            other = json.loads(json.dumps(stored))
            other["metadata"].setdefault("labels", {})["owner"] = "someone-else"
            server.replace(other)
            changed = json.loads(json.dumps(objects.numatopology))
            changed["spec"]["numares"]["cpu"]["allocatable"] = "2-79"
            assert await publisher.publish(changed)
            final = server.get(API_VERSION, "Numatopology", "node-a")
            assert final is not None
            assert final["spec"]["numares"]["cpu"]["allocatable"] == "2-79"
            assert final["metadata"]["labels"] == {"owner": "someone-else"}
            assert publisher.writes == 2
            # A heartbeat of zero rewrites even an unchanged object.
            publisher.heartbeat = 0
            assert await publisher.publish(changed)


@pytest.mark.anyio
async def test_run_exporter_once_publishes_and_names_checkpoint_pods(tmp_path: Path) -> None:
    machine = gen_sysfs.load_machine("epyc-1s-nps4")
    async with KubeApiServer() as server:
        config_file = tmp_path / "kubeconfig"
        config_file.write_text(yaml.safe_dump(server.kubeconfig()))
        server.add(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "db-0", "namespace": "prod", "uid": "uid-1"},
                "spec": {"nodeName": "node-a", "containers": [{"name": "main", "image": "x"}]},
            }
        )
        pod = server.get("v1", "Pod", "db-0", "prod")
        assert pod is not None
        (tmp_path / "cpu_manager_state").parent.mkdir(exist_ok=True)
        args = exporter_args(tmp_path, machine, "--kubeconfig", str(config_file), "--once", "--node-resource-topology")
        (tmp_path / "cpu_manager_state").write_text(json.dumps({"entries": {pod["metadata"]["uid"]: {"main": "2-3"}}}))
        assert await run_exporter(args, nvml=gen_sysfs.FakeNvml(machine)) == 0
        stored = server.get(API_VERSION, "Numatopology", "node-a")
        assert stored is not None
        assert stored["spec"]["podAllocations"] == [
            {
                "uid": pod["metadata"]["uid"],
                "name": "db-0",
                "namespace": "prod",
                "containerAllocations": [{"name": "main", "allocations": {"cpu": "2-3"}}],
            }
        ]
        assert list(json.loads(stored["metadata"]["annotations"][POD_ALLOCATIONS_ANNOTATION])) == ["prod/db-0"]
        nrt = server.get("topology.node.k8s.io/v1alpha2", "NodeResourceTopology", "node-a")
        assert nrt is not None
        zone0 = nrt["zones"][0]
        assert zone0["name"] == "node-0"
        assert {r["name"]: r["available"] for r in zone0["resources"]} == {"cpu": "30", "memory": str(128 << 30)}
        assert zone0["costs"] == [{"name": f"node-{n}", "value": d} for n, d in enumerate([10, 12, 12, 12])]


@pytest.mark.anyio
async def test_dry_run_prints_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    machine = gen_sysfs.load_machine("dgx1-v100")
    args = exporter_args(tmp_path, machine, "--dry-run", "--once")
    assert await run_exporter(args, nvml=gen_sysfs.FakeNvml(machine)) == 0
    out = capsys.readouterr().out
    # structlog's default logger also prints to stdout; the CLI sends logs to stderr.
    printed = yaml.safe_load(out[out.index("apiVersion:") :])
    assert printed["kind"] == "Numatopology" and printed["metadata"]["name"] == "node-a"
    args.node_name = ""
    assert await run_exporter(args) == 2


@pytest.mark.anyio
async def test_metrics(tmp_path: Path) -> None:
    machine = gen_sysfs.load_machine("dgx-a100")
    args = exporter_args(tmp_path, machine)
    report, _ = await discover_once(args, nvml=gen_sysfs.FakeNvml(machine, failing=[5]))
    metrics = ExporterMetrics()
    metrics.update(report)
    node = {"node": "node-a", "numa": "0"}
    assert metrics.sample("numa_node_cpus_count", node) == 32
    assert metrics.sample("numa_node_cpus_allocatable", node) == 32
    assert metrics.sample("numa_node_cpus_allocated", node) == 2
    assert metrics.sample("numa_node_cpus_allocated", {"node": "node-a", "numa": "2"}) == 2
    assert metrics.sample("numa_node_memory_bytes", node) == 128 << 30
    assert metrics.sample("device_numa_node", {"resource": "nvidia.com/gpu", "device": "0"}) == 3
    assert metrics.sample("device_healthy", {"resource": "nvidia.com/gpu", "device": "5"}) == 0
    assert metrics.sample("device_numa_node", {"resource": "nvidia.com/gpu", "device": "5"}) == -1


@pytest.mark.anyio
async def test_unreachable_api_server_is_a_publish_error(tmp_path: Path) -> None:
    from numasched.exporter.publisher import PublishError

    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:9"
    async with client.ApiClient(configuration) as api_client:
        publisher = ObjectPublisher(
            client.CustomObjectsApi(api_client),
            NUMATOPOLOGY_GROUP,
            NUMATOPOLOGY_VERSION,
            NUMATOPOLOGY_PLURAL,
            timeout=2,
        )
        with pytest.raises(PublishError, match="numatopologies/node-a: GET failed"):
            await publisher.publish({"metadata": {"name": "node-a"}, "spec": {}})
