"""The numa-aware policy API and the console's access control, end to end: `numasched run` (the
real runner, informers, ConfigMap watch and metrics server) against the test API server, which
answers TokenReview and SubjectAccessReview (kubeapi_server.AccessReviews)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
import yaml
from kubeapi_server import KubeApiServer
from kubernetes_asyncio import client

from numasched.api.allocation import ALLOCATION_ANNOTATION
from numasched.cache.kube.informer import InformerTiming
from numasched.cache.kube.resources import ConfigMapRef
from numasched.cache.machine_shapes import machine_objects
from numasched.conf.defaults import DEFAULT_CONFIG_TEXT
from numasched.scheduler.console.wiring import ConsoleOptions
from numasched.scheduler.runner import RunOptions, SchedulerRunner

pytestmark = pytest.mark.anyio

MACHINES = Path(__file__).parent / "fixtures" / "machines"
NAMESPACE, NAME, KEY = "numasched-system", "numasched", "volcano-scheduler.conf"
POLICY = "/rest/scheduling/v1/numaaware"
ADMIN_TOKEN, VIEWER_TOKEN = "token-of-admin", "token-of-viewer"
FAST_INFORMERS = InformerTiming(
    request_timeout=5.0, watch_timeout=30, backoff_initial=0.05, backoff_cap=0.5, missing_retry=1.0
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def server() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(bookmark_interval=0.5) as running:
        running.add(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": NAME, "namespace": NAMESPACE},
                "data": {KEY: DEFAULT_CONFIG_TEXT},
            }
        )
        gpu_node, topology = machine_objects(yaml.safe_load((MACHINES / "pcie-8gpu-2numa.yaml").read_text()), "gpu-0")
        running.add(gpu_node)
        running.add(topology)
        reviews = running.reviews
        reviews.add_user(ADMIN_TOKEN, "alice")
        reviews.add_user(VIEWER_TOKEN, "bob")
        reviews.allow("alice", "update", "configmaps", NAMESPACE, NAME)
        reviews.allow_path("alice", "get", POLICY)
        reviews.allow_path("bob", "get", POLICY)
        reviews.allow_path("bob", "get", "/ui/")
        yield running


class Scheduler:
    def __init__(self, runner: SchedulerRunner, base: str) -> None:
        self.runner = runner
        self.base = base

    async def request(self, method: str, path: str, *, token: str | None = None, body: Any = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        data = body if isinstance(body, str | bytes) or body is None else json.dumps(body)
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
            session.request(method, self.base + path, headers=headers, data=data) as response,
        ):
            text = await response.text()
            try:
                return response.status, json.loads(text)
            except ValueError:
                return response.status, text


async def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    with anyio.move_on_after(timeout):
        while not condition():
            await anyio.sleep(0.02)
        return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def options(**overrides: Any) -> RunOptions:
    base: dict[str, Any] = {
        "config_map": ConfigMapRef(NAMESPACE, NAME, KEY),
        "schedule_period": 0.2,
        "leader_elect": False,
        "request_timeout": 2.0,
        "informer_timing": FAST_INFORMERS,
        "metrics_addr": "127.0.0.1:0",
    }
    base.update(overrides)
    return RunOptions(**base)


async def run_scheduler(server: KubeApiServer, **overrides: Any) -> AsyncIterator[Scheduler]:
    async with (
        client.ApiClient(client.Configuration(host=server.url)) as api_client,
        anyio.create_task_group() as group,
    ):
        runner = SchedulerRunner(api_client, options(**overrides))
        group.start_soon(runner.run)
        await wait_until(lambda: runner.health.port != 0 and runner._ready() is None, 10, "the runner to be ready")
        yield Scheduler(runner, f"http://127.0.0.1:{runner.health.port}")
        runner.stop()


@pytest.fixture
async def scheduler(server: KubeApiServer) -> AsyncIterator[Scheduler]:
    async for running in run_scheduler(server):
        yield running


def configmap_text(server: KubeApiServer) -> str:
    found = server.get("v1", "ConfigMap", NAME, NAMESPACE)
    assert found is not None
    return str(found["data"][KEY])


def plugin_names(text: str) -> list[str]:
    document = yaml.safe_load(text)
    return [plugin["name"] for tier in document["tiers"] for plugin in tier["plugins"]]


def guaranteed_pod(name: str) -> dict[str, Any]:
    resources = {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "numasched",
            "containers": [{"name": "main", "image": "x", "resources": {"requests": resources, "limits": resources}}],
        },
        "status": {"phase": "Pending"},
    }


def bound(server: KubeApiServer, name: str) -> dict[str, Any] | None:
    found = server.get("v1", "Pod", name, "default")
    return found if found is not None and found["spec"].get("nodeName") else None


async def test_get_reports_the_configuration_in_force(scheduler: Scheduler) -> None:
    status, document = await scheduler.request("GET", POLICY, token=VIEWER_TOKEN)
    assert status == 200, document
    assert document["status"] == "open" and document["enabled"] is True
    assert document["weight"] == 10 and document["arguments"] == {"weight": 10}
    assert document["tier"] == 1
    assert document["source"] == f"ConfigMap {NAMESPACE}/{NAME}" and document["writable"] is True


async def test_put_without_a_token_is_refused_and_changes_nothing(server: KubeApiServer, scheduler: Scheduler) -> None:
    before = configmap_text(server)
    status, document = await scheduler.request("PUT", POLICY, body={"status": "close"})
    assert status == 401, document
    assert "bearer token" in document["error"]
    assert configmap_text(server) == before
    status, document = await scheduler.request("PUT", POLICY, token="not-a-known-token", body={"status": "close"})
    assert status == 401 and "invalid bearer token" in document["error"]
    assert configmap_text(server) == before
    assert "numa-aware" in scheduler.runner.config_source.current().plugin_names()


async def test_put_by_a_user_without_the_right_is_forbidden(server: KubeApiServer, scheduler: Scheduler) -> None:
    before = configmap_text(server)
    status, document = await scheduler.request("PUT", POLICY, token=VIEWER_TOKEN, body={"status": "close"})
    assert status == 403, document
    assert "bob may not update configmaps numasched-system/numasched" in document["error"]
    assert configmap_text(server) == before
    kind, spec = server.reviews.received[-1]
    assert kind == "SubjectAccessReview"
    assert spec["user"] == "bob"
    assert spec["resourceAttributes"] == {
        "verb": "update",
        "group": "",
        "resource": "configmaps",
        "namespace": NAMESPACE,
        "name": NAME,
    }


async def test_put_close_goes_through_the_configmap_and_hot_reload_and_stops_numa_placement(
    server: KubeApiServer, scheduler: Scheduler
) -> None:
    # With numa-aware in force, a Guaranteed pod is bound with its CPUs and GPU written down.
    server.add(guaranteed_pod("before"))
    await wait_until(lambda: bound(server, "before") is not None, 10, "the first pod to bind")
    first = bound(server, "before")
    assert first is not None and ALLOCATION_ANNOTATION in first["metadata"].get("annotations", {})
    generation = scheduler.runner.config_source.generation

    status, document = await scheduler.request("PUT", POLICY, token=ADMIN_TOKEN, body={"status": "close"})
    assert status == 200, document
    assert document["status"] == "close" and document["enabled"] is False
    # Written to the ConfigMap (the text the ConfigMap watch delivers) ...
    assert "numa-aware" not in plugin_names(configmap_text(server))
    # ... and in force at once through the hot reload path, no restart.
    assert "numa-aware" not in scheduler.runner.config_source.current().plugin_names()
    assert scheduler.runner.config_source.generation == generation + 1
    # The watch then delivers the same text: nothing new, nothing refused.
    await anyio.sleep(0.3)
    assert scheduler.runner.config_source.generation == generation + 1
    assert scheduler.runner.config_feed is not None and scheduler.runner.config_feed.rejected == []

    # The next pod is placed without numa-aware: no allocation written.
    server.add(guaranteed_pod("after"))
    await wait_until(lambda: bound(server, "after") is not None, 10, "the second pod to bind")
    second = bound(server, "after")
    assert second is not None and ALLOCATION_ANNOTATION not in second["metadata"].get("annotations", {})

    status, document = await scheduler.request("GET", POLICY, token=VIEWER_TOKEN)
    assert status == 200 and document["status"] == "close"


async def test_put_open_with_arguments_sets_them(server: KubeApiServer, scheduler: Scheduler) -> None:
    status, document = await scheduler.request("PUT", POLICY, token=ADMIN_TOKEN, body={"status": "close"})
    assert status == 200, document
    status, document = await scheduler.request("PUT", POLICY, token=ADMIN_TOKEN, body={"status": "open", "weight": 4})
    assert status == 200, document
    assert document["enabled"] is True and document["weight"] == 4
    text = configmap_text(server)
    entries = [p for t in yaml.safe_load(text)["tiers"] for p in t["plugins"] if p["name"] == "numa-aware"]
    assert entries == [{"name": "numa-aware", "arguments": {"weight": 4}}]
    # Added beside the node-scoring plugins, as in the default configuration.
    assert plugin_names(text)[-5:] == ["predicates", "nodeorder", "binpack", "dra", "numa-aware"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"status": "maybe"}, "status"),
        ({"status": "close", "weight": 3}, "weight"),
        ({"status": "open", "weight": "heavy"}, "weight"),
        ({"status": "open", "colour": "red"}, "colour"),
        ("not json", "body"),
        ({"status": "open", "arguments": {"hint-providers": ["no-such-provider"]}}, "hint-providers"),
    ],
)
async def test_a_bad_put_is_a_400_naming_the_field_and_changes_nothing(
    server: KubeApiServer, scheduler: Scheduler, body: Any, field: str
) -> None:
    before = configmap_text(server)
    generation = scheduler.runner.config_source.generation
    status, document = await scheduler.request("PUT", POLICY, token=ADMIN_TOKEN, body=body)
    assert status == 400, document
    assert field in document["field"] or field in document["error"], document
    assert configmap_text(server) == before
    assert scheduler.runner.config_source.generation == generation


async def test_reads_need_a_token_unless_anonymous_reads_are_on(server: KubeApiServer, scheduler: Scheduler) -> None:
    status, _ = await scheduler.request("GET", "/ui/")
    assert status == 401
    status, page = await scheduler.request("GET", "/ui/", token=VIEWER_TOKEN)
    assert status == 200 and 'data-node="gpu-0"' in page
    status, _ = await scheduler.request("GET", "/ui/pending", token=VIEWER_TOKEN)
    assert status == 403  # bob may read /ui/ and the policy, nothing else
    async for anonymous in run_scheduler(server, console=ConsoleOptions(anonymous_reads=True)):
        status, page = await anonymous.request("GET", "/ui/")
        assert status == 200 and 'data-node="gpu-0"' in page
        status, _ = await anonymous.request("PUT", POLICY, body={"status": "close"})
        assert status == 401  # writes still need a token


async def test_an_access_review_that_does_not_answer_is_a_503(server: KubeApiServer) -> None:
    before = configmap_text(server)
    async for running in run_scheduler(server, request_timeout=0.3):
        server.slow_down(1.0, methods=["POST"])
        with anyio.fail_after(3):
            status, document = await running.request("PUT", POLICY, token=ADMIN_TOKEN, body={"status": "close"})
        assert status == 503, document
        assert "did not answer within 0.3s" in document["error"]
        server.slow_down(0.0)
    assert configmap_text(server) == before


async def test_a_file_configuration_cannot_be_changed_and_says_why(server: KubeApiServer, tmp_path: Path) -> None:
    config = tmp_path / "scheduler.conf"
    config.write_text(DEFAULT_CONFIG_TEXT)
    async for running in run_scheduler(server, config_map=None, config_file=config):
        status, document = await running.request("PUT", POLICY, token=ADMIN_TOKEN, body={"status": "close"})
        assert status == 403
        assert f"file {config}" in document["error"] and "--config-map" in document["error"]
        status, document = await running.request("GET", POLICY, token=ADMIN_TOKEN)
        assert status == 200 and document["writable"] is False and document["status"] == "open"


async def test_metrics_serve_the_numa_gauges(scheduler: Scheduler) -> None:
    status, text = await scheduler.request("GET", "/metrics")
    assert status == 200
    lines = [line for line in str(text).splitlines() if line.startswith("numasched_numa_cpus{")]
    # pcie-8gpu-2numa: two NUMA nodes of 64 CPUs each
    assert sorted(lines) == [
        'numasched_numa_cpus{node="gpu-0",numa="0"} 64.0',
        'numasched_numa_cpus{node="gpu-0",numa="1"} 64.0',
    ]
    assert 'numasched_numa_devices{node="gpu-0",numa="0",resource="nvidia.com/gpu"} 4.0' in str(text)
