"""overcommit: admit PodGroups while the cluster, scaled by a factor, can hold what is admitted
(Volcano's overcommit plugin, argument `overcommit-factor`, default 1.2).

jobEnqueued: a PodGroup with minResources is admitted while the minResources of every admitted
PodGroup plus its own stay within total allocatable x factor - used, compared on the dimensions
it asks for. A PodGroup without minResources is always admitted. A factor below 1 is refused
when the configuration loads (Volcano falls back to 1.2 with a log line; a refusal names it).
"""

from __future__ import annotations

from numasched.api.job import JobInfo
from numasched.api.resource import Resource
from numasched.plugins import queue_share as qs
from numasched.scheduler.framework.arguments import Arguments
from numasched.scheduler.framework.session import PERMIT, REJECT, Session

PLUGIN_NAME = "overcommit"
FACTOR_ARGUMENT = "overcommit-factor"
DEFAULT_FACTOR = 1.2
PHASE_INQUEUE = "Inqueue"
PHASE_RUNNING = "Running"


def admitted_reservation(job: JobInfo) -> Resource:
    """What an admitted PodGroup counts against the overcommitted cluster: an Inqueue one its
    whole minResources, a Running one with minMember tasks placed what it has not placed yet."""
    if job.min_resources is None:
        return Resource()
    if job.pod_group_phase == PHASE_INQUEUE:
        return job.min_resources.clone()
    if job.pod_group_phase == PHASE_RUNNING and job.ready_task_num() >= job.min_available:
        return qs.inqueue_part(job)
    return Resource()


def could_enqueue(job: JobInfo, idle: Resource, inqueue: Resource) -> bool:
    if job.min_resources is None:
        return True
    wanted = inqueue.clone().add(job.min_resources)
    return not qs.exceeded_names(wanted, idle, job.min_resources)


class OvercommitPlugin:
    name = PLUGIN_NAME

    def __init__(self, arguments: Arguments) -> None:
        self.arguments = arguments
        self.factor = arguments.get_float(FACTOR_ARGUMENT, DEFAULT_FACTOR)
        if self.factor < 1.0:
            raise arguments.invalid(FACTOR_ARGUMENT, f"must be at least 1.0, got {self.factor}")
        self.idle = Resource()
        self.inqueue = Resource()

    def on_session_open(self, ssn: Session) -> None:
        total = qs.total(node.allocatable for node in ssn.nodes.values())
        used = qs.total(node.used for node in ssn.nodes.values())
        self.idle = qs.scaled(total, self.factor).sub(used)
        self.inqueue = qs.total(admitted_reservation(job) for job in ssn.jobs.values())
        watch = qs.EnqueuedWatch(self._enqueued)

        def job_enqueueable(job: JobInfo) -> int:
            watch.settle()
            if could_enqueue(job, self.idle, self.inqueue):
                watch.permitted(job)
                return PERMIT
            return REJECT

        ssn.add_job_enqueueable_fn(self.name, job_enqueueable)

    def _enqueued(self, job: JobInfo) -> None:
        if job.min_resources is not None:
            self.inqueue.add(job.min_resources)

    def on_session_close(self, ssn: Session) -> None:
        self.idle = Resource()
        self.inqueue = Resource()


def build(arguments: Arguments) -> OvercommitPlugin:
    return OvercommitPlugin(arguments)
