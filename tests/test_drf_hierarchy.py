"""Hierarchical DRF (drf with enableHierarchy): the tree's shares, queue order and reclaim votes,
computed by hand for a small tree.

Cluster: 10 CPUs, 10 GB. Queues by their volcano.sh/hierarchy annotations: sci = root/sci
(weights 100/50), dev = root/eng/dev and prod = root/eng/prod (weights 100/50/50). Jobs, each
asking for far more than it holds (so none is saturated): j1 (sci) holds 2 tasks of 2 CPUs + 2 GB,
j21 (dev) 2 CPUs, j22 (prod) 1 GB.

By hand: leaves j1 0.4, j21 0.2, j22 0.1. dev (only j21) 0.2, prod 0.1. eng scales both to the
smallest share 0.1: dev (2 CPUs) x 0.1/0.2 = 1 CPU, prod 1 GB as is: 1 CPU + 1 GB, share 0.1.
sci 0.4. root scales sci x 0.1/0.4 = 1 CPU + 1 GB, plus eng: share 0.2. Queue order: prod (0.1/50
under eng) before dev (0.2/50); both before sci (eng 0.1/50 < sci 0.4/50).
"""

from __future__ import annotations

import pytest

from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot, QueueInfo
from numasched.api.task import TaskInfo, TaskStatus
from numasched.cache.convert_queue import queue_from_object
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.plugins.drf import DrfPlugin
from numasched.plugins.drf_hierarchy import HdrfTree, job_saturated, parse_weight
from numasched.scheduler.actions import queue_points
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.session import Session

GB = 1e9


def queue(name: str, hierarchy: str, weights: str) -> QueueInfo:
    return QueueInfo(name, hierarchy=hierarchy, hierarchy_weights=weights)


QUEUES = [
    queue("sci", "root/sci", "100/50"),
    queue("dev", "root/eng/dev", "100/50/50"),
    queue("prod", "root/eng/prod", "100/50/50"),
]


def job(name: str, queue_name: str, held: list[Resource], asked: Resource, node: NodeInfo) -> JobInfo:
    info = JobInfo(uid=name, namespace="ns", name=name, queue=queue_name)
    for index, request in enumerate(held):
        task = TaskInfo(
            uid=f"{name}-{index}",
            namespace="ns",
            name=f"{name}-{index}",
            job_id=name,
            resreq=request,
            init_resreq=request,
        )
        task.status, task.node_name = TaskStatus.RUNNING, node.name
        node.add_task(task)
        info.add_task(task)
    pending = TaskInfo(
        uid=f"{name}-more", namespace="ns", name=f"{name}-more", job_id=name, resreq=asked, init_resreq=asked
    )
    info.add_task(pending)
    return info


def session(enable: bool = True) -> tuple[Session, DrfPlugin]:
    node = NodeInfo.create("n1", Resource(10000, 10 * GB))
    jobs = [
        job("j1", "sci", [Resource(2000, 2 * GB), Resource(2000, 2 * GB)], Resource(10000, 10 * GB), node),
        job("j21", "dev", [Resource(2000, 0)], Resource(10000, 0), node),
        job("j22", "prod", [Resource(0, 1 * GB)], Resource(0, 10 * GB), node),
    ]
    snapshot = ClusterSnapshot(nodes={"n1": node}, jobs={j.uid: j for j in jobs}, queues={q.name: q for q in QUEUES})
    flags = {"hierarchy": True} if enable else {}
    config = SchedulerConfig(actions=(), tiers=(Tier((PluginOption("drf", flags=flags),)),))
    ssn = Session(snapshot, config, default_registry())
    ssn.open()
    plugin = ssn.plugins["drf"]
    assert isinstance(plugin, DrfPlugin)
    return ssn, plugin


def test_the_tree_shares_by_hand() -> None:
    _, plugin = session()
    tree = plugin.tree
    assert tree is not None
    root = tree.root
    assert root.children is not None
    eng, sci = root.children["eng"], root.children["sci"]
    assert eng.children is not None
    assert eng.children["dev"].share == pytest.approx(0.2)
    assert eng.children["prod"].share == pytest.approx(0.1)
    assert eng.share == pytest.approx(0.1)
    assert eng.allocated.milli_cpu == pytest.approx(1000) and eng.allocated.memory == pytest.approx(1 * GB)
    assert sci.share == pytest.approx(0.4)
    assert root.share == pytest.approx(0.2)
    assert (eng.weight, sci.weight) == (50, 50)
    assert not any(node.saturated for node in (root, eng, sci))


def test_queue_order_follows_the_tree() -> None:
    ssn, _ = session()
    ordered = queue_points.sorted_queues(ssn, [ssn.queues[name] for name in ("sci", "dev", "prod")])
    assert [q.name for q in ordered] == ["prod", "dev", "sci"]


def test_without_the_flag_drf_has_no_queue_order() -> None:
    ssn, plugin = session(enable=False)
    assert plugin.tree is None
    assert plugin.queue_order(ssn.queues["sci"], ssn.queues["prod"]) == 0


def test_reclaim_votes_by_hand() -> None:
    """A 1-CPU task of dev reclaims. Taking either of j1's tasks leaves sci at 0.2 / 50 while eng
    (dev 3 CPUs scaled to prod's 0.1) stays at 0.1 / 50: dev still comes first, so each is a victim.
    Taking j22's 1 GB leaves prod at 0, before dev: not a victim."""
    ssn, plugin = session()
    reclaimer = TaskInfo(
        uid="r", namespace="ns", name="r", job_id="j21", resreq=Resource(1000, 0), init_resreq=Resource(1000, 0)
    )
    candidates = [t for j in ("j1", "j22") for t in ssn.jobs[j].tasks.values() if t.status is TaskStatus.RUNNING]
    victims, _ = plugin.reclaimable(ssn, reclaimer, candidates)
    assert sorted(t.uid for t in victims) == ["j1-0", "j1-1"]
    # The vote works on a copy: the session's tree is as it was.
    assert plugin.tree is not None and plugin.tree.root.share == pytest.approx(0.2)


def test_saturation_and_weights() -> None:
    # Holds all it asks for of CPU: saturated. Asks for memory the cluster has no more of: saturated.
    assert job_saturated(Resource(2000, 0), Resource(2000, 5 * GB), {"cpu", "memory"})
    assert job_saturated(Resource(1000, 1 * GB), Resource(4000, 4 * GB), {"cpu"})
    assert not job_saturated(Resource(1000, 1 * GB), Resource(4000, 4 * GB), {"cpu", "memory"})
    assert [parse_weight(text) for text in ("50", "0.5", "x", "")] == [50.0, 1.0, 1.0, 1.0]
    tree = HdrfTree(Resource(10000, 10 * GB))
    tree.place_job("j", Resource(1000, 0), Resource(2000, 0), "root/a/b", "1/4")  # b's weight missing: 1
    assert tree.root.children is not None
    level_a = tree.root.children["a"]
    assert level_a.children is not None
    assert (level_a.weight, level_a.children["b"].weight) == (4.0, 1.0)


def test_the_annotations_are_read_from_the_queue() -> None:
    obj = {
        "kind": "Queue",
        "metadata": {
            "name": "dev",
            "annotations": {"volcano.sh/hierarchy": "root/eng/dev", "volcano.sh/hierarchy-weights": "1/2/8"},
        },
    }
    read, problems = queue_from_object(obj)
    assert problems == [] and (read.hierarchy, read.hierarchy_weights) == ("root/eng/dev", "1/2/8")
    bad, problems = queue_from_object(
        {"kind": "Queue", "metadata": {"name": "x", "annotations": {"volcano.sh/hierarchy": 3}}}
    )
    assert bad.hierarchy == "" and problems and problems[0].startswith("metadata.annotations[volcano.sh/hierarchy]")
