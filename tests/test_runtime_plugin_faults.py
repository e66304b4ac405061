"""Plugin fault isolation: a plugin (or a hint provider) that raises for one pod fails that pod
only, is counted, and backs the pod off; every other pod is still placed."""

from __future__ import annotations

import itertools
import time
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from kubeapi_server import KubeApiServer
from kubernetes_asyncio import client

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo, TaskStatus
from numasched.api.topology import TopologyPolicy
from numasched.cache.cache import Cache
from numasched.cache.events import EventType, ObjectEvent
from numasched.cache.kube.informer import InformerTiming
from numasched.cache.machine_shapes import machine_objects
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import Event, EventHandler, Session
from numasched.scheduler.framework.status import SUCCESS, PluginFault, Status
from numasched.scheduler.leader import LeaseTiming
from numasched.scheduler.loop import BackoffPolicy, PodBackoff, SessionResult, run_session
from numasched.scheduler.runner import RunOptions, SchedulerRunner

CPU_ONLY = ("priority", "gang", "conformance")
MACHINES = Path(__file__).parent / "fixtures" / "machines"


# --- plugins that raise ------------------------------------------------------------------------


class RaisingPlugin:
    """Raises at the extension points named in `points` for tasks named in `victims`; records
    which tasks each point saw and what its event handlers hold."""

    name = "faulty"

    def __init__(self, arguments: Arguments) -> None:
        self.points = frozenset(arguments.get_list("points", []))
        self.victims = frozenset(arguments.get_list("victims", []))
        self.seen: dict[str, list[str]] = {}
        self.holding: set[str] = set()

    def _visit(self, point: str, task_name: str) -> None:
        self.seen.setdefault(point, []).append(task_name)
        if point in self.points and task_name in self.victims:
            raise ValueError(f"{point} cannot handle {task_name}")

    def on_session_open(self, ssn: Session) -> None:
        def predicate(task: TaskInfo, node: NodeInfo) -> Status:
            self._visit("predicate", task.name)
            return SUCCESS

        def node_order(task: TaskInfo, node: NodeInfo) -> float:
            self._visit("nodeOrder", task.name)
            return 0.0

        def task_order(first: TaskInfo, second: TaskInfo) -> int:
            self._visit("taskOrder", first.name)
            self._visit("taskOrder", second.name)
            return 0

        def job_ready(job: JobInfo) -> bool:
            for task in job.tasks.values():
                self._visit("jobReady", task.name)
            return True

        def allocate(event: Event) -> None:
            self.holding.add(event.task.name)
            self._visit("allocateEvent", event.task.name)

        def deallocate(event: Event) -> None:
            self.holding.discard(event.task.name)

        ssn.add_predicate_fn(self.name, predicate)
        ssn.add_node_order_fn(self.name, node_order)
        ssn.add_task_order_fn(self.name, task_order)
        ssn.add_job_ready_fn(self.name, job_ready)
        ssn.add_event_handler(EventHandler(allocate=allocate, deallocate=deallocate))

    def on_session_close(self, ssn: Session) -> None:
        return None


class HoldingPlugin:
    """An event handler registered before the faulty one: what it holds must be rolled back."""

    name = "holding"

    def __init__(self, arguments: Arguments) -> None:
        self.holding: set[str] = set()

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_event_handler(
            EventHandler(
                allocate=lambda event: self.holding.add(event.task.name),
                deallocate=lambda event: self.holding.discard(event.task.name),
            )
        )

    def on_session_close(self, ssn: Session) -> None:
        return None


def node(name: str) -> NodeInfo:
    return NodeInfo.create(name, Resource(milli_cpu=16000, memory=64e9))


def task(name: str, job: str, *, cpu: float = 1000, ts: float = 0.0) -> TaskInfo:
    request = Resource(milli_cpu=cpu, memory=1e9)
    return TaskInfo(
        uid=name,
        namespace="ns",
        name=name,
        job_id=job,
        resreq=request,
        init_resreq=request.clone(),
        creation_timestamp=ts,
    )


def cluster(nodes: int, names: list[str]) -> ClusterSnapshot:
    jobs: dict[str, JobInfo] = {}
    for index, name in enumerate(names):
        job = JobInfo(uid=f"job-{name}", namespace="ns", name=f"job-{name}", min_available=1)
        job.add_task(task(name, job.uid, ts=float(index)))
        jobs[job.uid] = job
    return ClusterSnapshot(nodes={f"n{i}": node(f"n{i}") for i in range(nodes)}, jobs=jobs)


def run_with(
    snapshot: ClusterSnapshot, arguments: Mapping[str, Any], *, holding_first: bool = False
) -> tuple[SessionResult, RaisingPlugin, HoldingPlugin]:
    built: dict[str, Any] = {}

    def build_faulty(args: Arguments) -> RaisingPlugin:
        built["faulty"] = RaisingPlugin(args)
        return built["faulty"]  # type: ignore[no-any-return]

    def build_holding(args: Arguments) -> HoldingPlugin:
        built["holding"] = HoldingPlugin(args)
        return built["holding"]  # type: ignore[no-any-return]

    registry = default_registry()
    registry.register_plugin("faulty", build_faulty)
    registry.register_plugin("holding", build_holding)
    second = [PluginOption("holding"), PluginOption("faulty", arguments=dict(arguments))]
    config = SchedulerConfig(
        actions=("enqueue", "allocate", "backfill"),
        tiers=(Tier(tuple(PluginOption(name) for name in CPU_ONLY)), Tier(tuple(second))),
    )
    result = run_session(snapshot, config, registry)
    return result, built["faulty"], built["holding"]


def bound(result: SessionResult) -> dict[str, str]:
    return {request.task.name: request.node_name for request in result.bind_requests}


# --- the session -------------------------------------------------------------------------------


@pytest.mark.parametrize("point", ["predicate", "nodeOrder", "allocateEvent", "jobReady"])
def test_a_plugin_raising_for_one_task_fails_that_task_alone(point: str) -> None:
    names = ["a", "b", "bad", "c", "d"]
    result, faulty, _ = run_with(cluster(3, names), {"points": [point], "victims": ["bad"]})
    assert set(bound(result)) == {"a", "b", "c", "d"}
    failed = {entry.task.name: entry.message for entry in result.unschedulable}
    assert set(failed) == {"bad"}
    assert failed["bad"] == f"plugin faulty failed in {point}: ValueError: {point} cannot handle bad"
    assert [(f.plugin, f.extension_point, f.subject) for f in result.plugin_faults] == [
        ("faulty", point, "ns/job-bad" if point == "jobReady" else "ns/bad")
    ]
    assert set(result.failed_by_plugin) == {"bad"}
    if point == "predicate":
        # The scan stops at the first exception: one call for "bad", not one per node.
        assert faulty.seen["predicate"].count("bad") == 1


def test_an_allocate_handler_raising_rolls_the_placement_back() -> None:
    snapshot = cluster(1, ["a", "bad", "b"])
    idle_before = snapshot.nodes["n0"].idle.clone()
    result, faulty, holding = run_with(snapshot, {"points": ["allocateEvent"], "victims": ["bad"]})
    assert set(bound(result)) == {"a", "b"}
    n0 = snapshot.nodes["n0"]
    assert set(n0.tasks) == {"a", "b"}
    # The node's books: idle is what it was less the two placed tasks, counted independently.
    expected = idle_before.clone()
    for _ in ("a", "b"):
        expected.sub(Resource(milli_cpu=1000, memory=1e9))
    assert n0.idle == expected
    bad = snapshot.jobs["job-bad"].tasks["bad"]
    assert (bad.status, bad.node_name, bad.allocation) == (TaskStatus.PENDING, "", None)
    # The handler registered before the faulty one was told to let go; so was the faulty one.
    assert holding.holding == {"a", "b"}
    assert faulty.holding == {"a", "b"}


def test_an_order_plugin_raising_keeps_a_total_order_and_places_everyone() -> None:
    names = ["a", "bad", "c"]
    result, _, _ = run_with(cluster(2, names), {"points": ["taskOrder"], "victims": ["bad"]})
    # Jobs have a single task, so a task order is asked only inside gang plugins' sorting, if
    # at all; whatever was asked, every pod is placed.
    assert set(bound(result)) == set(names)


def test_a_hint_provider_raising_fails_its_pod_through_the_numa_aware_plugin() -> None:
    class BoomProvider:
        name = "boom"
        resources: frozenset[str] = frozenset()

        def hints(self, request: Any, topology: Any, free: Any) -> None:
            if request.pod.endswith("/bad"):
                raise RuntimeError("boom provider: no hints for this pod")
            return None

        def allocate(self, request: Any, best_hint: Any, topology: Any, free: Any) -> dict[str, Any]:
            return {}

    registry = default_registry()
    registry.register_hint_provider("boom", lambda arguments: BoomProvider())
    cache = Cache(("numasched",))
    machine = _machine("epyc-1s-nps4")
    for index in range(2):
        node_obj, topology = machine_objects(machine, f"n{index}", topology_policy=TopologyPolicy.SINGLE_NUMA_NODE)
        cache.apply(ObjectEvent("Node", EventType.ADDED, node_obj))
        cache.apply(ObjectEvent("Numatopology", EventType.ADDED, topology))
    for name in ("a", "bad", "b"):
        cache.apply(ObjectEvent("Pod", EventType.ADDED, _pod_object(name)))
    config = SchedulerConfig(
        actions=("allocate",),
        tiers=(Tier((PluginOption("predicates"), PluginOption("numa-aware", arguments={"hint-providers": ["boom"]}))),),
    )
    result = run_session(cache.snapshot(), config, registry)
    assert {request.task.name for request in result.bind_requests} == {"a", "b"}
    (entry,) = result.unschedulable
    assert entry.task.name == "bad"
    assert entry.message.startswith("plugin numa-aware failed in predicate: RuntimeError: boom provider")


def _machine(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((MACHINES / f"{name}.yaml").read_text())
    return loaded


def _pod_object(name: str, *, cpu: str = "2") -> dict[str, Any]:
    resources = {"cpu": cpu, "memory": "1Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {
            "schedulerName": "numasched",
            "containers": [
                {"name": "main", "image": "busybox", "resources": {"requests": resources, "limits": resources}}
            ],
        },
        "status": {"phase": "Pending"},
    }


# --- backoff -----------------------------------------------------------------------------------


def test_backoff_doubles_up_to_its_cap_and_ends_when_the_pod_is_tried_cleanly() -> None:
    policy = BackoffPolicy(initial_s=1.0, max_s=10.0)
    assert [policy.delay(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert policy.delay(10_000) == 10.0
    backoff = PodBackoff(policy)
    fault = PluginFault("faulty", "predicate", "ValueError: x", "ns/p")
    bad = task("p", "j")
    failing = SessionResult(failed_by_plugin={"p": fault})
    backoff.record(failing, now=100.0)
    assert backoff.held_back(100.5) == {
        "p": "backing off 1s after 1 plugin error(s); plugin faulty failed in predicate: ValueError: x"
    }
    assert backoff.held_back(101.0) == {}
    backoff.record(failing, now=101.0)
    assert backoff.failures("p") == 2 and backoff.held_back(102.9).keys() == {"p"}
    # Held back this session: no news about it, the backoff stands.
    backoff.record(SessionResult(held_back=frozenset({"p"})), now=102.0)
    assert backoff.failures("p") == 2
    # Tried again without a fault: it starts over.
    backoff.record(SessionResult(), now=104.0)
    assert backoff.failures("p") == 0 and len(backoff) == 0
    assert bad.uid == "p"
    with pytest.raises(ValueError, match="initial <= max"):
        BackoffPolicy(initial_s=5.0, max_s=1.0)


def test_a_held_back_task_is_not_tried_and_says_why() -> None:
    registry = default_registry()
    config = SchedulerConfig(actions=("allocate",), tiers=(Tier(tuple(PluginOption(n) for n in CPU_ONLY)),))
    snapshot = cluster(1, ["a", "p"])
    result = run_session(snapshot, config, registry, held_back={"p": "backing off 4s"})
    assert {request.task.name for request in result.bind_requests} == {"a"}
    # Reported when it failed; not again while it waits.
    assert result.unschedulable == ()
    assert result.held_back == frozenset({"p"})
    assert snapshot.jobs["job-p"].tasks["p"].fit_error == "backing off 4s"


# --- through the API ---------------------------------------------------------------------------


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def server() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(bookmark_interval=0.5) as running:
        yield running


RUN_CONFIG = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
  - name: conformance
- plugins:
  - name: predicates
  - name: nodeorder
  - name: faulty
    arguments:
      points: [predicate]
      victims: [poison]
  - name: numa-aware
    arguments:
      hint-providers: [boom]
"""


class CountingBoomProvider:
    """Raises for the pod named "poison-provider"; counts the calls for it."""

    name = "boom"
    resources: frozenset[str] = frozenset()

    def __init__(self, calls: list[float]) -> None:
        self.calls = calls

    def hints(self, request: Any, topology: Any, free: Any) -> None:
        if request.pod.endswith("/poison-provider"):
            self.calls.append(time.monotonic())
            raise RuntimeError("boom provider: cannot say")
        return None

    def allocate(self, request: Any, best_hint: Any, topology: Any, free: Any) -> dict[str, Any]:
        return {}


@pytest.mark.anyio
async def test_poison_pods_fail_alone_are_counted_and_back_off(server: KubeApiServer, tmp_path: Path) -> None:
    for index in range(4):
        node_obj, topology = machine_objects(_machine("epyc-1s-nps4"), f"node-{index}")
        server.add(node_obj)
        server.add(topology)
    names = [f"ok-{index}" for index in range(20)]
    # The provider's victim asks for a shape of its own: the numa-aware plugin reuses a decision
    # for pods alike, which would spare it the provider's call.
    for name, cpu in [*((name, "2") for name in names), ("poison", "2"), ("poison-provider", "3")]:
        obj = _pod_object(name, cpu=cpu)
        del obj["metadata"]["uid"]
        server.add(obj)

    plugin_attempts: list[float] = []
    provider_attempts: list[float] = []

    class TimedRaisingPlugin(RaisingPlugin):
        def _visit(self, point: str, task_name: str) -> None:
            if point == "predicate" and task_name == "poison":
                plugin_attempts.append(time.monotonic())
            super()._visit(point, task_name)

    registry = default_registry()
    registry.register_plugin("faulty", TimedRaisingPlugin)
    registry.register_hint_provider("boom", lambda arguments: CountingBoomProvider(provider_attempts))
    config_file = tmp_path / "scheduler.conf"
    config_file.write_text(RUN_CONFIG)
    policy = BackoffPolicy(initial_s=0.4, max_s=1.6)
    options = RunOptions(
        config_file=config_file,
        schedule_period=0.1,
        leader_elect=False,
        lease_timing=LeaseTiming(2.0, 1.5, 0.25),
        request_timeout=5.0,
        informer_timing=InformerTiming(request_timeout=5.0, watch_timeout=30, backoff_initial=0.05, backoff_cap=0.5),
        pod_backoff=policy,
    )
    api_client = client.ApiClient(client.Configuration(host=server.url))
    try:
        runner = SchedulerRunner(api_client, options, registry=registry)
        async with anyio.create_task_group() as group:
            group.start_soon(runner.run)
            with anyio.fail_after(30):
                while len(plugin_attempts) < 5 or len(provider_attempts) < 5:
                    await anyio.sleep(0.05)
            runner.stop()
    finally:
        await api_client.close()

    pods = {p["metadata"]["name"]: p for p in server.list("v1", "Pod")}
    assert all(pods[name]["spec"].get("nodeName") for name in names)
    assert not pods["poison"]["spec"].get("nodeName")
    assert not pods["poison-provider"]["spec"].get("nodeName")

    # Each attempt came no sooner than kube-scheduler's backoff formula allows after the last.
    for attempts in (plugin_attempts, provider_attempts):
        for failures, (earlier, later) in enumerate(itertools.pairwise(attempts), start=1):
            assert later - earlier >= policy.delay(failures) - 0.02, (failures, later - earlier)
    # Far fewer attempts than cycles: the pods sat their backoff out.
    assert runner.cycles >= 2 * len(plugin_attempts)

    metric = runner.metrics.plugin_errors
    assert metric.labels(plugin="faulty", extension_point="predicate")._value.get() == len(plugin_attempts)
    assert metric.labels(plugin="numa-aware", extension_point="predicate")._value.get() == len(provider_attempts)
    text = runner.metrics.exposition().decode()
    assert 'numasched_plugin_errors_total{extension_point="predicate",plugin="faulty"}' in text

    events = [e for e in server.list("v1", "Event") if e["reason"] == "FailedScheduling"]
    messages = {(e["involvedObject"]["name"], e["message"]) for e in events}
    # One message per pod, not one per cycle: a pod backing off is not reported again.
    assert messages == {
        ("poison", "plugin faulty failed in predicate: ValueError: predicate cannot handle poison"),
        ("poison-provider", "plugin numa-aware failed in predicate: RuntimeError: boom provider: cannot say"),
    }
