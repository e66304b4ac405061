"""Poison objects at the API level: the real kubernetes_asyncio client, informers, cache, loop,
binder, status reporter and problem writer against the test API server on 127.0.0.1.

A pod whose own spec is unusable (cpu "1e400", a 5,000-digit number, "abc", "-2") is told why on
the pod (PodScheduled=False, FailedScheduling naming the field), once per version; every other pod
is bound; the watch keeps delivering. A PodGroup with minMember -1 gets a Warning event. A
Numatopology with a cpuDetail key "²" or a CPU id of 2**40 crashes nothing and costs no memory.
PodGroup status is written without a status subresource (Volcano's CRD), through 409s.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import attrs
import pytest
import yaml
from kubeapi_server import KubeApiServer
from kubernetes_asyncio import client

from numasched.api.job import JobInfo
from numasched.cache.cache import Cache
from numasched.cache.events import EventType, ObjectEvent
from numasched.cache.kube.binder import KubeBinder, KubeStatusReporter, with_pod_group_status
from numasched.cache.kube.informer import Informer, InformerTiming, parse_json
from numasched.cache.kube.problems import ObjectProblemWriter
from numasched.cache.kube.resources import build_informers
from numasched.cache.machine_shapes import machine_objects
from numasched.conf.defaults import default_config
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.loop import run_loop

pytestmark = pytest.mark.anyio

MACHINES = Path(__file__).parent / "fixtures" / "machines"
FAST = InformerTiming(request_timeout=5.0, watch_timeout=30, backoff_initial=0.05, backoff_cap=0.5, missing_retry=1.0)
POISON_CPU = {"huge": "1e400", "digits": "9" * 5000, "word": "abc", "negative": "-2"}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def server() -> AsyncIterator[KubeApiServer]:
    async with KubeApiServer(bookmark_interval=0.5) as running:
        yield running


def pod(name: str, *, cpu: str = "1", scheduler: str = "numasched", namespace: str = "default") -> dict[str, Any]:
    resources = {"cpu": cpu, "memory": "1Gi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": resources}}],
        },
        "status": {"phase": "Pending"},
    }


def add_machine(server: KubeApiServer, name: str, machine: str = "epyc-1s-nps4") -> None:
    node, topology = machine_objects(yaml.safe_load((MACHINES / f"{machine}.yaml").read_text()), name)
    server.add(node)
    server.add(topology)


@attrs.define
class Scheduler:
    """The pieces `numasched run` wires, wired the same way here (no leader election)."""

    api: client.ApiClient
    cache: Cache
    informers: list[Informer]
    reporter: KubeStatusReporter
    writer: ObjectProblemWriter
    stop: anyio.Event = attrs.field(factory=anyio.Event)


async def start(group: anyio.abc.TaskGroup, server: KubeApiServer) -> Scheduler:
    api = client.ApiClient(client.Configuration(host=server.url))
    reporter = KubeStatusReporter(api, timeout=5.0)
    writer = ObjectProblemWriter(api, reporter, scheduler_names=("numasched",), timeout=5.0)
    cache = Cache(("numasched",), on_problem=writer.note)
    informers = build_informers(api, cache, timing=FAST)
    scheduler = Scheduler(api, cache, informers, reporter, writer)
    for informer in informers:
        group.start_soon(informer.run)
    group.start_soon(writer.run)
    for informer in informers:
        await informer.synced.wait()
    registry = default_registry()
    config = default_config()
    group.start_soon(
        lambda: run_loop(
            cache, lambda: config, registry, KubeBinder(api, timeout=5.0), reporter, period_s=0.2, stop=scheduler.stop
        )
    )
    return scheduler


async def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    with anyio.move_on_after(timeout):
        while not condition():
            await anyio.sleep(0.05)
        return
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def bound(server: KubeApiServer, name: str, namespace: str = "default") -> bool:
    found = server.get("v1", "Pod", name, namespace)
    return bool(found and found["spec"].get("nodeName"))


def events_about(server: KubeApiServer, kind: str, name: str, reason: str) -> list[Mapping[str, Any]]:
    return [
        event
        for event in server.list("v1", "Event")
        if event["involvedObject"].get("kind") == kind
        and event["involvedObject"].get("name") == name
        and event["reason"] == reason
    ]


def scheduled_condition(server: KubeApiServer, name: str) -> Mapping[str, Any] | None:
    found = server.get("v1", "Pod", name, "default") or {}
    conditions = (found.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "PodScheduled"), None)


async def test_poison_pods_are_told_the_field_and_every_other_pod_is_bound(server: KubeApiServer) -> None:
    add_machine(server, "node-a")
    add_machine(server, "node-b")
    for index in range(6):
        server.add(pod(f"good-{index}"))
    for label, cpu in POISON_CPU.items():
        server.add(pod(f"poison-{label}", cpu=cpu))
    # Not ours: never told by us, whatever its spec says.
    server.add(pod("theirs", cpu="abc", scheduler="default-scheduler"))
    async with anyio.create_task_group() as group:
        scheduler = await start(group, server)
        await wait_until(lambda: all(bound(server, f"good-{i}") for i in range(6)), 20, "the good pods bound")
        poison = [f"poison-{label}" for label in POISON_CPU]
        await wait_until(
            lambda: all(events_about(server, "Pod", name, "FailedScheduling") for name in poison), 20, "events"
        )
        for name in poison:
            condition = scheduled_condition(server, name)
            assert condition is not None and condition["status"] == "False", name
            assert condition["reason"] == "Unschedulable"
            assert "spec.containers[0].resources.requests" in condition["message"], condition["message"]
            assert "resource cpu" in condition["message"]
            assert len(condition["message"]) < 400
            assert not bound(server, name)
        # The watch is not stuck on them: a pod created now is seen and bound.
        server.add(pod("late"))
        await wait_until(lambda: bound(server, "late"), 20, "a pod created after the poison to be bound")
        # A re-list (all watches dropped, history compacted) reports the same versions again to
        # the writer, which does not write them again.
        server.compact()
        server.drop_watches()
        relists = sum(informer.relists for informer in scheduler.informers)
        await wait_until(lambda: sum(i.relists for i in scheduler.informers) > relists, 20, "a re-list")
        await wait_until(lambda: scheduler.writer.pending == 0, 10, "the writer to go through the re-list")
        for name in poison:
            assert len(events_about(server, "Pod", name, "FailedScheduling")) == 1, name
        assert scheduled_condition(server, "theirs") is None
        assert events_about(server, "Pod", "theirs", "FailedScheduling") == []
        # A new version of a poison pod, still poison, is told again; fixed, it is bound.
        fixed = server.get("v1", "Pod", "poison-word", "default")
        assert fixed is not None
        fixed["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "2"
        server.replace(fixed)
        await wait_until(lambda: bound(server, "poison-word"), 20, "the fixed pod to be bound")
        scheduler.stop.set()
        group.cancel_scope.cancel()
    await scheduler.api.close()


async def test_a_podgroup_with_negative_min_member_gets_a_warning_event(server: KubeApiServer) -> None:
    add_machine(server, "node-a")
    server.add(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "bad-gang", "namespace": "default"},
            "spec": {"minMember": -1, "queue": "default"},
        }
    )
    server.add(pod("alone"))
    async with anyio.create_task_group() as group:
        scheduler = await start(group, server)
        await wait_until(lambda: bool(events_about(server, "PodGroup", "bad-gang", "InvalidObject")), 20, "event")
        (event,) = events_about(server, "PodGroup", "bad-gang", "InvalidObject")
        assert event["type"] == "Warning"
        assert "spec.minMember" in event["message"] and "-1" in event["message"]
        assert (
            event["involvedObject"]["uid"]
            == server.get("scheduling.volcano.sh/v1beta1", "PodGroup", "bad-gang", "default")["metadata"]["uid"]
        )
        await wait_until(lambda: bound(server, "alone"), 20, "the other pod bound")
        scheduler.stop.set()
        group.cancel_scope.cancel()
    await scheduler.api.close()


@pytest.mark.parametrize(
    "poison",
    [
        pytest.param(lambda spec: spec["cpuDetail"].update({"²": spec["cpuDetail"]["0"]}), id="superscript-two"),
        pytest.param(lambda spec: spec["cpuDetail"].update({str(2**40): spec["cpuDetail"]["0"]}), id="cpu-2**40"),
        pytest.param(lambda spec: spec["numares"]["cpu"].update({"allocatable": "0-1099511627776"}), id="range-2**40"),
    ],
)
async def test_a_poison_numatopology_crashes_nothing_and_costs_no_memory(
    server: KubeApiServer, poison: Callable[[dict[str, Any]], None]
) -> None:
    add_machine(server, "good-node")
    node, topology = machine_objects(yaml.safe_load((MACHINES / "epyc-1s-nps4.yaml").read_text()), "bad-node")
    poison(topology["spec"])
    server.add(node)
    for index in range(4):
        server.add(pod(f"p-{index}"))
    tracemalloc.start()
    try:
        async with anyio.create_task_group() as group:
            scheduler = await start(group, server)
            server.add(topology)
            await wait_until(
                lambda: any(kind == "Numatopology" for kind, _ in scheduler.cache.problems), 20, "the problem"
            )
            await wait_until(lambda: all(bound(server, f"p-{i}") for i in range(4)), 20, "the pods bound")
            server.add(pod("after"))
            await wait_until(lambda: bound(server, "after"), 20, "a later pod bound")
            _, peak = tracemalloc.get_traced_memory()
            scheduler.stop.set()
            group.cancel_scope.cancel()
    finally:
        tracemalloc.stop()
    await scheduler.api.close()
    # 2**40 CPU ids as a bitmap or list would be a terabyte; the whole test stays small.
    assert peak < 200 * 2**20, f"peak traced memory {peak / 2**20:.0f} MiB"
    message = next(m for (kind, _), m in scheduler.cache.problems.items() if kind == "Numatopology")
    assert "bad-node" in str(scheduler.cache.problems) and ("cpu" in message.lower()), message


async def test_podgroup_status_is_written_without_a_status_subresource_through_conflicts(
    server: KubeApiServer,
) -> None:
    created = server.add(
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "gang", "namespace": "default"},
            "spec": {"minMember": 2, "queue": "default"},
            "status": {"phase": "Pending", "conditions": [{"type": "Other", "status": "True"}]},
        }
    )
    job = JobInfo(uid=created["metadata"]["uid"], namespace="default", name="gang", has_pod_group=True)
    async with client.ApiClient(client.Configuration(host=server.url)) as api:
        reporter = KubeStatusReporter(api, timeout=5.0)
        # Three other writers get in between our read and our write: three 409s, then success.
        server.write_concurrently(3)
        await reporter.job_status(job, "Inqueue", "0/2 nodes are available: 2 Insufficient cpu.")
        stored = server.get("scheduling.volcano.sh/v1beta1", "PodGroup", "gang", "default")
        assert stored is not None
        assert stored["metadata"]["annotations"]["test/concurrent-writes"] == "3"
        assert stored["status"]["phase"] == "Inqueue"
        conditions = {c["type"]: c for c in stored["status"]["conditions"]}
        assert conditions["Other"] == {"type": "Other", "status": "True"}
        assert conditions["Unschedulable"]["message"] == "0/2 nodes are available: 2 Insufficient cpu."
        puts = server.request_counts[("PUT", "/apis/scheduling.volcano.sh/v1beta1/namespaces/default/podgroups/gang")]
        assert puts == 4
        status_paths = [path for (_, path) in server.request_counts if path.endswith("/status")]
        assert status_paths == []
        assert reporter.write_errors == 0
        # Later: Running, the Unschedulable condition replaced in place by Scheduled's own type.
        await reporter.job_status(job, "Running", "")
        stored = server.get("scheduling.volcano.sh/v1beta1", "PodGroup", "gang", "default")
        assert stored is not None and stored["status"]["phase"] == "Running"
        assert {c["type"] for c in stored["status"]["conditions"]} == {"Other", "Unschedulable", "Scheduled"}
        # Conflicts without end: a bounded number of tries, then a counted write error.
        server.write_concurrently(100)
        await reporter.job_status(job, "Pending", "changed")
        assert reporter.write_errors == 1


class RaisingSink:
    """A sink that fails on one object the way a converter bug would."""

    def __init__(self, poison_name: str) -> None:
        self.poison_name = poison_name
        self.names: list[str] = []

    def apply(self, event: ObjectEvent) -> None:
        name = event.obj["metadata"]["name"]
        if name == self.poison_name and event.type is not EventType.DELETED:
            raise RuntimeError("a converter bug")
        self.names.append(name)

    def replace(self, kind: str, objects: list[Mapping[str, Any]]) -> None:
        for obj in objects:
            self.apply(ObjectEvent(kind, EventType.MODIFIED, obj))


async def test_an_event_the_sink_cannot_take_is_skipped_once_and_the_watch_goes_on(server: KubeApiServer) -> None:
    add_machine(server, "before")
    async with client.ApiClient(client.Configuration(host=server.url)) as api:
        sink = RaisingSink("poison")
        informer = Informer("Node", "v1", client.CoreV1Api(api).list_node, sink, timing=FAST)
        async with anyio.create_task_group() as group:
            group.start_soon(informer.run)
            await informer.synced.wait()
            add_machine(server, "poison")
            add_machine(server, "after")
            await wait_until(lambda: "after" in sink.names, 10, "the node after the poison one")
            assert informer.poison_events == 1
            assert informer.relists == 1
            version = int(informer.resource_version)
            assert version >= int(server.get("v1", "Node", "after")["metadata"]["resourceVersion"])
            server.delete("v1", "Node", "poison")
            add_machine(server, "later")
            await wait_until(lambda: "later" in sink.names, 10, "a later node")
            assert sink.names.count("poison") == 1  # its deletion was delivered
            assert informer.relists == 1 and informer.poison_events == 1
            group.cancel_scope.cancel()


def test_watch_lines_python_would_refuse_are_read() -> None:
    huge = b'{"type": "ADDED", "object": {"metadata": {"name": "n"}, "value": ' + b"9" * 5000 + b"}}"
    event = parse_json(huge)
    assert event["object"]["value"] == float("inf")
    latin = b'{"type": "ADDED", "object": {"metadata": {"name": "\xff"}}}'
    assert parse_json(latin)["object"]["metadata"]["name"] == "\ufffd"
    with pytest.raises(ValueError):
        parse_json(b'{"type": "ADDED", "object": ')
    assert json.loads(b'{"a": 1}') == parse_json(b'{"a": 1}')


async def test_only_the_leader_writes_problems_and_only_about_what_is_there(server: KubeApiServer) -> None:
    server.add(pod("bad", cpu="abc"))
    server.add(pod("bound-bad", cpu="abc") | {"spec": {**pod("x")["spec"], "nodeName": "somewhere"}})
    async with client.ApiClient(client.Configuration(host=server.url)) as api:
        reporter = KubeStatusReporter(api, timeout=5.0)
        writer = ObjectProblemWriter(api, reporter, scheduler_names=("numasched",), timeout=5.0)
        leading = False
        async with anyio.create_task_group() as group:
            group.start_soon(writer.run, lambda: leading)
            writer.note("Pod", "default/bad", "spec.containers[0].resources.requests: resource cpu: invalid")
            writer.note("Pod", "default/bound-bad", "annotation numasched.io/allocation: broken")
            writer.note("Pod", "default/gone", "spec: whatever")
            writer.note("ConfigMap", "default/cm", "reported by the ConfigMap feed, not here")
            await anyio.sleep(0.5)
            assert server.list("v1", "Event") == [] and writer.pending == 3
            leading = True
            await wait_until(lambda: writer.pending == 0 and writer.written == 1, 10, "the leader's writes")
            group.cancel_scope.cancel()
    (event,) = server.list("v1", "Event")
    assert event["involvedObject"]["name"] == "bad" and event["reason"] == "FailedScheduling"
    assert "pod spec cannot be scheduled: spec.containers[0].resources.requests" in event["message"]
    assert scheduled_condition(server, "bound-bad") is None


class ListSink:
    def __init__(self) -> None:
        self.events: list[ObjectEvent] = []

    def apply(self, event: ObjectEvent) -> None:
        self.events.append(event)

    def replace(self, kind: str, objects: list[Mapping[str, Any]]) -> None:
        self.events.extend(ObjectEvent(kind, EventType.MODIFIED, obj) for obj in objects)


def nested_too_deep(event_type: str, resource_version: str) -> bytes:
    """A watch line Python's JSON reader cannot follow (RecursionError), shaped as the API server
    writes one: type, then the object with its metadata first."""
    depth = 100_000
    return (
        b'{"type":"' + event_type.encode() + b'","object":{"kind":"Pod","apiVersion":"v1","metadata":{"name":"deep",'
        b'"namespace":"ns","uid":"uid-deep","resourceVersion":"' + resource_version.encode() + b'",'
        b'"labels":{"a":"b"}},"spec":' + b"[" * depth + b"]" * depth + b"}}"
    )


async def test_an_unreadable_watch_line_is_skipped_and_an_unreadable_deletion_still_deletes() -> None:
    sink = ListSink()

    async def never_called(**_: Any) -> Any:
        raise AssertionError("no request in this test")

    informer = Informer("Pod", "v1", never_called, sink, timing=FAST)
    informer._handle_line(nested_too_deep("ADDED", "41"))
    assert sink.events == [] and informer.resource_version == "41" and informer.poison_events == 1
    informer._handle_line(nested_too_deep("DELETED", "42"))
    (deleted,) = sink.events
    assert deleted.type is EventType.DELETED
    assert deleted.obj["metadata"] == {"name": "deep", "namespace": "ns", "uid": "uid-deep", "resourceVersion": "42"}
    assert informer.resource_version == "42" and informer.poison_events == 2
    # A line with no version to move past is a transport fault: the stream is given up and resumed.
    with pytest.raises(ValueError, match="unreadable line"):
        informer._handle_line(b'{"type":"ADDED","object":{"metadata":{"name":"x"},"spec":' + b"[" * 100_000)
    assert informer.resource_version == "42"


def test_podgroup_status_update_keeps_what_it_does_not_own_and_is_a_no_op_when_nothing_changed() -> None:
    condition = {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources", "message": "m"}
    current: dict[str, Any] = {
        "metadata": {"name": "g", "resourceVersion": "5"},
        "spec": {"minMember": 2},
        "status": {
            "phase": "Inqueue",
            "running": 1,
            "conditions": [
                {"type": "Other", "status": "True"},
                {**condition, "transitionID": "old", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            ],
        },
    }
    fresh = {**condition, "transitionID": "new", "lastTransitionTime": "2026-11-24T00:00:00Z"}
    assert with_pod_group_status(current, "Inqueue", fresh) == current
    changed = with_pod_group_status(current, "Inqueue", {**fresh, "message": "n"})
    assert changed["status"]["running"] == 1 and changed["metadata"] == current["metadata"]
    assert [c["type"] for c in changed["status"]["conditions"]] == ["Other", "Unschedulable"]
    assert changed["status"]["conditions"][1]["transitionID"] == "new"
    assert current["status"]["conditions"][1]["transitionID"] == "old"  # the input is not changed
    broken = with_pod_group_status({"metadata": {"name": "g"}, "status": "nonsense"}, "Pending", fresh)
    assert broken["status"] == {"phase": "Pending", "conditions": [fresh]}
