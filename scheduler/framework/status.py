"""Outcomes of extension points, with Volcano's status codes."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence

import attrs


class StatusCode(enum.IntEnum):
    SUCCESS = 0
    ERROR = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    WAIT = 4
    SKIP = 5


# A plugin that skips a task has nothing against the node, so the node still passes.
_PASSING = frozenset({StatusCode.SUCCESS, StatusCode.SKIP})


@attrs.frozen(slots=True)
class Status:
    code: StatusCode = StatusCode.SUCCESS
    reason: str = ""
    plugin: str = ""

    @property
    def passed(self) -> bool:
        return self.code in _PASSING

    @classmethod
    def unschedulable(cls, reason: str, plugin: str = "") -> Status:
        return cls(StatusCode.UNSCHEDULABLE, reason, plugin)


SUCCESS = Status()


@attrs.frozen(slots=True)
class PluginFault:
    """A plugin (or a hint provider it called) raised instead of answering. The task or job it was
    asked about fails this cycle with this fault; every other one goes on."""

    plugin: str
    # Volcano's name of the extension point: predicate, nodeOrder, allocateEvent, jobReady, ...
    extension_point: str
    error: str
    # The task or job key the call was about; "" for an ordering between two.
    subject: str = ""

    @property
    def message(self) -> str:
        return f"plugin {self.plugin or '(unknown)'} failed in {self.extension_point}: {self.error}"

    def status(self) -> Status:
        return Status(StatusCode.ERROR, self.message, self.plugin)


def describe_exception(error: BaseException) -> str:
    """The exception's type and text, cut short: a plugin's message is not trusted to be small."""
    text = str(error)
    if len(text) > 300:
        text = text[:300] + "..."
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@attrs.frozen(slots=True)
class ValidateResult:
    """A job validity verdict (Volcano's ValidateResult)."""

    passed: bool
    reason: str = ""
    message: str = ""


def fit_error_summary(total_nodes: int, per_node: Mapping[str, Sequence[Status]]) -> str:
    """kube-scheduler's message: "0/12 nodes are available: 8 Insufficient nvidia.com/gpu, 4 ...".

    A reason counts once per node; reasons are listed by how many nodes gave them, most first,
    then alphabetically, so the message is the same for the same cluster.
    """
    counts: dict[str, int] = {}
    for statuses in per_node.values():
        for reason in {status.reason or f"rejected by {status.plugin or 'a plugin'}" for status in statuses}:
            counts[reason] = counts.get(reason, 0) + 1
    head = f"0/{total_nodes} nodes are available"
    if not counts:
        return f"{head}: no nodes in the cluster." if total_nodes == 0 else f"{head}."
    histogram = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    return f"{head}: " + ", ".join(f"{count} {reason}" for reason, count in histogram) + "."
