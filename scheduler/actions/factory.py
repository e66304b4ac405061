"""The built-in actions, registered by name (Volcano's actions/factory.go)."""

from __future__ import annotations

from numasched.plugins.accepted_noops import ACCEPTED_NOOP_ACTIONS, AcceptedNoopAction, WarnOnce
from numasched.scheduler.actions.allocate import AllocateAction
from numasched.scheduler.actions.backfill import BackfillAction
from numasched.scheduler.actions.enqueue import EnqueueAction
from numasched.scheduler.actions.preempt import GANG_PREEMPT, PreemptAction
from numasched.scheduler.actions.reclaim import GANG_RECLAIM, ReclaimAction
from numasched.scheduler.framework.registry import Registry


def register_builtin_actions(registry: Registry, warnings: WarnOnce) -> None:
    """enqueue, allocate, backfill, preempt, reclaim, gangpreempt and gangreclaim, and Volcano's
    actions accepted without effect (they warn once through `warnings`)."""
    actions = (
        EnqueueAction(),
        AllocateAction(),
        BackfillAction(),
        PreemptAction(),
        ReclaimAction(),
        PreemptAction(GANG_PREEMPT, gang=True),
        ReclaimAction(GANG_RECLAIM, gang=True),
    )
    for action in actions:
        registry.register_action(action.name, action)
    for name in ACCEPTED_NOOP_ACTIONS:
        registry.register_action(name, AcceptedNoopAction(name, warnings))
