"""Stopping in the middle of a 5,000-pod cycle: the scheduler decides nothing more, sends no bind
that was not already in flight, releases the Lease and returns within 10 s."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
import yaml
from kubeapi_server import KubeApiServer
from kubernetes_asyncio import client

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo, TaskStatus
from numasched.cache.kube.informer import InformerTiming
from numasched.cache.machine_shapes import machine_objects
from numasched.conf.defaults import DEFAULT_CONFIG_TEXT
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.session import EventHandler, Session
from numasched.scheduler.framework.status import SUCCESS, Status
from numasched.scheduler.leader import LeaseTiming
from numasched.scheduler.loop import run_session
from numasched.scheduler.runner import EXIT_OK, RunOptions, SchedulerRunner

PODS = 5000
NODES = 48  # 128 CPUs each: room for every pod
BIND_CONCURRENCY = 16
STOP_WITHIN_S = 10.0
MACHINE = Path(__file__).parent / "fixtures" / "machines" / "pcie-8gpu-2numa.yaml"
FAST_INFORMERS = InformerTiming(request_timeout=5.0, watch_timeout=30, backoff_initial=0.05, backoff_cap=0.5)
# kube-scheduler's timing: a session busy in its thread must not cost the Lease on a loaded machine.
LEASE = LeaseTiming(lease_duration=15.0, renew_deadline=10.0, retry_period=2.0)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def server() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(bookmark_interval=0.5, max_history=200_000) as running:
        yield running


class Probe:
    """A predicate that passes everything and tells the test how far the session has got."""

    name = "probe"

    def __init__(self, checked: threading.Event, after: int) -> None:
        self.checked = checked
        self.after = after
        self.calls = 0

    def on_session_open(self, ssn: Session) -> None:
        def predicate(task: TaskInfo, node: NodeInfo) -> Status:
            self.calls += 1
            if self.calls >= self.after:
                self.checked.set()
            return SUCCESS

        ssn.add_predicate_fn(self.name, predicate)

    def on_session_close(self, ssn: Session) -> None:
        return None


def populate(server: KubeApiServer) -> None:
    shape = yaml.safe_load(MACHINE.read_text())
    for index in range(NODES):
        node, topology = machine_objects(shape, f"node-{index}")
        server.add(node)
        server.add(topology)
    for index in range(PODS):
        resources = {"cpu": "1", "memory": "1Gi"}
        server.add(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"pod-{index:04d}", "namespace": "default"},
                "spec": {
                    "schedulerName": "numasched",
                    "containers": [
                        {"name": "main", "image": "busybox", "resources": {"requests": resources, "limits": resources}}
                    ],
                },
                "status": {"phase": "Pending"},
            }
        )


def binds_arrived(server: KubeApiServer) -> int:
    """Bind requests that reached the server (counted on arrival, before any injected delay)."""
    return sum(count for (method, path), count in server.request_counts.items() if path.endswith("/binding"))


async def run_until_stopped(
    server: KubeApiServer, tmp_path: Path, ready_to_stop: Any, checked: threading.Event, after: int
) -> tuple[SchedulerRunner, int, int, float]:
    """Start a runner, stop it once ready_to_stop() says so; the runner, the binds that had
    reached the server when stop() was called, those that had at the end, and the seconds from
    stop() to run() returning."""
    config_file = tmp_path / "scheduler.conf"
    config_file.write_text(
        DEFAULT_CONFIG_TEXT.replace("  - name: predicates\n", "  - name: predicates\n  - name: probe\n")
    )
    registry = default_registry()
    registry.register_plugin("probe", lambda arguments: Probe(checked, after))
    options = RunOptions(
        config_file=config_file,
        schedule_period=0.5,
        lease_namespace="kube-system",
        lease_timing=LEASE,
        identity="stopping",
        request_timeout=10.0,
        informer_timing=FAST_INFORMERS,
        bind_concurrency=BIND_CONCURRENCY,
    )
    api_client = client.ApiClient(client.Configuration(host=server.url))
    try:
        runner = SchedulerRunner(api_client, options, registry=registry)
        exit_codes: list[int] = []
        async with anyio.create_task_group() as group:

            async def run() -> None:
                exit_codes.append(await runner.run())

            group.start_soon(run)
            with anyio.fail_after(240):
                while not ready_to_stop():
                    await anyio.sleep(0.01)
            at_stop = binds_arrived(server)
            stopped_at = anyio.current_time()
            runner.stop()
            with anyio.fail_after(STOP_WITHIN_S):
                while not exit_codes:
                    await anyio.sleep(0.01)
            took = anyio.current_time() - stopped_at
        assert exit_codes == [EXIT_OK]
    finally:
        await api_client.close()
    return runner, at_stop, binds_arrived(server), took


def released(server: KubeApiServer) -> bool:
    found = server.get("coordination.k8s.io/v1", "Lease", "numasched", "kube-system")
    return found is not None and found["spec"]["holderIdentity"] == ""


@pytest.mark.anyio
async def test_a_stop_while_the_session_decides_sends_only_the_binds_in_flight(
    server: KubeApiServer, tmp_path: Path
) -> None:
    populate(server)
    checked = threading.Event()
    runner, at_stop, at_end, took = await run_until_stopped(server, tmp_path, checked.is_set, checked, after=200)
    assert took < STOP_WITHIN_S, took
    # Stopped mid-session (the probe had seen a few hundred checks of 5,000 pods). Binds stream
    # out as jobs are committed, so the first few may have been sent; after the stop at most the
    # binds already in flight arrive, and nothing the session had not sent is ever bound.
    assert at_end - at_stop <= BIND_CONCURRENCY, (at_stop, at_end)
    bound = sum(1 for p in server.list("v1", "Pod") if p["spec"].get("nodeName"))
    assert bound == at_end < PODS // 10, (bound, at_end)
    assert runner.cycles == 1, runner.cycles
    assert released(server)


@pytest.mark.anyio
async def test_a_stop_while_binding_sends_only_the_binds_in_flight(server: KubeApiServer, tmp_path: Path) -> None:
    populate(server)
    # Slow binds (and events): the cycle is in its bind phase for a long while.
    server.slow_down(0.2, methods=["POST"])
    checked = threading.Event()
    runner, at_stop, at_end, took = await run_until_stopped(
        server, tmp_path, lambda: binds_arrived(server) >= 200, checked, after=1
    )
    assert runner.cycles == 1, runner.cycles
    assert took < STOP_WITHIN_S, took
    assert at_stop >= 200
    # At most the binds already sent (bind concurrency bounds them) arrive after the stop; the
    # thousands the cycle had decided beyond them are never sent.
    assert at_end - at_stop <= BIND_CONCURRENCY, (at_stop, at_end)
    bound = sum(1 for p in server.list("v1", "Pod") if p["spec"].get("nodeName"))
    assert bound == at_end < PODS
    assert released(server)


# --- the stop flag inside a session ------------------------------------------------------------


class CountingHandler:
    """Counts placements, so the test can ask the session to stop after a given one."""

    name = "counting"

    def __init__(self, placed: list[str]) -> None:
        self.placed = placed

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_event_handler(EventHandler(allocate=lambda event: self.placed.append(event.task.name)))

    def on_session_close(self, ssn: Session) -> None:
        return None


def test_the_session_stops_between_tasks_and_rolls_the_cut_job_back() -> None:
    node = NodeInfo.create("n0", Resource(milli_cpu=64000, memory=64e9))
    idle_before = node.idle.clone()
    request = Resource(milli_cpu=1000, memory=1e9)

    def job_of(uid: str, names: list[str], first_ts: float, min_available: int, gang: bool) -> JobInfo:
        job = JobInfo(uid=uid, namespace="ns", name=uid, min_available=min_available)
        if gang:
            job = attrs.evolve(job, has_pod_group=True, pod_group_phase="Inqueue")
        for offset, name in enumerate(names):
            job.add_task(
                TaskInfo(
                    uid=name,
                    namespace="ns",
                    name=name,
                    job_id=uid,
                    resreq=request.clone(),
                    init_resreq=request.clone(),
                    creation_timestamp=first_ts + offset,
                )
            )
        return job

    jobs = [
        job_of("a", ["a"], 0.0, 1, False),
        job_of("g", ["g1", "g2", "g3"], 1.0, 3, True),
        job_of("z", ["z"], 9.0, 1, False),
    ]
    snapshot = ClusterSnapshot(nodes={"n0": node}, jobs={job.uid: job for job in jobs})
    placed: list[str] = []
    registry = default_registry()
    registry.register_plugin("counting", lambda arguments: CountingHandler(placed))
    config = SchedulerConfig(
        actions=("enqueue", "allocate", "backfill"),
        tiers=(Tier((PluginOption("priority"), PluginOption("gang"), PluginOption("counting"))),),
    )
    # Stop once a and two members of the gang are placed: before the gang's third member.
    result = run_session(snapshot, config, registry, should_stop=lambda: len(placed) >= 3)
    assert placed == ["a", "g1", "g2"]
    assert [request.task.name for request in result.bind_requests] == ["a"]
    assert result.stopped
    # The gang's two placements were rolled back; z was never tried.
    assert set(node.tasks) == {"a"}
    expected = idle_before.clone()
    expected.sub(request)
    assert node.idle == expected
    for name in ("g1", "g2", "g3"):
        member = snapshot.jobs["g"].tasks[name]
        assert (member.status, member.node_name) == (TaskStatus.PENDING, "")


@pytest.mark.anyio
async def test_sigterm_in_the_middle_of_binding_exits_within_10_seconds(server: KubeApiServer, tmp_path: Path) -> None:
    """The real process and signal: `numasched run` under SIGTERM while a 5,000-pod cycle binds."""
    populate(server)
    server.slow_down(0.2, methods=["POST"])
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps(server.kubeconfig()))
    command = [
        sys.executable, "-c", "import sys; from numasched.scheduler.runner import main; sys.exit(main())",
        "--kubeconfig", str(kubeconfig), "--schedule-period", "500ms", "--lease-namespace", "kube-system",
        "--metrics-addr", "", "--identity", "signalled", "--bind-concurrency", str(BIND_CONCURRENCY),
    ]  # fmt: skip
    log_path = tmp_path / "scheduler.log"
    with log_path.open("wb") as log_file:
        process = await anyio.open_process(command, stderr=log_file, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        with anyio.fail_after(240):
            while binds_arrived(server) < 200:
                await anyio.sleep(0.01)
        at_signal = binds_arrived(server)
        signalled_at = anyio.current_time()
        process.send_signal(signal.SIGTERM)
        with anyio.fail_after(STOP_WITHIN_S):
            code = await process.wait()
        took = anyio.current_time() - signalled_at
    finally:
        if process.returncode is None:
            process.kill()
    lines = log_path.read_text().splitlines()
    assert code == EXIT_OK, lines[-5:]
    assert took < STOP_WITHIN_S, took
    assert binds_arrived(server) - at_signal <= BIND_CONCURRENCY
    assert binds_arrived(server) < PODS
    assert released(server)
