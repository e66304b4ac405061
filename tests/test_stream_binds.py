"""Streaming binds: a job reaches the binder as soon as the session commits it (a gang only once
it is whole), while the session goes on deciding; and across that overlap no CPU or device is
ever given to two pods."""

from __future__ import annotations

import json
import random
import threading
from collections.abc import Callable
from typing import Any

import anyio
import pytest
import yaml
from conftest import MACHINES

from numasched.api.allocation import ALLOCATION_ANNOTATION
from numasched.api.idset import IdSet
from numasched.api.task import TaskInfo
from numasched.cache.binder import BindOutcome, BindRequest, BindStatus
from numasched.cache.cache import Cache
from numasched.cache.machine_shapes import machine_objects
from numasched.cache.simcluster import SimCluster
from numasched.conf.defaults import DEFAULT_CONFIG_TEXT
from numasched.conf.loader import load_config_text
from numasched.conf.model import SchedulerConfig
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.registry import Registry
from numasched.scheduler.framework.session import EventHandler, Session
from numasched.scheduler.loop import schedule_cycle

GPU = "nvidia.com/gpu"
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def machine(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((MACHINES / f"{name}.yaml").read_text())
    return loaded


def pod(name: str, cpus: int, gpus: int = 0, group: str = "") -> dict[str, Any]:
    resources: dict[str, str] = {"cpu": str(cpus), "memory": "1Gi"}
    if gpus:
        resources[GPU] = str(gpus)
    metadata: dict[str, Any] = {"name": name, "namespace": "default"}
    if group:
        metadata["annotations"] = {GROUP_ANNOTATION: group}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "schedulerName": "numasched",
            "containers": [{"name": "main", "image": "x", "resources": {"requests": resources, "limits": resources}}],
        },
        "status": {"phase": "Pending"},
    }


def pod_group(name: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"minMember": min_member, "queue": "default"},
    }


def cluster_of(nodes: list[tuple[str, str]]) -> SimCluster:
    cluster = SimCluster(Cache())
    for name, shape in nodes:
        node, topology = machine_objects(machine(shape), name)
        cluster.add(node, "test")
        cluster.add(topology, "test")
    return cluster


class Journal:
    """Decisions (from the session's thread) and binds (from the event loop), in one order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.entries: list[tuple[str, str]] = []
        self.first_bind = threading.Event()

    def note(self, what: str, name: str) -> None:
        with self.lock:
            self.entries.append((what, name))
        if what == "bind":
            self.first_bind.set()

    def indexes(self, what: str) -> list[int]:
        return [index for index, (kind, _) in enumerate(self.entries) if kind == what]


class Recorder:
    """An event handler plugin noting each placement; after `pause_after` placements it waits
    (bounded) for the first bind, so a binder that is only called after the session ends is
    caught by the order of the journal, not by timing."""

    name = "recorder"

    def __init__(self, journal: Journal, pause_after: int) -> None:
        self.journal = journal
        self.pause_after = pause_after
        self.placed = 0

    def on_session_open(self, ssn: Session) -> None:
        def allocate(event: Any) -> None:
            task: TaskInfo = event.task
            self.journal.note("decide", task.name)
            self.placed += 1
            if self.placed == self.pause_after:
                self.journal.first_bind.wait(timeout=3.0)

        ssn.add_event_handler(EventHandler(allocate=allocate))

    def on_session_close(self, ssn: Session) -> None:
        return None


class JournalBinder:
    """The simulated cluster's binder, noting each bind; optionally slow and failing at random."""

    def __init__(
        self, cluster: SimCluster, journal: Journal, *, seed: int = 0, failure_ratio: float = 0.0, delay_s: float = 0.0
    ) -> None:
        self.cluster = cluster
        self.journal = journal
        self.random = random.Random(seed)
        self.failure_ratio = failure_ratio
        self.delay_s = delay_s

    async def bind(self, request: BindRequest) -> BindOutcome:
        self.journal.note("bind", request.task.name)
        if self.delay_s:
            await anyio.sleep(self.random.uniform(0, self.delay_s))
        if self.random.random() < self.failure_ratio:
            return BindOutcome(BindStatus.FAILED, "503: injected")
        return await self.cluster.bind(request)


def recording_setup(journal: Journal, pause_after: int) -> tuple[SchedulerConfig, Registry]:
    registry = default_registry()
    registry.register_plugin("recorder", lambda arguments: Recorder(journal, pause_after))
    text = DEFAULT_CONFIG_TEXT.replace("  - name: predicates\n", "  - name: predicates\n  - name: recorder\n")
    assert "name: recorder" in text
    config = load_config_text(text, "test", registry.known_plugin_names(), registry.known_action_names())
    return config, registry


def bound_names(cluster: SimCluster) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.pods() if p.get("spec", {}).get("nodeName")}


@pytest.mark.anyio
async def test_the_first_bind_reaches_the_binder_before_the_cycles_last_decision() -> None:
    cluster = cluster_of([(f"n{index:02d}", "epyc-1s-nps4") for index in range(20)])
    names = [f"p{index:03d}" for index in range(300)]
    for name in names:
        cluster.add(pod(name, 1), "test")
    journal = Journal()
    config, registry = recording_setup(journal, pause_after=10)
    with anyio.fail_after(60):
        result = await schedule_cycle(cluster.cache, config, registry, JournalBinder(cluster, journal), cluster)
    decisions, binds = journal.indexes("decide"), journal.indexes("bind")
    assert len(decisions) == len(binds) == len(names)
    # One cycle decided all 300, and its first bind came while it was still deciding.
    assert binds[0] < decisions[-1], journal.entries[:20]
    assert bound_names(cluster) == set(names)
    assert len(result.session.bind_requests) == len(names)


@pytest.mark.anyio
async def test_a_gang_is_sent_whole_or_not_at_all() -> None:
    # One 8-GPU node: the first gang (3 x 2 GPUs) fits, the second (3 x 2 GPUs) does not after it.
    cluster = cluster_of([("gpu-0", "pcie-8gpu-2numa")])
    cluster.add(pod_group("first", 3), "test")
    cluster.add(pod_group("second", 3), "test")
    for index in range(3):
        cluster.add(pod(f"first-{index}", 2, gpus=2, group="first"), "test")
        cluster.add(pod(f"second-{index}", 2, gpus=2, group="second"), "test")
    journal = Journal()
    config, registry = recording_setup(journal, pause_after=0)
    with anyio.fail_after(60):
        for _ in range(3):
            await schedule_cycle(cluster.cache, config, registry, JournalBinder(cluster, journal), cluster)
    assert bound_names(cluster) == {"first-0", "first-1", "first-2"}
    sent = [name for what, name in journal.entries if what == "bind"]
    assert sorted(sent) == ["first-0", "first-1", "first-2"]
    # No member was sent before the whole gang had been decided.
    first_bind = journal.indexes("bind")[0]
    decided_before = {name for what, name in journal.entries[:first_bind] if what == "decide"}
    assert {"first-0", "first-1", "first-2"} <= decided_before


def held_ids(cluster: SimCluster) -> dict[tuple[str, str, str], list[str]]:
    """(node, kind, id) -> the bound pods holding it, read from the allocation annotations the
    binds carried (the test's own reading of the published JSON, not the scheduler's ledger)."""
    holders: dict[tuple[str, str, str], list[str]] = {}
    for obj in cluster.pods():
        node = obj.get("spec", {}).get("nodeName")
        text = obj.get("metadata", {}).get("annotations", {}).get(ALLOCATION_ANNOTATION)
        if not node or not text:
            continue
        name = obj["metadata"]["name"]
        for container in json.loads(text)["containers"].values():
            for cpu in IdSet.parse(container.get("cpuset", "")):
                holders.setdefault((node, "cpu", str(cpu)), []).append(name)
            for resource, ids in container.get("devices", {}).items():
                for device in ids:
                    holders.setdefault((node, resource, device), []).append(name)
    return holders


@pytest.mark.anyio
@pytest.mark.parametrize("seed", [0, 1, 2])
async def test_no_cpu_or_device_is_held_twice_across_streamed_binds(seed: int) -> None:
    shapes = ["pcie-8gpu-2numa", "epyc-1s-nps4", "dgx-a100"]
    cluster = cluster_of([(f"n{index:02d}", shapes[index % len(shapes)]) for index in range(12)])
    rng = random.Random(seed)
    journal = Journal()
    config, registry = recording_setup(journal, pause_after=0)
    binder = JournalBinder(cluster, journal, seed=seed, failure_ratio=0.1, delay_s=0.002)
    counter = 0

    def wave(size: int) -> None:
        nonlocal counter
        for _ in range(size):
            counter += 1
            if rng.random() < 0.1:
                group = f"g{counter}"
                cluster.add(pod_group(group, 2), "test")
                for member in range(2):
                    cluster.add(pod(f"{group}-{member}", rng.randint(1, 4), gpus=1, group=group), "test")
            else:
                gpus = rng.choice([0, 0, 0, 1, 2])
                cluster.add(pod(f"p{counter}", rng.randint(1, 8), gpus=gpus), "test")

    run: Callable[[], Any] = lambda: schedule_cycle(cluster.cache, config, registry, binder, cluster)  # noqa: E731
    with anyio.fail_after(120):
        for _ in range(4):
            wave(80)
            await run()
        for _ in range(3):
            await run()
    doubles = {key: pods for key, pods in held_ids(cluster).items() if len(pods) > 1}
    assert doubles == {}
    assert all(count == 1 for count in cluster.bind_count.values())
    # The burst overran the cluster's CPUs and GPUs: enough was bound for the check to mean something.
    assert len(bound_names(cluster)) > 100
