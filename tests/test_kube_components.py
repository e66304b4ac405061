"""Informers, binder, status reporter, health and the run command, each against the test API server."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from kubeapi_server import KubeApiServer
from kubernetes_asyncio import client

from numasched.api.job import JobInfo
from numasched.api.resource import Resource
from numasched.api.task import TaskInfo
from numasched.cache.binder import BindRequest, BindStatus
from numasched.cache.events import EventType, ObjectEvent
from numasched.cache.kube.binder import KubeBinder, KubeStatusReporter
from numasched.cache.kube.informer import Informer, InformerTiming
from numasched.cache.kube.resources import ConfigMapRef
from numasched.cli_durations import parse_duration
from numasched.exporter.command import build_parser as exporter_parser
from numasched.scheduler.health import HealthServer, parse_address
from numasched.scheduler.metrics import SchedulerMetrics
from numasched.scheduler.runner import add_run_arguments

pytestmark = pytest.mark.anyio
FAST = InformerTiming(request_timeout=2.0, watch_timeout=30, backoff_initial=0.02, backoff_cap=0.2, missing_retry=0.2)


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


class RecordingSink:
    """Keeps what a Cache would: the current objects by name, and every call made."""

    def __init__(self) -> None:
        self.objects: dict[str, Mapping[str, Any]] = {}
        self.replaces = 0
        self.events: list[ObjectEvent] = []

    def apply(self, event: ObjectEvent) -> None:
        self.events.append(event)
        name = event.obj["metadata"]["name"]
        if event.type is EventType.DELETED:
            self.objects.pop(name, None)
        else:
            self.objects[name] = event.obj

    def replace(self, kind: str, objects: list[Mapping[str, Any]]) -> None:
        self.replaces += 1
        self.objects = {obj["metadata"]["name"]: obj for obj in objects}


def node(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "status": {}}


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulerName": "numasched", "containers": [{"name": "c"}]},
    }


def task(name: str, uid: str = "") -> TaskInfo:
    return TaskInfo(
        uid=uid or f"uid-{name}", namespace="default", name=name, job_id=name, resreq=Resource(), init_resreq=Resource()
    )


async def eventually(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.02)


async def test_informer_follows_changes_through_drops_and_compaction(
    server: KubeApiServer, api: client.ApiClient
) -> None:
    server.add(node("a"))
    sink = RecordingSink()
    informer = Informer("Node", "v1", client.CoreV1Api(api).list_node, sink, timing=FAST)
    async with anyio.create_task_group() as group:
        group.start_soon(informer.run)
        await informer.synced.wait()
        assert set(sink.objects) == {"a"} and sink.objects["a"]["kind"] == "Node"
        server.add(node("b"))
        await eventually(lambda: "b" in sink.objects)
        assert sink.replaces == 1

        server.drop_watches()
        server.add(node("c"))
        await eventually(lambda: "c" in sink.objects)
        assert sink.replaces == 1  # resumed from its version: no re-list

        await eventually(lambda: bool(server.watches))
        server.drop_watches()
        server.delete("v1", "Node", "a")
        server.compact()  # the resume version is gone: 410, then a fresh list
        await eventually(lambda: sink.replaces == 2 and set(sink.objects) == {"b", "c"})
        group.cancel_scope.cancel()


async def test_informer_skips_a_missing_crd_and_picks_it_up_later(server: KubeApiServer, api: client.ApiClient) -> None:
    server.uninstall_group("nodeinfo.volcano.sh")
    sink = RecordingSink()
    custom = client.CustomObjectsApi(api)

    async def list_topologies(**kwargs: Any) -> Any:
        return await custom.list_cluster_custom_object("nodeinfo.volcano.sh", "v1alpha1", "numatopologies", **kwargs)

    informer = Informer(
        "Numatopology", "nodeinfo.volcano.sh/v1alpha1", list_topologies, sink, optional=True, timing=FAST
    )
    async with anyio.create_task_group() as group:
        group.start_soon(informer.run)
        await informer.synced.wait()
        assert not informer.installed and sink.objects == {}
        server.install_group("nodeinfo.volcano.sh")
        server.add({"apiVersion": "nodeinfo.volcano.sh/v1alpha1", "kind": "Numatopology", "metadata": {"name": "n"}})
        await eventually(lambda: "n" in sink.objects)
        assert informer.installed
        group.cancel_scope.cancel()


async def test_informer_backs_off_on_server_errors(server: KubeApiServer, api: client.ApiClient) -> None:
    sink = RecordingSink()
    calls = 0
    core = client.CoreV1Api(api)

    async def flaky_list(**kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls <= 3:
            raise aiohttp.ClientConnectionError("connection refused")
        return await core.list_node(**kwargs)

    informer = Informer("Node", "v1", flaky_list, sink, timing=FAST)
    async with anyio.create_task_group() as group:
        group.start_soon(informer.run)
        with anyio.fail_after(3):
            await informer.synced.wait()
        group.cancel_scope.cancel()
    assert calls >= 4


async def test_binder_reads_the_status_code(server: KubeApiServer, api: client.ApiClient) -> None:
    created = server.add(pod("p"))
    binder = KubeBinder(api, timeout=1.0)
    request = BindRequest(task("p", created["metadata"]["uid"]), "node-1", {"numasched.io/allocation": "{}"})

    server.fail_binds(1, code=500, after_commit=True)  # applied, but the answer says 500
    lost = await binder.bind(request)
    assert lost.status is BindStatus.FAILED and "500" in lost.message
    again = await binder.bind(request)
    assert again.status is BindStatus.CONFLICT
    assert server.bind_counts[("default", "p")] == 1

    server.add(pod("q"))
    server.fail_binds(1, code=503)
    assert (await binder.bind(BindRequest(task("q"), "node-1"))).status is BindStatus.FAILED
    assert (await binder.bind(BindRequest(task("q"), "node-1"))).status is BindStatus.BOUND
    stored = server.get("v1", "Pod", "p", "default")
    assert stored is not None and stored["metadata"]["annotations"]["numasched.io/allocation"] == "{}"

    assert (await binder.bind(BindRequest(task("missing"), "node-1"))).status is BindStatus.GONE
    server.add(pod("slow"))
    server.slow_down(2.0, methods=["POST"])
    timed_out = await binder.bind(BindRequest(task("slow"), "node-1"))
    assert timed_out.status is BindStatus.FAILED


async def test_reporter_writes_condition_and_events_without_repeating(
    server: KubeApiServer, api: client.ApiClient
) -> None:
    server.add(pod("p"))
    now = [0.0]
    reporter = KubeStatusReporter(api, repeat_interval=30.0, clock=lambda: now[0])
    for _ in range(3):
        await reporter.unschedulable(task("p"), "0/3 nodes are available: 3 Insufficient cpu.")
    failed = [e for e in server.list("v1", "Event") if e["reason"] == "FailedScheduling"]
    assert len(failed) == 1 and failed[0]["type"] == "Warning"
    assert failed[0]["involvedObject"]["name"] == "p"
    stored = server.get("v1", "Pod", "p", "default")
    assert stored is not None
    condition = stored["status"]["conditions"][0]
    assert (condition["type"], condition["status"], condition["reason"]) == ("PodScheduled", "False", "Unschedulable")
    await reporter.unschedulable(task("p"), "a different reason")
    now[0] = 31.0
    await reporter.unschedulable(task("p"), "a different reason")
    assert len([e for e in server.list("v1", "Event") if e["reason"] == "FailedScheduling"]) == 3

    await reporter.scheduled(task("p"), "node-1")
    scheduled = [e for e in server.list("v1", "Event") if e["reason"] == "Scheduled"]
    assert scheduled[0]["message"] == "Successfully assigned default/p to node-1"

    server.add(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "default"},
        }
    )
    job = JobInfo(uid="default/g", namespace="default", name="g", min_available=4, has_pod_group=True)
    await reporter.job_status(job, "Pending", "2/4 tasks in gang unschedulable")
    group = server.get("scheduling.volcano.sh/v1beta1", "PodGroup", "g", "default")
    assert group is not None and group["status"]["phase"] == "Pending"
    assert group["status"]["conditions"][0]["type"] == "Unschedulable"

    server.uninstall_group("")  # the core API answers 404: the failure is logged and counted, never raised
    before = reporter.write_errors
    await reporter.scheduled(task("p"), "node-2")
    assert reporter.write_errors == before + 1


async def test_health_and_metrics_endpoints() -> None:
    metrics = SchedulerMetrics()
    problem: list[str | None] = ["waiting for the first list of: Pod"]
    health = HealthServer(metrics, live=lambda: None, ready=lambda: problem[0])
    metrics.schedule_attempts.labels(result="scheduled").inc(3)
    async with anyio.create_task_group() as group:
        port = await group.start(health.serve, "127.0.0.1:0")
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/healthz") as response:
                assert response.status == 200
            async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                assert response.status == 503 and "Pod" in await response.text()
            problem[0] = None
            async with session.get(f"http://127.0.0.1:{port}/readyz") as response:
                assert response.status == 200
            async with session.get(f"http://127.0.0.1:{port}/metrics") as response:
                text = await response.text()
        group.cancel_scope.cancel()
    assert 'numasched_schedule_attempts_total{result="scheduled"} 3.0' in text
    assert "numasched_e2e_scheduling_duration_seconds_bucket" in text


def test_argument_parsing() -> None:
    assert parse_duration("500ms") == 0.5 and parse_duration("2m") == 120.0 and parse_duration("1.5") == 1.5
    with pytest.raises(argparse.ArgumentTypeError):
        parse_duration("soon")
    for bad in ("0s", "-1s", "inf", "nan"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_duration(bad)
    # One parser for every command: the exporter, too, refuses a period that would spin.
    with pytest.raises(SystemExit):
        exporter_parser().parse_args(["--period", "0s"])
    assert exporter_parser().parse_args(["--period", "250ms"]).period == 0.25
    assert ConfigMapRef.parse("kube-system/numasched") == ConfigMapRef("kube-system", "numasched")
    assert ConfigMapRef.parse("ns/cm:my.conf").key == "my.conf"
    with pytest.raises(ValueError, match="NAMESPACE/NAME"):
        ConfigMapRef.parse("numasched")
    assert parse_address(":10259") == ("0.0.0.0", 10259)
    assert parse_address("127.0.0.1:8080") == ("127.0.0.1", 8080)
    with pytest.raises(ValueError):
        parse_address("host:http")
    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    args = parser.parse_args(["--no-leader-elect", "--schedule-period", "250ms", "--config-map", "ns/cm"])
    assert args.leader_elect is False and args.schedule_period == 0.25 and args.config_map.name == "cm"


async def test_run_command_exits_cleanly_on_sigterm(server: KubeApiServer, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(server.kubeconfig()))
    server.add(pod("p"))
    server.add(node("n"))
    command = [
        sys.executable, "-c", "import sys; from numasched.scheduler.runner import main; sys.exit(main())",
        "--kubeconfig", str(kubeconfig), "--schedule-period", "100ms", "--lease-namespace", "kube-system",
        "--lease-duration", "2s", "--renew-deadline", "1500ms", "--retry-period", "250ms",
        "--metrics-addr", "127.0.0.1:0", "--identity", "proc",
    ]  # fmt: skip
    log_path = tmp_path / "scheduler.log"
    with log_path.open("wb") as log_file:
        process = await anyio.open_process(command, stderr=log_file, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        await eventually(
            lambda: (
                (server.get("coordination.k8s.io/v1", "Lease", "numasched", "kube-system") or {})
                .get("spec", {})
                .get("holderIdentity")
                == "proc"
            ),
            timeout=15.0,
        )
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(10):
            code = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
    lines = log_path.read_text().splitlines()
    assert code == 0, lines[-5:]
    assert any(json.loads(line).get("event") == "released the lease" for line in lines if line.startswith("{"))
    released = server.get("coordination.k8s.io/v1", "Lease", "numasched", "kube-system")
    assert released is not None and released["spec"]["holderIdentity"] == ""
