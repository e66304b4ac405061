"""The engine's equivalence memo: predicate and score answers shared by the pods of one class at
one node generation, never shared where a plugin does not declare what it reads, never across a
change of the node, and dropped with the configuration."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import pytest

import numasched.scheduler.actions.allocate as allocate_action
from numasched.api.job import JobInfo
from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.scheduler.actions.allocate import AllocateAction, feasible_nodes
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.equivalence import (
    IDLE_SESSIONS,
    MAX_CLASSES,
    CandidateParts,
    Candidates,
    EquivalenceMemo,
    Floats,
)
from numasched.scheduler.framework.registry import Registry
from numasched.scheduler.framework.session import Session
from numasched.scheduler.framework.status import SUCCESS, Status, StatusCode

GPU = "nvidia.com/gpu"


def node(index: int, gpus: int = 8) -> NodeInfo:
    return NodeInfo.create(f"n{index:03d}", Resource(milli_cpu=64000, memory=512e9, scalars={GPU: gpus * 1000.0}))


def task(uid: str, *, gpus: int = 1, colour: str = "blue") -> TaskInfo:
    request = Resource(milli_cpu=1000, memory=1e9, scalars={GPU: gpus * 1000.0})
    return TaskInfo(
        uid=uid,
        namespace="ns",
        name=uid,
        job_id=f"job-{uid}",
        resreq=request,
        init_resreq=request.clone(),
        labels={"colour": colour},
    )


class ColourPredicate:
    """Passes nodes whose index parity matches the pod's colour; counts what it is asked.
    With `declares`, it says it reads the pod's colour label only."""

    name = "colour"

    def __init__(self, declares: bool, names_pod: bool = False) -> None:
        self.calls: Counter[tuple[str, str]] = Counter()
        self.scores: Counter[tuple[str, str]] = Counter()
        self.names_pod = names_pod
        if declares:
            self.equivalence_key = self._key

    def _key(self, task: TaskInfo) -> Hashable:
        return task.labels.get("colour")

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_predicate_fn(self.name, self.predicate)
        ssn.add_node_order_fn(self.name, self.score)

    def on_session_close(self, ssn: Session) -> None:
        return None

    def predicate(self, task: TaskInfo, node: NodeInfo) -> Status:
        self.calls[(task.uid, node.name)] += 1
        even = int(node.name[1:]) % 2 == 0
        if even == (task.labels.get("colour") == "blue"):
            return SUCCESS
        reason = f"{task.key} is the wrong colour" if self.names_pod else "node(s) are the wrong colour"
        return Status(StatusCode.UNSCHEDULABLE, reason)

    def score(self, task: TaskInfo, node: NodeInfo) -> float:
        self.scores[(task.uid, node.name)] += 1
        return float(len(node.tasks))


class Undeclared:
    """A predicate plugin that says nothing about what it reads."""

    name = "undeclared"

    def __init__(self, arguments: Arguments) -> None:
        self.calls = 0

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_predicate_fn(self.name, self.predicate)

    def on_session_close(self, ssn: Session) -> None:
        return None

    def predicate(self, task: TaskInfo, node: NodeInfo) -> Status:
        self.calls += 1
        return SUCCESS


def config(*names: str) -> SchedulerConfig:
    return SchedulerConfig(actions=("allocate",), tiers=(Tier(tuple(PluginOption(name) for name in names)),))


def registry_with(colour: ColourPredicate, undeclared: Undeclared | None = None) -> Registry:
    registry = default_registry()
    registry.register_plugin("colour", lambda arguments: colour)
    if undeclared is not None:
        registry.register_plugin("undeclared", lambda arguments: undeclared)
    return registry


def session(nodes: list[NodeInfo], registry: Registry, conf: SchedulerConfig, memo: EquivalenceMemo) -> Session:
    snapshot = ClusterSnapshot(nodes={n.name: n for n in nodes})
    ssn = Session(snapshot, conf, registry)
    ssn.open()
    memo.bind(conf)
    ssn.memo = memo
    return ssn


def test_pods_of_one_class_share_answers_until_the_node_changes() -> None:
    colour = ColourPredicate(declares=True)
    nodes = [node(i) for i in range(6)]
    conf = config("colour")
    ssn = session(nodes, registry_with(colour), conf, EquivalenceMemo())
    first = feasible_nodes(ssn, task("a"), nodes, check_resources=True)
    second = feasible_nodes(ssn, task("b"), nodes, check_resources=True)
    assert [n.name for n in first] == [n.name for n in second] == ["n000", "n002", "n004"]
    assert sum(count for (uid, _), count in colour.calls.items() if uid == "b") == 0
    # A node that changes is asked again, the others are not.
    nodes[2].touch()
    feasible_nodes(ssn, task("c"), nodes, check_resources=True)
    assert [name for (uid, name) in colour.calls if uid == "c"] == ["n002"]
    # Another class is asked everything.
    feasible_nodes(ssn, task("d", colour="red"), nodes, check_resources=True)
    assert len([1 for (uid, _) in colour.calls if uid == "d"]) == 6
    # Fit errors of a memoised answer are the same as those of a computed one.
    assert ssn.fit_error_message(task("b")) == ssn.fit_error_message(task("a"))
    assert ssn.fit_error_message(task("a")) == "0/6 nodes are available: 3 node(s) are the wrong colour."


def test_a_plugin_without_a_key_turns_the_memo_off() -> None:
    colour, undeclared = ColourPredicate(declares=True), Undeclared(Arguments())
    nodes = [node(i) for i in range(4)]
    ssn = session(nodes, registry_with(colour, undeclared), config("colour", "undeclared"), EquivalenceMemo())
    for uid in ("a", "b", "c"):
        feasible_nodes(ssn, task(uid), nodes, check_resources=True)
    assert len(colour.calls) == 3 * 4
    assert ssn.equivalence_class(task("a")) is None and ssn.memo is None


def test_a_reason_naming_the_pod_is_not_shared() -> None:
    colour = ColourPredicate(declares=True, names_pod=True)
    nodes = [node(i) for i in range(4)]
    ssn = session(nodes, registry_with(colour), config("colour"), EquivalenceMemo())
    feasible_nodes(ssn, task("a"), nodes, check_resources=True)
    feasible_nodes(ssn, task("b"), nodes, check_resources=True)
    # Passing nodes are shared; the failing ones (whose reason names the pod) are asked again.
    assert sorted(name for (uid, name) in colour.calls if uid == "b") == ["n001", "n003"]
    assert "ns/b is the wrong colour" in ssn.fit_error_message(task("b"))


def test_the_memo_outlives_the_session_but_not_the_configuration() -> None:
    colour = ColourPredicate(declares=True)
    nodes = [node(i) for i in range(4)]
    registry, conf, memo = registry_with(colour), config("colour"), EquivalenceMemo()
    feasible_nodes(session(nodes, registry, conf, memo), task("a"), nodes, check_resources=True)
    feasible_nodes(session(nodes, registry, conf, memo), task("b"), nodes, check_resources=True)
    assert not [1 for (uid, _) in colour.calls if uid == "b"]
    # A reloaded configuration (another object, even if equal) starts empty.
    feasible_nodes(session(nodes, registry, config("colour"), memo), task("c"), nodes, check_resources=True)
    assert len([1 for (uid, _) in colour.calls if uid == "c"]) == 4


def test_the_memo_keeps_only_the_most_recent_classes() -> None:
    memo = EquivalenceMemo()
    memo.bind(object())
    tables = [memo.answers(("class", index)) for index in range(MAX_CLASSES)]
    assert memo.answers(("class", 0)) is tables[0]  # used again: now the most recent
    memo.answers(("class", MAX_CLASSES))
    assert len(memo) == MAX_CLASSES
    assert memo.answers(("class", 0)) is tables[0]
    assert memo.answers(("class", 2)) is tables[2]
    assert memo.answers(("class", 1)) is not tables[1]  # the least recently used was dropped


def _placements(declares: bool, seed: int) -> dict[str, str]:
    """Allocate random jobs on random nodes; with or without the memo (a plugin that declares no
    key turns it off); returns where each pod went."""
    rng = random.Random(seed)
    nodes = [node(i, gpus=rng.choice((2, 4, 8))) for i in range(rng.randint(3, 12))]
    jobs = {}
    for index in range(rng.randint(5, 40)):
        job = JobInfo(uid=f"j{index:03d}", namespace="ns", name=f"j{index:03d}", creation_timestamp=index)
        job.add_task(task(f"t{index:03d}", gpus=rng.choice((1, 2, 4)), colour=rng.choice(("blue", "red"))))
        job.tasks[f"t{index:03d}"].job_id = job.uid
        jobs[job.uid] = job
    colour = ColourPredicate(declares=True)
    names = ("colour", "predicates", "nodeorder") if declares else ("colour", "predicates", "undeclared", "nodeorder")
    registry = registry_with(colour, Undeclared(Arguments()))
    snapshot = ClusterSnapshot(nodes={n.name: n for n in nodes}, jobs=jobs)
    ssn = Session(snapshot, config(*names), registry)
    ssn.open()
    AllocateAction().execute(ssn)
    placed = {t.uid: t.node_name for job in jobs.values() for t in job.tasks.values()}
    assert (ssn.memo is not None) is declares
    return placed


def test_placements_with_the_memo_are_those_computed_afresh() -> None:
    # The undeclared plugin passes every node: the two runs ask the same questions, one of them
    # answering from the memo.
    for seed in range(30):
        assert _placements(True, seed) == _placements(False, seed)


def test_a_class_that_fits_nowhere_asks_only_the_changed_nodes_again(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    ask = allocate_action._failures_on

    def counted(ssn: Session, task: TaskInfo, node: NodeInfo, *rest: object) -> object:
        asked.append(node.name)
        return ask(ssn, task, node, *rest)  # type: ignore[arg-type]

    monkeypatch.setattr(allocate_action, "_failures_on", counted)
    colour = ColourPredicate(declares=True)
    nodes = [node(i, gpus=1) for i in range(6)]
    ssn = session(nodes, registry_with(colour), config("colour"), EquivalenceMemo())
    greedy = task("a", gpus=2)  # no node has 2 GPUs
    assert feasible_nodes(ssn, greedy, nodes, check_resources=True, nodes_to_find=3) == []
    message = ssn.fit_error_message(greedy)
    assert message == "0/6 nodes are available: 6 Insufficient nvidia.com/gpu."
    assert len(asked) == 6
    assert feasible_nodes(ssn, task("b", gpus=2), nodes, check_resources=True, nodes_to_find=3) == []
    assert len(asked) == 6
    assert ssn.fit_error_message(task("b", gpus=2)) == message
    assert ssn.node_scan_offset == 0
    # A node that grows room is asked again, and the pod goes there.
    grown = Resource(milli_cpu=64000, memory=512e9, scalars={GPU: 4000.0})
    nodes[4].allocatable, nodes[4].idle = grown, grown.clone()
    nodes[4].touch()
    assert [n.name for n in feasible_nodes(ssn, task("c", gpus=2), nodes, check_resources=True)] == ["n004"]
    assert asked[6:7] == ["n004"]


def test_a_class_idle_for_several_sessions_is_dropped() -> None:
    memo = EquivalenceMemo()
    conf = object()
    memo.bind(conf)
    kept, idle = memo.answers("kept"), memo.answers("idle")
    for _ in range(IDLE_SESSIONS + 1):
        memo.bind(conf)
        assert memo.answers("kept") is kept
    assert len(memo) == 1
    assert memo.answers("idle") is not idle


def test_pods_of_one_class_get_one_key_object_and_equal_parts_compare_equal() -> None:
    colour = ColourPredicate(declares=True)
    conf, memo = config("colour"), EquivalenceMemo()
    ssn = session([node(0)], registry_with(colour), conf, memo)
    first, second = ssn.equivalence_class(task("a")), ssn.equivalence_class(task("b"))
    other = ssn.equivalence_class(task("c", colour="red"))
    assert first is second and first != other
    # Another memo builds its own key object for the same parts: equal, and hashed alike.
    again = session([node(0)], registry_with(colour), conf, EquivalenceMemo()).equivalence_class(task("a"))
    assert again is not first and again == first and hash(again) == hash(first)


def test_a_key_that_cannot_be_hashed_is_its_plugins_fault() -> None:
    colour = ColourPredicate(declares=True)
    unhashable: Any = ["not", "hashable"]
    colour.equivalence_key = lambda task: unhashable
    nodes = [node(0)]
    ssn = session(nodes, registry_with(colour), config("colour"), EquivalenceMemo())
    assert ssn.equivalence_class(task("a")) is None
    fault = ssn.fault_of(task("a"))
    assert fault is not None and fault.plugin == "colour" and "unhashable" in fault.message


class TupleParts:
    """Score parts that are tuples (the memo keeps them as they are, not as rows of an array):
    (the node's index, its task count); the number is the index, the score the number doubled."""

    name = "tuples"

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []
        self.seen: list[list[object]] = []

    def equivalence_key(self, task: TaskInfo) -> Hashable:
        return task.labels.get("colour")

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_score_parts(self.name, self.part, self.combine, number=self.number, combine_numbers=self.numbers)

    def on_session_close(self, ssn: Session) -> None:
        return None

    def part(self, task: TaskInfo, node: NodeInfo) -> tuple[int, int]:
        self.asked.append((task.uid, node.name))
        return (int(node.name[1:]), len(node.tasks))

    @staticmethod
    def number(part: object) -> float:
        assert isinstance(part, tuple)
        return float(part[0])

    def combine(self, task: TaskInfo, nodes: Sequence[NodeInfo], parts: Mapping[str, object]) -> dict[str, float]:
        return {name: 2 * self.number(part) for name, part in parts.items()}

    def numbers(self, task: TaskInfo, candidates: Candidates, parts: CandidateParts, numbers: Floats) -> Floats:
        self.seen.append(parts.tolist())
        return numbers * 2


def tuples_session(count: int) -> tuple[TupleParts, list[NodeInfo], Session]:
    """A session of `count` nodes whose only plugin is TupleParts, with a memo."""
    plugin = TupleParts()
    registry = default_registry()
    registry.register_plugin("tuples", lambda arguments: plugin)
    nodes = [node(i) for i in range(count)]
    return plugin, nodes, session(nodes, registry, config("tuples"), EquivalenceMemo())


def test_score_parts_are_kept_per_class_and_node_generation_as_the_plugin_gave_them() -> None:
    plugin, nodes, ssn = tuples_session(4)
    candidates = feasible_nodes(ssn, task("a"), nodes, check_resources=True)
    assert ssn.batch_node_order(task("a"), candidates).tolist() == [0.0, 2.0, 4.0, 6.0]
    assert plugin.seen[-1] == [(0, 0), (1, 0), (2, 0), (3, 0)]
    # Another pod of the class: nothing asked again until a node changes.
    nodes[2].add_task(task("held"))
    candidates = feasible_nodes(ssn, task("b"), nodes, check_resources=True)
    assert ssn.batch_node_order(task("b"), candidates).tolist() == [0.0, 2.0, 4.0, 6.0]
    assert [asked for asked in plugin.asked if asked[0] == "b"] == [("b", "n002")]
    assert plugin.seen[-1] == [(0, 0), (1, 0), (2, 1), (3, 0)]


def test_score_parts_of_few_and_of_many_changed_nodes_are_kept_alike() -> None:
    # Up to a few changed nodes the parts are written one by one, more at once: both keep each
    # node's part and number at its generation.
    plugin, nodes, ssn = tuples_session(40)
    held = 0
    for pod, changed in (("a", range(40)), ("b", (3, 17, 29)), ("c", range(5, 35)), ("d", ())):
        for index in changed if pod != "a" else ():
            held += 1
            nodes[index].add_task(task(f"held-{held}"))
        before = len(plugin.asked)
        candidates = feasible_nodes(ssn, task(pod), nodes, check_resources=True)
        assert ssn.batch_node_order(task(pod), candidates).tolist() == [2.0 * i for i in range(40)]
        assert sorted(name for _, name in plugin.asked[before:]) == [f"n{i:03d}" for i in changed]
        assert plugin.seen[-1] == [(i, len(nodes[i].tasks)) for i in range(40)]


def test_candidate_parts_read_the_table_at_the_candidates_slots() -> None:
    table = np.empty(5, dtype=object)
    for slot, part in enumerate(["s0", ("s", 1), "s2", None, "s4"]):
        table[slot] = part
    # Three candidates, sitting at slots 4, 1 and 3 of the table.
    parts = CandidateParts(table, np.array([4, 1, 3], dtype=np.int64))
    assert len(parts) == 3
    assert [parts[0], parts[1], parts[2]] == ["s4", ("s", 1), None]
    assert parts.at(np.array([2, 0], dtype=np.int64)) == [None, "s4"]
    assert parts.tolist() == ["s4", ("s", 1), None]
    # Without slots the array is in the candidates' order.
    plain = CandidateParts(table[[4, 1]])
    assert len(plain) == 2 and plain[1] == ("s", 1) and plain.at(np.array([1], dtype=np.int64)) == [("s", 1)]
    assert plain.tolist() == ["s4", ("s", 1)]
