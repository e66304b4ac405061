"""Leader election under a slow API server: with 1-2 s added to every request for a minute, the
leader (kube-scheduler's timing: lease 15 s, renew deadline 10 s, retry 2 s) keeps the Lease and
keeps binding; a standby never leads meanwhile, and takes over once the leader is stopped."""

from __future__ import annotations

import random
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
from numasched.scheduler.leader import DEFAULT_LEASE_TIMING, LeaderElector, LeaseTiming
from numasched.scheduler.runner import EXIT_OK, RunOptions, SchedulerRunner

pytestmark = pytest.mark.anyio

LATENCY_S = (1.0, 2.0)
SLOW_FOR_S = 60.0


MACHINE = Path(__file__).parent / "fixtures" / "machines" / "epyc-1s-nps4.yaml"


def add_nodes(server: KubeApiServer, count: int) -> None:
    shape = yaml.safe_load(MACHINE.read_text())
    for index in range(count):
        node, topology = machine_objects(shape, f"node-{index}")
        server.add(node)
        server.add(topology)


def pod(name: str) -> dict[str, Any]:
    resources = {"cpu": "2", "memory": "1Gi"}
    container = {"name": "main", "image": "busybox", "resources": {"requests": resources, "limits": resources}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulerName": "numasched", "containers": [container]},
        "status": {"phase": "Pending"},
    }


def bound_pods(server: KubeApiServer) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in server.list("v1", "Pod") if p["spec"].get("nodeName")}


async def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    with anyio.move_on_after(timeout):
        while not condition():
            await anyio.sleep(0.05)
        return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def server() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(bookmark_interval=0.5) as running:
        yield running


class Instance:
    def __init__(self, runner: SchedulerRunner) -> None:
        self.runner = runner
        self.exit_code: int | None = None
        self.done = anyio.Event()
        # Every change of this instance's leadership seen by the sampler: (time, leading).
        self.changes: list[tuple[float, bool]] = []

    @property
    def leading(self) -> bool:
        elector = self.runner.elector
        return elector is not None and elector.is_leader


async def start(group: anyio.abc.TaskGroup, server: KubeApiServer, identity: str) -> Instance:
    options = RunOptions(
        schedule_period=0.5,
        lease_namespace="kube-system",
        lease_timing=DEFAULT_LEASE_TIMING,
        identity=identity,
        request_timeout=10.0,
        informer_timing=InformerTiming(request_timeout=10.0, watch_timeout=30, backoff_initial=0.1, backoff_cap=1.0),
    )
    api_client = client.ApiClient(client.Configuration(host=server.url))
    instance = Instance(SchedulerRunner(api_client, options))

    async def run() -> None:
        try:
            instance.exit_code = await instance.runner.run()
        finally:
            instance.done.set()
            await api_client.close()

    async def sample() -> None:
        last: bool | None = None
        while not instance.done.is_set():
            if instance.leading != last:
                last = instance.leading
                instance.changes.append((anyio.current_time(), last))
            await anyio.sleep(0.05)

    group.start_soon(run)
    group.start_soon(sample)
    return instance


def lease(server: KubeApiServer) -> dict[str, Any]:
    found: dict[str, Any] | None = server.get("coordination.k8s.io/v1", "Lease", "numasched", "kube-system")
    assert found is not None
    return found


async def jitter(server: KubeApiServer, stop: anyio.Event) -> None:
    """Every request waits 1-2 s before the server handles it, the delay changing all the time."""
    rng = random.Random(7)
    while not stop.is_set():
        server.slow_down(rng.uniform(*LATENCY_S))
        await anyio.sleep(0.2)
    server.slow_down(0)


@pytest.mark.timeout(300)  # a minute of latency by design, plus start and takeover on a busy machine
async def test_the_leader_rides_out_a_slow_api_and_a_standby_takes_over_after_it_stops(server: KubeApiServer) -> None:
    add_nodes(server, 4)
    async with anyio.create_task_group() as group:
        first = await start(group, server, "first")
        await wait_until(lambda: first.leading, 15, "the first instance leading")
        second = await start(group, server, "second")
        await wait_until(lambda: second.runner._ready() is None, 15, "the standby's caches synced")

        slow = anyio.Event()
        group.start_soon(jitter, server, slow)
        slow_from = anyio.current_time()
        waves = 0
        while anyio.current_time() - slow_from < SLOW_FOR_S:
            names = [f"wave-{waves}-{index}" for index in range(4)]
            for name in names:
                server.add(pod(name))
            # A bind takes a request or two at 1-2 s each: well within half a minute.
            wave = frozenset(names)
            await wait_until(lambda: wave <= bound_pods(server).keys(), 30, f"wave {waves} bound")  # noqa: B023
            waves += 1
            await anyio.sleep(3)
        slow_for = anyio.current_time() - slow_from

        # All along: one term of the first instance, none of the standby.
        # (Sampling begins before the caches sync, so before anyone leads.)
        assert [leading for _, leading in first.changes] == [False, True]
        assert second.changes == [(second.changes[0][0], False)]
        assert first.runner.terms == 1 and second.runner.terms == 0
        assert lease(server)["spec"]["holderIdentity"] == "first"
        assert lease(server)["spec"]["leaseTransitions"] == 0
        assert waves >= 5

        # Still slow: the first stops (releasing the Lease) and the standby takes over.
        stopped_at = anyio.current_time()
        first.runner.stop()
        with anyio.fail_after(10):
            await first.done.wait()
        exited_in = anyio.current_time() - stopped_at
        await wait_until(lambda: second.leading, 20, "the standby leading")
        names = [f"after-{index}" for index in range(4)]
        for name in names:
            server.add(pod(name))
        await wait_until(lambda: set(names) <= bound_pods(server).keys(), 30, "the pods after the takeover bound")
        assert lease(server)["spec"]["holderIdentity"] == "second"
        assert lease(server)["spec"]["leaseTransitions"] == 1
        slow.set()
        second.runner.stop()
        with anyio.fail_after(10):
            await second.done.wait()
        group.cancel_scope.cancel()

    assert first.exit_code == EXIT_OK and second.exit_code == EXIT_OK
    assert slow_for >= SLOW_FOR_S and exited_in < 10
    assert not first.leading and not second.leading
    assert all(count == 1 for count in server.bind_counts.values())
    assert len(server.bind_counts) == 4 * waves + 4


async def test_an_unreadable_lease_neither_crashes_nor_wins_the_election(server: KubeApiServer) -> None:
    server.add(
        {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "numasched", "namespace": "kube-system"},
            "spec": {"holderIdentity": "someone", "leaseTransitions": "many", "leaseDurationSeconds": 15},
        }
    )
    api_client = client.ApiClient(client.Configuration(host=server.url))
    try:
        elector = LeaderElector(
            api_client,
            namespace="kube-system",
            identity="careful",
            timing=LeaseTiming(lease_duration=2.0, renew_deadline=1.5, retry_period=0.25),
        )
        async with anyio.create_task_group() as group:
            group.start_soon(elector.acquire)
            await anyio.sleep(1.0)
            assert not elector.is_leader
            server.delete("coordination.k8s.io/v1", "Lease", "numasched", "kube-system")
            await wait_until(lambda: elector.is_leader, 5, "the Lease taken once it is readable")
    finally:
        await api_client.close()
    assert lease(server)["spec"]["holderIdentity"] == "careful"
