"""`numasched run` end to end: the real client, informers, loop, binder and leader election against
the test API server, with dropped watches and failing binds."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from kubeapi_server import KubeApiServer
from kubernetes_asyncio import client

from numasched.api.allocation import ALLOCATION_ANNOTATION
from numasched.api.idset import IdSet
from numasched.cache.kube.informer import InformerTiming
from numasched.cache.machine_shapes import machine_objects
from numasched.scheduler.leader import LeaseTiming
from numasched.scheduler.runner import EXIT_OK, RunOptions, SchedulerRunner

pytestmark = pytest.mark.anyio

MACHINES = Path(__file__).parent / "fixtures" / "machines"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
FAST_INFORMERS = InformerTiming(
    request_timeout=5.0, watch_timeout=30, backoff_initial=0.05, backoff_cap=0.5, missing_retry=1.0
)
FAST_LEASE = LeaseTiming(lease_duration=2.0, renew_deadline=1.5, retry_period=0.25)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def server() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(bookmark_interval=0.5) as running:
        yield running


def machine(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((MACHINES / f"{name}.yaml").read_text())
    return loaded


def add_nodes(server: KubeApiServer, count: int) -> list[str]:
    """Half GPU nodes (8 GPUs on 2 NUMA nodes), half CPU nodes (4 NUMA nodes)."""
    gpu_machine, cpu_machine = machine("pcie-8gpu-2numa"), machine("epyc-1s-nps4")
    names = []
    for index in range(count):
        name = f"gpu-{index}" if index % 2 == 0 else f"cpu-{index}"
        node, topology = machine_objects(gpu_machine if index % 2 == 0 else cpu_machine, name)
        server.add(node)
        server.add(topology)
        names.append(name)
    return names


def pod(
    name: str,
    *,
    cpu: str = "2",
    memory: str = "1Gi",
    gpus: int = 0,
    group: str = "",
    namespace: str = "default",
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    resources: dict[str, str] = {"cpu": cpu, "memory": memory}
    if gpus:
        resources["nvidia.com/gpu"] = str(gpus)
    spec: dict[str, Any] = {
        "schedulerName": "numasched",
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": resources, "limits": resources}}],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if group:
        metadata["annotations"] = {GROUP_ANNOTATION: group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": "Pending"}}


def pod_group(name: str, min_member: int, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member, "queue": "default"},
    }


def options(**overrides: Any) -> RunOptions:
    base: dict[str, Any] = {
        "schedule_period": 0.2,
        "lease_namespace": "kube-system",
        "lease_timing": FAST_LEASE,
        "request_timeout": 5.0,
        "informer_timing": FAST_INFORMERS,
        "bind_concurrency": 16,
    }
    base.update(overrides)
    return RunOptions(**base)


async def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    with anyio.move_on_after(timeout):
        while not condition():
            await anyio.sleep(0.05)
        return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def bound_pods(server: KubeApiServer) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in server.list("v1", "Pod") if p["spec"].get("nodeName")}


def assert_no_double_assignment(server: KubeApiServer) -> None:
    """No CPU or device id is handed to two pods on one node."""
    taken: dict[tuple[str, str, str], str] = {}
    for pod_obj in server.list("v1", "Pod"):
        node = pod_obj["spec"].get("nodeName")
        text = (pod_obj["metadata"].get("annotations") or {}).get(ALLOCATION_ANNOTATION)
        if not node or not text:
            continue
        name = pod_obj["metadata"]["name"]
        for container in json.loads(text).get("containers", {}).values():
            ids = [("cpu", str(cpu)) for cpu in IdSet.parse(container.get("cpuset", ""))]
            for resource, devices in (container.get("devices") or {}).items():
                ids.extend((resource, str(device)) for device in devices)
            for resource, item in ids:
                owner = taken.setdefault((node, resource, item), name)
                assert owner == name, f"{resource} {item} on {node} given to both {owner} and {name}"


class RunningScheduler:
    def __init__(self, runner: SchedulerRunner, api_client: client.ApiClient) -> None:
        self.runner = runner
        self.api_client = api_client
        self.scope = anyio.CancelScope()
        self.exit_code: int | None = None
        self.done = anyio.Event()

    async def run(self) -> None:
        try:
            with self.scope:
                self.exit_code = await self.runner.run()
        finally:
            self.done.set()

    def kill(self) -> None:
        """A crash: no graceful stop, no Lease release."""
        self.scope.cancel()


async def start_scheduler(group: anyio.abc.TaskGroup, server: KubeApiServer, **overrides: Any) -> RunningScheduler:
    api_client = client.ApiClient(client.Configuration(host=server.url))
    runner = SchedulerRunner(api_client, options(**overrides))
    running = RunningScheduler(runner, api_client)

    async def run_and_close() -> None:
        try:
            await running.run()
        finally:
            await api_client.close()

    group.start_soon(run_and_close)
    return running


async def test_end_to_end_under_dropped_watches_and_failing_binds(server: KubeApiServer) -> None:
    add_nodes(server, 20)
    schedulable: set[str] = set()
    unschedulable: set[str] = set()
    for index in range(120):
        name = f"svc-{index}"
        server.add(pod(name, cpu=str(1 + index % 4), memory="2Gi"))
        schedulable.add(name)
    for job in range(10):
        server.add(pod_group(f"train-{job}", 4))
        for member in range(4):
            name = f"train-{job}-{member}"
            server.add(pod(name, cpu="4", memory="8Gi", gpus=1, group=f"train-{job}"))
            schedulable.add(name)
    # A gang that can never fit: 4 members of 16 GPUs each, on nodes of 8.
    server.add(pod_group("huge", 4))
    for member in range(4):
        name = f"huge-{member}"
        server.add(pod(name, cpu="4", gpus=16, group="huge"))
        unschedulable.add(name)
    for index in range(36):
        name = f"nowhere-{index}"
        server.add(pod(name, node_selector={"zone": "mars"}))
        unschedulable.add(name)
    assert len(schedulable) + len(unschedulable) == 200

    server.fail_binds(ratio=0.1, code=500)
    async with anyio.create_task_group() as group:
        server.drop_watches_every(0.5)
        running = await start_scheduler(group, server, leader_elect=False)

        def all_done() -> bool:
            bound = bound_pods(server)
            if not schedulable <= bound.keys():
                return False
            events = {
                e["involvedObject"]["name"] for e in server.list("v1", "Event") if e["reason"] == "FailedScheduling"
            }
            return unschedulable <= events

        # Drops go on until several have happened, however fast the machine schedules.
        await wait_until(
            lambda: all_done() and server.dropped_watches > 8,
            25.0,
            "every schedulable pod bound, every other one reported, and several watches dropped",
        )
        server.drop_watches_every(0)
        running.runner.stop()
        await running.done.wait()
        group.cancel_scope.cancel()

    assert running.exit_code == 0
    assert server.dropped_watches > 8
    assert server.injected_bind_failures > 0
    bound = bound_pods(server)
    assert set(bound) == schedulable
    assert all(count == 1 for count in server.bind_counts.values()), server.bind_counts.most_common(3)
    assert_no_double_assignment(server)
    for name in unschedulable:
        stored = server.get("v1", "Pod", name, "default")
        assert stored is not None
        conditions = {c["type"]: c for c in stored["status"].get("conditions", [])}
        assert conditions["PodScheduled"]["status"] == "False"
        assert conditions["PodScheduled"]["reason"] == "Unschedulable"
        assert conditions["PodScheduled"]["message"]
    scheduled_events = [e for e in server.list("v1", "Event") if e["reason"] == "Scheduled"]
    assert {e["involvedObject"]["name"] for e in scheduled_events} == schedulable
    for name in schedulable:
        if name.startswith("train-"):
            allocation = json.loads(bound[name]["metadata"]["annotations"][ALLOCATION_ANNOTATION])
            assert allocation["containers"]["main"]["devices"]["nvidia.com/gpu"], name
    huge = server.get("scheduling.volcano.sh/v1beta1", "PodGroup", "huge", "default")
    assert huge is not None and huge.get("status", {}).get("conditions")


def lease(server: KubeApiServer) -> dict[str, Any]:
    found: dict[str, Any] | None = server.get("coordination.k8s.io/v1", "Lease", "numasched", "kube-system")
    assert found is not None
    return found


async def test_only_the_leader_binds_and_the_other_takes_over(server: KubeApiServer) -> None:
    add_nodes(server, 4)
    for index in range(20):
        server.add(pod(f"first-{index}"))
    async with anyio.create_task_group() as group:
        first = await start_scheduler(group, server, identity="first")
        await wait_until(lambda: first.runner.elector is not None and first.runner.elector.is_leader, 5, "a leader")
        second = await start_scheduler(group, server, identity="second")
        await wait_until(lambda: len(bound_pods(server)) == 20, 10, "the first wave bound")
        assert second.runner.elector is not None and not second.runner.elector.is_leader
        assert second.runner.cycles == 0
        assert lease(server)["spec"]["holderIdentity"] == "first"

        first.kill()
        killed_at = anyio.current_time()
        for index in range(20):
            server.add(pod(f"second-{index}"))
        await wait_until(lambda: second.runner.elector is not None and second.runner.elector.is_leader, 5, "takeover")
        takeover = anyio.current_time() - killed_at
        assert takeover <= FAST_LEASE.lease_duration + 3 * FAST_LEASE.retry_period
        await wait_until(lambda: len(bound_pods(server)) == 40, 10, "the second wave bound")
        assert lease(server)["spec"]["holderIdentity"] == "second"
        assert lease(server)["spec"]["leaseTransitions"] == 1

        second.runner.stop()
        await second.done.wait()
        group.cancel_scope.cancel()
    assert second.exit_code == 0
    assert first.exit_code is None  # killed, never returned
    assert lease(server)["spec"]["holderIdentity"] == ""  # released on the graceful stop
    assert all(count == 1 for count in server.bind_counts.values())
    assert len(server.bind_counts) == 40


async def test_a_leader_whose_lease_is_taken_stops_at_once_and_stands_again(server: KubeApiServer) -> None:
    add_nodes(server, 2)
    async with anyio.create_task_group() as group:
        running = await start_scheduler(group, server, identity="me")
        elector = running.runner.elector
        assert elector is not None
        await wait_until(lambda: elector.is_leader, 5, "leader")
        taken = lease(server)
        taken["spec"]["holderIdentity"] = "usurper"
        taken["spec"]["renewTime"] = "2099-01-01T00:00:00.000000Z"
        server.replace(taken)
        await wait_until(lambda: not elector.is_leader, FAST_LEASE.renew_deadline + 1, "leadership given up")
        assert running.runner.metrics.leader._value.get() == 0
        # Nobody leads now (the usurper is a record only): a new pod must wait.
        server.add(pod("while-usurped"))
        await anyio.sleep(FAST_LEASE.lease_duration / 2)
        assert "while-usurped" not in bound_pods(server)
        assert lease(server)["spec"]["holderIdentity"] == "usurper"
        # The usurper never renews: once its Lease expires this instance leads again and binds.
        await wait_until(lambda: elector.is_leader, FAST_LEASE.lease_duration + 2, "leading again")
        await wait_until(lambda: "while-usurped" in bound_pods(server), 5, "the pod bound after re-election")
        assert running.runner.terms == 2
        assert lease(server)["spec"]["holderIdentity"] == "me"
        # The usurper's record was written without a transition; taking it back is one.
        assert lease(server)["spec"]["leaseTransitions"] == 1
        running.runner.stop()
        await running.done.wait()
        group.cancel_scope.cancel()
    assert running.exit_code == EXIT_OK


async def test_restart_rebuilds_the_ledger_from_bound_pods(server: KubeApiServer) -> None:
    gpu_machine = machine("pcie-8gpu-2numa")
    for index in range(3):
        node, topology = machine_objects(gpu_machine, f"gpu-{index}")
        server.add(node)
        server.add(topology)
    for index in range(12):
        server.add(pod(f"before-{index}", cpu="4", memory="4Gi", gpus=1))
    async with anyio.create_task_group() as group:
        # Slow binds, so the crash comes with binds in flight (the server may still complete them).
        server.slow_down(0.2, methods=["POST"])
        first = await start_scheduler(group, server, leader_elect=False)
        await wait_until(lambda: len(bound_pods(server)) >= 4, 10, "part of the first wave bound")
        first.kill()
        await first.done.wait()
        server.slow_down(0)
        for index in range(12):
            server.add(pod(f"after-{index}", cpu="4", memory="4Gi", gpus=1))
        second = await start_scheduler(group, server, leader_elect=False)
        await wait_until(lambda: len(bound_pods(server)) == 24, 10, "both waves bound")
        second.runner.stop()
        await second.done.wait()
        group.cancel_scope.cancel()
    # 24 GPUs in all and 24 pods of one GPU each: any id handed out twice would show here.
    assert_no_double_assignment(server)
    gpus_used = {
        (p["spec"]["nodeName"], gpu)
        for p in bound_pods(server).values()
        for container in json.loads(p["metadata"]["annotations"][ALLOCATION_ANNOTATION])["containers"].values()
        for gpu in container["devices"]["nvidia.com/gpu"]
    }
    assert len(gpus_used) == 24


VALID_CONFIG = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
- plugins:
  - name: predicates
  - name: nodeorder
  - name: numa-aware
"""


def config_map(text: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "numasched", "namespace": "kube-system"},
        "data": {"volcano-scheduler.conf": text},
    }


async def test_a_broken_config_map_update_keeps_the_old_config(server: KubeApiServer) -> None:
    from numasched.cache.kube.resources import ConfigMapRef

    add_nodes(server, 2)
    server.add(config_map(VALID_CONFIG))
    async with anyio.create_task_group() as group:
        running = await start_scheduler(
            group, server, leader_elect=False, config_map=ConfigMapRef("kube-system", "numasched")
        )
        source = running.runner.config_source
        await wait_until(lambda: source.generation == 1, 5, "the ConfigMap's config in force")
        good = source.current()
        assert [tier_plugin.name for tier in good.tiers for tier_plugin in tier.plugins][-1] == "numa-aware"

        server.replace(config_map("actions: allocate\ntiers:\n- plugins:\n  - name: no-such-plugin\n"))

        def warned() -> bool:
            return any(e["reason"] == "InvalidConfiguration" for e in server.list("v1", "Event"))

        await wait_until(warned, 5, "a warning event on the ConfigMap")
        assert source.current() is good
        assert source.last_error is not None and "no-such-plugin" in str(source.last_error)
        event = next(e for e in server.list("v1", "Event") if e["reason"] == "InvalidConfiguration")
        assert event["involvedObject"]["kind"] == "ConfigMap" and event["type"] == "Warning"
        assert "keeping the last good one" in event["message"]
        assert running.runner.metrics.config_rejected._value.get() == 1

        server.add(pod("still-scheduling"))
        await wait_until(lambda: "still-scheduling" in bound_pods(server), 5, "a bind under the old config")
        running.runner.stop()
        await running.done.wait()
        group.cancel_scope.cancel()
