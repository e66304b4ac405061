"""The allocate action's predicate scan on arrays against a plain loop written here: for random
clusters whose nodes change between scans, random scan sizes and both kinds of scan (sampled from
the session's offset, first fit), the nodes found, their order, the offset left and the nodes
recorded as failing are those of the walk kube-scheduler describes (start at the offset, visit
nodes in order, stop once enough passed)."""

from __future__ import annotations

import random
from collections.abc import Hashable

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from numasched.api.node import NodeInfo
from numasched.api.resource import Resource
from numasched.api.snapshot import ClusterSnapshot
from numasched.api.task import TaskInfo
from numasched.conf.model import PluginOption, SchedulerConfig, Tier
from numasched.scheduler.actions.allocate import feasible_nodes
from numasched.scheduler.builtin import default_registry
from numasched.scheduler.framework.equivalence import Candidates, EquivalenceMemo, NodeIndex, NodeSlots
from numasched.scheduler.framework.session import Session
from numasched.scheduler.framework.status import SUCCESS, Status, StatusCode


class TablePredicate:
    """Passes a node when the table says so for the pod's colour; declares it reads the colour."""

    name = "table"

    def __init__(self) -> None:
        self.passes: dict[tuple[str, str], bool] = {}

    def equivalence_key(self, task: TaskInfo) -> Hashable:
        return task.labels["colour"]

    def on_session_open(self, ssn: Session) -> None:
        ssn.add_predicate_fn(self.name, self.predicate)

    def on_session_close(self, ssn: Session) -> None:
        return None

    def predicate(self, task: TaskInfo, node: NodeInfo) -> Status:
        if self.passes[(node.name, task.labels["colour"])]:
            return SUCCESS
        # A reason that differs between nodes (but does not name one), so a reason read from
        # another node's slot shows.
        return Status(StatusCode.UNSCHEDULABLE, f"node(s) say no ({len(node.name) % 2 + int(node.name[-1]) % 3})")


def pod(uid: str, colour: str) -> TaskInfo:
    request = Resource(milli_cpu=100)
    return TaskInfo(
        uid=uid,
        namespace="ns",
        name=uid,
        job_id=uid,
        resreq=request,
        init_resreq=request.clone(),
        labels={"colour": colour},
    )


COLOURS = ("blue", "red")

scan = st.tuples(
    st.sampled_from(COLOURS),
    st.one_of(st.none(), st.integers(min_value=1, max_value=12)),  # nodes to find (None: all)
    st.booleans(),  # first fit
    st.lists(st.tuples(st.integers(min_value=0, max_value=19), st.sampled_from(COLOURS), st.booleans()), max_size=4),
)


@settings(max_examples=120, deadline=None)
@given(
    size=st.integers(min_value=1, max_value=20),
    initial=st.lists(st.booleans(), min_size=40, max_size=40),
    scans=st.lists(scan, min_size=1, max_size=12),
    slot_order=st.randoms(use_true_random=False),
)
def test_the_array_scan_walks_as_the_plain_loop(
    size: int,
    initial: list[bool],
    scans: list[tuple[str, int | None, bool, list[tuple[int, str, bool]]]],
    slot_order: random.Random,
) -> None:
    nodes = [NodeInfo.create(f"n{index:02d}", Resource(milli_cpu=1000)) for index in range(size)]
    table = TablePredicate()
    for index, node in enumerate(nodes):
        for offset, colour in enumerate(COLOURS):
            table.passes[(node.name, colour)] = initial[2 * index + offset]
    registry = default_registry()
    registry.register_plugin("table", lambda arguments: table)
    conf = SchedulerConfig(actions=("allocate",), tiers=(Tier((PluginOption("table"),)),))
    ssn = Session(ClusterSnapshot(nodes={node.name: node for node in nodes}), conf, registry)
    ssn.open()
    memo = EquivalenceMemo()
    memo.bind(conf)
    # The memo's slots given in some order of its own (another action's, an earlier session's).
    names = [node.name for node in nodes]
    slot_order.shuffle(names)
    memo.slots.of(names)
    ssn.memo = memo
    offset = 0
    for number, (colour, to_find, first_fit, changes) in enumerate(scans):
        # The cluster changes between scans: a node's answer flips and the node says so.
        for index, changed_colour, passes in changes:
            if index < size:
                table.passes[(nodes[index].name, changed_colour)] = passes
                nodes[index].touch()
        task = pod(f"p{number}", colour)
        found = feasible_nodes(ssn, task, nodes, check_resources=False, nodes_to_find=to_find, first_fit=first_fit)
        # The plain walk.
        sampled = not first_fit and to_find is not None and to_find < size
        start = offset % size if sampled else 0
        wanted = 1 if first_fit else to_find if sampled and to_find is not None else size
        expected: list[str] = []
        failing: list[str] = []
        visited = 0
        for step in range(size):
            node = nodes[(start + step) % size]
            visited += 1
            if table.passes[(node.name, colour)]:
                expected.append(node.name)
                if len(expected) >= wanted:
                    break
            else:
                failing.append(node.name)
        if sampled:
            offset = (start + visited) % size
        assert [node.name for node in found] == expected
        assert ssn.node_scan_offset == offset
        recorded = ssn.fit_errors.get(task.uid, {})
        assert sorted(recorded) == sorted(failing)
        for name, reasons in recorded.items():
            assert [reason.reason for reason in reasons] == [table.predicate(task, ssn.nodes[name]).reason]


def _generations_read_one_by_one(nodes: list[NodeInfo]) -> list[int]:
    return [node.generation for node in nodes]


def test_a_node_index_sees_every_kind_of_node_change_through_the_sessions_touch_log() -> None:
    nodes = [NodeInfo.create(f"n{index}", Resource(milli_cpu=4000)) for index in range(4)]
    conf = SchedulerConfig(actions=("allocate",), tiers=())
    ssn = Session(ClusterSnapshot(nodes={node.name: node for node in nodes}), conf, default_registry())
    index = ssn.node_index(nodes)
    assert index.generations().tolist() == _generations_read_one_by_one(nodes)
    task = pod("p", "red")
    nodes[1].add_task(task)
    nodes[2].touch()
    nodes[3].set_topology(None, "rejected: test")
    first = index.generations()
    assert first.tolist() == _generations_read_one_by_one(nodes)
    nodes[1].remove_task(task)
    # An array handed out earlier is the nodes as they were then, not a view that moves.
    assert first.tolist() != _generations_read_one_by_one(nodes)
    assert index.generations().tolist() == _generations_read_one_by_one(nodes)
    ssn.release()
    assert all(node.touch_log is None for node in nodes)


def test_a_node_changed_again_right_after_a_read_is_seen_though_listed_once() -> None:
    nodes = [NodeInfo.create(f"n{index}", Resource(milli_cpu=4000)) for index in range(3)]
    conf = SchedulerConfig(actions=("allocate",), tiers=())
    ssn = Session(ClusterSnapshot(nodes={node.name: node for node in nodes}), conf, default_registry())
    index = ssn.node_index(nodes)
    nodes[2].touch()
    nodes[2].touch()
    assert index.generations().tolist() == _generations_read_one_by_one(nodes)
    # The last node listed changes again after the read: it is not listed again, yet read again.
    nodes[2].add_task(pod("p", "red"))
    assert index.generations().tolist() == _generations_read_one_by_one(nodes)
    nodes[0].touch()
    nodes[2].touch()
    assert index.generations().tolist() == _generations_read_one_by_one(nodes)


def test_a_second_session_over_nodes_another_session_reports_on_reads_every_node() -> None:
    nodes = [NodeInfo.create(f"n{index}", Resource(milli_cpu=4000)) for index in range(3)]
    conf = SchedulerConfig(actions=("allocate",), tiers=())
    snapshot = ClusterSnapshot(nodes={node.name: node for node in nodes})
    first = Session(snapshot, conf, default_registry())
    second = Session(snapshot, conf, default_registry())
    first_index, second_index = first.node_index(nodes), second.node_index(nodes)
    nodes[0].touch()
    nodes[2].add_task(pod("p", "red"))
    assert first_index.generations().tolist() == _generations_read_one_by_one(nodes)
    assert second_index.generations().tolist() == _generations_read_one_by_one(nodes)
    # The second session leaves the first one's log in place when it is released.
    second.release()
    assert all(node.touch_log is not None for node in nodes)
    first.release()
    assert all(node.touch_log is None for node in nodes)


def test_a_candidate_is_found_by_identity_in_a_scan_and_in_a_plain_list() -> None:
    nodes = [NodeInfo.create(f"n{i}", Resource(milli_cpu=1000)) for i in range(6)]
    index = NodeIndex(nodes, NodeSlots())
    picked = [nodes[4], nodes[1], nodes[5]]
    scanned = Candidates(picked, index, np.array([4, 1, 5], dtype=np.int64), np.zeros(3, dtype=np.int64))
    plain = Candidates(picked)
    for candidates in (scanned, plain):
        assert [candidates.index_of(node) for node in nodes] == [None, 1, None, None, 0, 2]
        # Another object of the same name (another snapshot's node) is not a candidate.
        assert candidates.index_of(NodeInfo.create("n4", Resource(milli_cpu=1000))) is None
    assert index.position_of(nodes[3]) == 3 and index.position_of(NodeInfo.create("n3", Resource())) is None
    # The chosen candidate's position answers for that node only; every other node is searched.
    for candidates in (scanned, plain):
        candidates.chosen_at = 2
        assert [candidates.index_of(node) for node in nodes] == [None, 1, None, None, 0, 2]
        candidates.chosen_at = 7
        assert candidates.index_of(nodes[5]) == 2
