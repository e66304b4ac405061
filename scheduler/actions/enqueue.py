"""enqueue: admit PodGroups from Pending to Inqueue when the plugins let them in (Volcano)."""

from __future__ import annotations

import structlog

from numasched.api.job import JobInfo
from numasched.scheduler.framework.session import Session

_log = structlog.get_logger(__name__)

PHASE_PENDING = "Pending"
PHASE_INQUEUE = "Inqueue"
QUEUE_OPEN = "Open"


def is_pending(job: JobInfo) -> bool:
    """A PodGroup not admitted yet; a pod without a PodGroup is never held back here."""
    return job.has_pod_group and job.pod_group_phase in ("", PHASE_PENDING)


class EnqueueAction:
    name = "enqueue"

    def execute(self, ssn: Session) -> None:
        for job in ssn.sorted_jobs(job for job in ssn.jobs.values() if is_pending(job)):
            if ssn.should_stop():
                return
            queue = ssn.queue_of(job)
            if queue.state != QUEUE_OPEN:
                continue
            # As Volcano: a PodGroup without minResources asks for nothing up front and is admitted.
            if job.min_resources is None or ssn.job_enqueueable(job):
                job.pod_group_phase = PHASE_INQUEUE
                ssn.set_job_status(job, PHASE_INQUEUE)
                _log.debug("pod group enqueued", job=job.key, queue=queue.name)
