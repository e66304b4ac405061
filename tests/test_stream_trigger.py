"""A new pod starts the next cycle without waiting for the period; only additions of unbound pods
of ours pull the trigger; the long-lived objects sit out the collector while the session runs."""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Mapping
from typing import Any

import anyio
import pytest

from numasched.api.allocation import PodAllocation
from numasched.api.node import NodeInfo
from numasched.api.snapshot import ClusterSnapshot
from numasched.cache.binder import BindOutcome, BindRequest, BindStatus
from numasched.cache.events import EventType, ObjectEvent
from numasched.conf.model import SchedulerConfig
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.loop import (
    SESSION_SWITCH_INTERVAL_S,
    CycleResult,
    CycleTrigger,
    pause_collection,
    resume_collection,
    run_loop,
    schedule_cycle,
)
from numasched.scheduler.runner import ArrivalWatch


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class EmptyCache:
    def snapshot(self) -> ClusterSnapshot:
        return ClusterSnapshot()

    def assume(self, task_uid: str, node_name: str, allocation: PodAllocation | None) -> None:
        raise AssertionError("nothing to assume")

    def forget(self, task_uid: str) -> None:
        raise AssertionError("nothing to forget")

    def offer_session_nodes(self, nodes: Mapping[str, NodeInfo]) -> None:
        return None


class NoBinder:
    async def bind(self, request: BindRequest) -> BindOutcome:
        return BindOutcome(BindStatus.FAILED, "not expected")


class NoReporter:
    async def scheduled(self, task: Any, node_name: str) -> None: ...

    async def unschedulable(self, task: Any, message: str) -> None: ...

    async def job_status(self, job: Any, phase: str, message: str) -> None: ...


@pytest.mark.anyio
async def test_a_trigger_starts_the_next_cycle_long_before_the_period() -> None:
    stop = anyio.Event()
    trigger = CycleTrigger()
    starts: list[float] = []

    def on_cycle(result: CycleResult) -> None:
        starts.append(time.monotonic())
        if len(starts) == 2:
            stop.set()

    config = SchedulerConfig(actions=("allocate",))
    async with anyio.create_task_group() as group:
        group.start_soon(
            lambda: run_loop(
                EmptyCache(),
                lambda: config,
                default_registry(),
                NoBinder(),
                NoReporter(),
                period_s=30.0,
                stop=stop,
                on_cycle=on_cycle,
                trigger=trigger,
                min_cycle_interval_s=0.05,
            )
        )
        with anyio.fail_after(10):
            while not starts:
                await anyio.sleep(0.01)
            await anyio.sleep(0.2)
            # Idle: no second cycle before the 30 s period.
            assert len(starts) == 1
            trigger.ask()
            while len(starts) < 2:
                await anyio.sleep(0.01)
    assert starts[1] - starts[0] < 5.0


class RecordingCache:
    def __init__(self) -> None:
        self.events: list[ObjectEvent] = []
        self.replaced: list[str] = []

    def apply(self, event: ObjectEvent) -> None:
        self.events.append(event)

    def replace(self, kind: str, objects: list[Mapping[str, Any]]) -> None:
        self.replaced.append(kind)


def pod(name: str, *, scheduler: str = "numasched", node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": []}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "ns"}, "spec": spec}


@pytest.mark.parametrize(
    ("event", "pulls"),
    [
        (ObjectEvent("Pod", EventType.ADDED, pod("new")), True),
        (ObjectEvent("Pod", EventType.MODIFIED, pod("reported")), False),
        (ObjectEvent("Pod", EventType.ADDED, pod("theirs", scheduler="default-scheduler")), False),
        (ObjectEvent("Pod", EventType.ADDED, pod("bound", node="n0")), False),
        (ObjectEvent("Pod", EventType.ADDED, {"kind": "Pod", "metadata": {"name": "odd"}, "spec": "not a map"}), False),
        (ObjectEvent("Node", EventType.ADDED, {"kind": "Node", "metadata": {"name": "n0"}}), False),
    ],
)
def test_only_a_new_unbound_pod_of_ours_pulls_the_trigger(event: ObjectEvent, pulls: bool) -> None:
    cache = RecordingCache()
    trigger = CycleTrigger()
    watch = ArrivalWatch(cache, trigger, frozenset({"numasched"}))
    watch.apply(event)
    assert cache.events == [event]
    assert trigger.asked() is pulls


def test_a_relist_with_a_waiting_pod_pulls_the_trigger() -> None:
    cache = RecordingCache()
    trigger = CycleTrigger()
    watch = ArrivalWatch(cache, trigger, frozenset({"numasched"}))
    watch.replace("Pod", [pod("bound", node="n0")])
    assert not trigger.asked()
    watch.replace("Pod", [pod("bound", node="n0"), pod("waiting")])
    assert trigger.asked()
    assert cache.replaced == ["Pod", "Pod"]


class FreezeProbe:
    """An action that notes how many objects are frozen while the session runs."""

    name = "freeze-probe"

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.collecting: list[bool] = []
        self.switch_interval: list[float] = []

    def execute(self, ssn: Any) -> None:
        self.seen.append(gc.get_freeze_count())
        self.collecting.append(gc.isenabled())
        self.switch_interval.append(sys.getswitchinterval())


@pytest.mark.anyio
async def test_the_long_lived_objects_sit_out_the_collector_during_the_session_only() -> None:
    gc.unfreeze()
    registry = default_registry()
    probe = FreezeProbe()
    registry.register_action("freeze-probe", probe)
    config = SchedulerConfig(actions=("freeze-probe",))
    await schedule_cycle(EmptyCache(), config, registry, NoBinder(), NoReporter())
    # Frozen while deciding (the cache, the snapshot, everything alive then), thawed after.
    assert probe.seen[0] > 1000
    assert gc.get_freeze_count() == 0
    # No automatic collection and a short switch interval while deciding, both back after.
    assert probe.collecting[0] is False and probe.switch_interval[0] <= SESSION_SWITCH_INTERVAL_S
    assert gc.isenabled() and sys.getswitchinterval() > SESSION_SWITCH_INTERVAL_S
    await schedule_cycle(EmptyCache(), config, registry, NoBinder(), NoReporter(), freeze=False)
    assert probe.seen[1] == 0
    assert probe.collecting[1] is True


def test_a_session_runs_without_collection_and_with_a_short_switch_interval_and_both_come_back() -> None:
    before = sys.getswitchinterval()
    assert gc.isenabled()
    first = pause_collection()
    assert not gc.isenabled() and sys.getswitchinterval() <= SESSION_SWITCH_INTERVAL_S
    # A second session overlapping the first (two loops in one process), ending first or last.
    second = pause_collection()
    resume_collection(first)
    resume_collection(second)
    assert gc.isenabled() and sys.getswitchinterval() == before
    first = pause_collection()
    second = pause_collection()
    resume_collection(second)
    assert sys.getswitchinterval() <= SESSION_SWITCH_INTERVAL_S
    resume_collection(first)
    assert gc.isenabled() and sys.getswitchinterval() == before
