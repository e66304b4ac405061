"""backfill: place best-effort tasks (no CPU or memory request) on the first node whose
predicates pass; they take no resources, so no scoring and no waiting (Volcano)."""

from __future__ import annotations

from numasched.scheduler.actions.allocate import feasible_nodes, schedulable_pending
from numasched.scheduler.actions.enqueue import is_pending
from numasched.scheduler.framework.session import Session
from numasched.scheduler.framework.statement import Statement, settle_job


class BackfillAction:
    name = "backfill"

    def execute(self, ssn: Session) -> None:
        nodes = sorted(ssn.nodes.values(), key=lambda node: node.name)
        for job in ssn.sorted_jobs(ssn.jobs.values()):
            if ssn.should_stop():
                return
            best_effort = schedulable_pending(ssn, job, best_effort=True)
            if not best_effort or is_pending(job):
                continue
            verdict = ssn.job_valid(job)
            if verdict is not None:
                for task in best_effort:
                    task.fit_error = verdict.message or verdict.reason
                continue
            statement = Statement(ssn)
            for task in best_effort:
                pre = ssn.pre_predicate(task)
                if not pre.passed:
                    task.fit_error = pre.reason or f"rejected by {pre.plugin}"
                    continue
                placed = False
                # The first node, in name order, whose predicates pass.
                found = feasible_nodes(ssn, task, nodes, check_resources=False, first_fit=True)
                if found and ssn.fault_of(task) is None:
                    placed = statement.allocate(task, found[0])
                if not placed:
                    fault = ssn.fault_of(task)
                    task.fit_error = fault.message if fault is not None else ssn.fit_error_message(task)
            settle_job(ssn, job, statement)
            for task in job.pending_tasks():
                if task.best_effort and not task.fit_error:
                    task.fit_error = (
                        f"pod group {job.key} is not ready: "
                        f"{job.ready_task_num()} of {job.min_available} required tasks placed"
                    )
