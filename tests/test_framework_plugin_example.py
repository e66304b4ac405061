"""The scheduler plugin of docs/plugins.md (ZonePreference): it declares its equivalence key, so
the engine's memo stays on beside the built-in plugins, and its score steers pods to their zone."""

from __future__ import annotations

import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.scheduler.actions.allocate import AllocateAction
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.plugin import DeclaresEquivalence
from numasched.scheduler.framework.session import Session

DOC = Path(__file__).resolve().parent.parent / "docs" / "plugins.md"


def example_class() -> Any:
    blocks = [block for block in re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.DOTALL)]
    sources = [block for block in blocks if "class ZonePreference" in block]
    assert len(sources) == 1
    namespace: dict[str, Any] = {
        "Arguments": Arguments,
        "Hashable": Hashable,
        "NodeInfo": NodeInfo,
        "Session": Session,
        "TaskInfo": TaskInfo,
    }
    exec(compile(sources[0], str(DOC), "exec"), namespace)
    return namespace["ZonePreference"]


def node(name: str, zone: str) -> NodeInfo:
    result = NodeInfo.create(name, Resource(milli_cpu=8000, memory=32e9))
    result.labels = {"topology.kubernetes.io/zone": zone}
    return result


def pod(uid: str, zone: str) -> JobInfo:
    request = Resource(milli_cpu=1000, memory=1e9)
    job = JobInfo(uid=f"job-{uid}", namespace="ns", name=uid)
    job.add_task(
        TaskInfo(
            uid=uid,
            namespace="ns",
            name=uid,
            job_id=job.uid,
            resreq=request,
            init_resreq=request.clone(),
            labels={"example.com/zone": zone},
        )
    )
    return job


def test_the_documented_plugin_keeps_the_memo_on_and_places_by_zone() -> None:
    zone_preference = example_class()
    registry = default_registry()
    registry.register_plugin(zone_preference.name, zone_preference)
    assert isinstance(zone_preference(Arguments({})), DeclaresEquivalence)
    nodes = [node(f"n{index}", "east" if index % 2 else "west") for index in range(6)]
    jobs = [pod(f"p{index}", "east" if index < 3 else "west") for index in range(6)]
    config = SchedulerConfig(
        actions=("allocate",),
        tiers=(
            Tier(
                (
                    PluginOption("predicates"),
                    PluginOption("nodeorder"),
                    PluginOption("zone-preference", {"weight": 5}),
                )
            ),
        ),
    )
    snapshot = ClusterSnapshot(nodes={n.name: n for n in nodes}, jobs={job.uid: job for job in jobs})
    ssn = Session(snapshot, config, registry)
    ssn.open()
    AllocateAction().execute(ssn)
    assert ssn.memo is not None
    for job in jobs:
        (task,) = job.tasks.values()
        assert nodes[int(task.node_name[1:])].labels["topology.kubernetes.io/zone"] == task.labels["example.com/zone"]
