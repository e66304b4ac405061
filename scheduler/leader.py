"""Lease-based leader election (coordination.k8s.io/v1), as kube-scheduler does it.

Only the holder of the Lease schedules. A candidate takes the Lease when it is free (no holder, or
released) or when the record has not changed for a whole lease duration on the candidate's own
clock (clocks of different machines are never compared). The leader renews every retry period; if
it cannot renew within the renew deadline it stops leading at once, which is before anyone else
may take the Lease (renew deadline < lease duration). Writes use the Lease's resourceVersion, so
two candidates can never both win the same round.

As in client-go, a renewal round has the renew deadline from its start, an attempt (a read, then
a write) is bounded by what is left of it, and each request by its own timeout within that: a
slow API server (seconds per request) delays a renewal but does not lose the Lease while the
deadline allows the round trip. The leader also never counts on the Lease past a lease duration
after the start of its last successful write, which is the earliest a standby may take it.
"""

from __future__ import annotations

import math
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import anyio
import attrs
import structlog
from kubernetes_asyncio import client

from numasched.cache.kube.binder import micro_time
from numasched.cache.kube.informer import ApiStatusError, read_status

log = structlog.get_logger("numasched.leader")


@attrs.frozen(slots=True)
class LeaseTiming:
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0

    def __attrs_post_init__(self) -> None:
        if not 0 < self.retry_period < self.renew_deadline < self.lease_duration:
            raise ValueError(
                "leader election needs 0 < retry period < renew deadline < lease duration, got "
                f"{self.retry_period} / {self.renew_deadline} / {self.lease_duration}"
            )


DEFAULT_LEASE_TIMING = LeaseTiming()
# Giving the Lease up on shutdown is worth a short wait only: unreleased, it expires anyway.
DEFAULT_RELEASE_TIMEOUT_S = 3.0


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


class LostLease(Exception):
    """Leadership ended without our asking; the caller stops scheduling."""


@attrs.frozen(slots=True)
class _Observed:
    holder: str
    renew_time: str
    transitions: int
    resource_version: str
    # time.monotonic() when this record was first seen in this form.
    seen_at: float


class LeaderElector:
    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        namespace: str,
        name: str = "numasched",
        identity: str | None = None,
        timing: LeaseTiming = DEFAULT_LEASE_TIMING,
        request_timeout: float | None = None,
        release_timeout: float = DEFAULT_RELEASE_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        # Any: in raw mode the client returns the HTTP response, not the model its stubs promise.
        self._api: Any = client.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.timing = timing
        # Each request's own bound; an attempt's requests also share what is left of the renew
        # deadline. Capped by the renew deadline: a request can never outlast a renewal.
        self._request_timeout = min(
            request_timeout if request_timeout is not None else timing.renew_deadline, timing.renew_deadline
        )
        self._release_timeout = release_timeout
        self._clock = clock
        self._observed: _Observed | None = None
        self.is_leader = False
        # Clock reading at the start of the last attempt that wrote our renewTime: the Lease is
        # ours until renew deadline after it, whatever the write's latency was.
        self._renewed_at = 0.0
        # clock value past which the running attempt's requests may not go.
        self._attempt_deadline = math.inf
        self._log = log.bind(lease=f"{namespace}/{name}", identity=self.identity)

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Wait for the Lease, then run lead() while holding it.

        Returns when lead() returns (the Lease is then released). Raises LostLease, with lead()
        cancelled, when the Lease cannot be renewed in time or someone else holds it.
        """
        await self.acquire()
        await self.hold(lead)

    async def hold(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Run lead() while renewing the Lease we hold; release it when lead() returns."""
        lost = False
        async with anyio.create_task_group() as group:

            async def lead_then_stop() -> None:
                await lead()
                group.cancel_scope.cancel()

            async def keep_renewing() -> None:
                nonlocal lost
                await self._renew_until_lost()
                lost = True
                # Not leading from this instant; lead() is cancelled with the group.
                self.is_leader = False
                group.cancel_scope.cancel()

            group.start_soon(keep_renewing)
            group.start_soon(lead_then_stop)
        if lost:
            self.is_leader = False
            raise LostLease(f"lost lease {self.namespace}/{self.name}")
        await self.release()

    async def acquire(self) -> None:
        announced = False
        while True:
            if await self._try_acquire_or_renew():
                self._log.info("became leader")
                self.is_leader = True
                return
            if not announced and self._observed is not None:
                self._log.info("waiting for the lease", holder=self._observed.holder)
                announced = True
            await anyio.sleep(self.timing.retry_period * (1 + 0.2 * (os.urandom(1)[0] / 255)))

    async def _renew_until_lost(self) -> None:
        """Renew every retry period until a round fails. A round (read, write, retried every retry
        period) has the renew deadline from its start, as client-go's; and it never goes past a
        lease duration after the start of our last successful write, since from then on a standby
        may take the Lease. Returns when leadership is lost."""
        timing = self.timing
        while True:
            await anyio.sleep(timing.retry_period)
            deadline = min(self._clock() + timing.renew_deadline, self._renewed_at + timing.lease_duration)
            while True:
                if await self._try_acquire_or_renew(deadline):
                    break
                observed_holder = self._observed.holder if self._observed is not None else ""
                if observed_holder and observed_holder != self.identity:
                    self._log.warning("lease taken by another instance", holder=observed_holder)
                    return
                left = deadline - self._clock()
                if left <= 0:
                    self._log.warning("could not renew the lease within the deadline", deadline=timing.renew_deadline)
                    return
                await anyio.sleep(min(timing.retry_period, left))

    async def release(self) -> None:
        """Give the Lease up (graceful shutdown) so another instance takes over at once."""
        if not self.is_leader or self._observed is None:
            return
        self.is_leader = False
        spec = {
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": None,
            "renewTime": micro_time(),
            "leaseTransitions": self._observed.transitions,
        }
        try:
            self._attempt_deadline = self._clock() + self._release_timeout
            with anyio.fail_after(self._release_timeout):
                await self._write(spec, self._observed.resource_version)
            self._log.info("released the lease")
        except (TimeoutError, ApiStatusError, aiohttp.ClientError, OSError) as error:
            self._log.warning("could not release the lease; it will expire", error=repr(error))

    async def _try_acquire_or_renew(self, deadline: float | None = None) -> bool:
        """One read-then-write round, within `deadline` (a clock value; by default a renew
        deadline from now). True when we hold the Lease afterwards."""
        started = self._clock()
        self._attempt_deadline = deadline if deadline is not None else started + self.timing.renew_deadline
        try:
            with anyio.fail_after(max(0.0, self._attempt_deadline - started)):
                if await self._attempt():
                    self._renewed_at = started
                    return True
                return False
        except (TimeoutError, aiohttp.ClientError, OSError) as error:
            self._log.warning("lease request failed", error=repr(error))
        except ApiStatusError as error:
            if error.status != 409:
                self._log.warning("lease request refused", status=error.status, error=error.message)
        except (ValueError, TypeError, AttributeError) as error:
            # A Lease whose fields are not what coordination.k8s.io/v1 declares: not ours to
            # take or keep this round; the election goes on.
            self._log.warning("lease object unreadable", error=f"{type(error).__name__}: {error}")
        return False

    async def _attempt(self) -> bool:
        now_text = micro_time()
        current = await self._read()
        duration = max(1, math.ceil(self.timing.lease_duration))
        if current is None:
            spec = {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": duration,
                "acquireTime": now_text,
                "renewTime": now_text,
                "leaseTransitions": 0,
            }
            created = await self._create(spec)
            self._observe(created)
            return True
        observed = self._observe(current)
        holder = observed.holder
        if holder and holder != self.identity and self._clock() - observed.seen_at < self._expiry(current):
            return False
        spec = dict(current.get("spec") or {})
        spec.update(
            {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": duration,
                "renewTime": now_text,
            }
        )
        if holder != self.identity:
            spec["acquireTime"] = now_text
            spec["leaseTransitions"] = observed.transitions + 1
        written = await self._write(spec, observed.resource_version)
        self._observe(written)
        return True

    def _expiry(self, lease: dict[str, Any]) -> float:
        declared = (lease.get("spec") or {}).get("leaseDurationSeconds")
        return float(declared) if isinstance(declared, int | float) and declared > 0 else self.timing.lease_duration

    def _observe(self, lease: dict[str, Any]) -> _Observed:
        spec = lease.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        renew_time = str(spec.get("renewTime") or "")
        previous = self._observed
        if previous is not None and (previous.holder, previous.renew_time) == (holder, renew_time):
            seen_at = previous.seen_at
        else:
            seen_at = self._clock()
        self._observed = _Observed(
            holder,
            renew_time,
            int(spec.get("leaseTransitions") or 0),
            str((lease.get("metadata") or {}).get("resourceVersion") or ""),
            seen_at,
        )
        return self._observed

    def _timeout(self) -> float:
        """This request's timeout: its own bound, within what the attempt has left."""
        left = self._attempt_deadline - self._clock()
        if left <= 0:
            raise TimeoutError("no time left in this lease attempt")
        return min(self._request_timeout, left)

    async def _read(self) -> dict[str, Any] | None:
        timeout = self._timeout()
        with anyio.fail_after(timeout):
            response = await self._api.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False, _request_timeout=timeout
            )
        if response.status == 404:
            response.release()
            return None
        return await _json_or_raise(response)

    async def _create(self, spec: dict[str, Any]) -> dict[str, Any]:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }
        timeout = self._timeout()
        with anyio.fail_after(timeout):
            response = await self._api.create_namespaced_lease(
                self.namespace, body, _preload_content=False, _request_timeout=timeout
            )
            return await _json_or_raise(response)

    async def _write(self, spec: dict[str, Any], resource_version: str) -> dict[str, Any]:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace, "resourceVersion": resource_version},
            "spec": spec,
        }
        timeout = self._timeout()
        with anyio.fail_after(timeout):
            response = await self._api.replace_namespaced_lease(
                self.name, self.namespace, body, _preload_content=False, _request_timeout=timeout
            )
            return await _json_or_raise(response)


async def _json_or_raise(response: Any) -> dict[str, Any]:
    if not 200 <= response.status < 300:
        raise await read_status(response)
    try:
        body = await response.json(content_type=None)
    finally:
        response.release()
    if not isinstance(body, dict):
        raise ApiStatusError(int(response.status), "the Lease answer is not a JSON object")
    return body
