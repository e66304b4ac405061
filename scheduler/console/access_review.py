"""The cluster decides who may use the console: the bearer token is checked with a TokenReview
and the request authorised with a SubjectAccessReview, as kube-scheduler's secure serving
delegates authentication and authorisation. Every review call is bounded by a timeout; a review
that cannot be made answers 503 and never lets the request through.

Answers are kept for a few seconds per (token, request attributes), so a console refreshing every
two seconds does not send two reviews per refresh.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import anyio
import structlog
from kubernetes_asyncio import client

from numasched.cache.kube.informer import ApiStatusError, read_status
from numasched.scheduler.console.access import AccessRequest, Decision

log = structlog.get_logger("numasched.console")

DEFAULT_REVIEW_TIMEOUT_S = 5.0
DEFAULT_DECISION_TTL_S = 10.0
# Decisions kept at most (distinct tokens times request kinds); the oldest go first.
MAX_KEPT_DECISIONS = 1024


class ClusterReviewAccess:
    """TokenReview, then SubjectAccessReview, against the scheduler's API server."""

    def __init__(
        self,
        api_client: client.ApiClient,
        *,
        timeout_s: float = DEFAULT_REVIEW_TIMEOUT_S,
        ttl_s: float = DEFAULT_DECISION_TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._authentication: Any = client.AuthenticationV1Api(api_client)
        self._authorization: Any = client.AuthorizationV1Api(api_client)
        self._timeout_s = timeout_s
        self._ttl_s = ttl_s
        self._clock = clock
        self._decisions: dict[tuple[str, AccessRequest], tuple[float, Decision]] = {}

    async def decide(self, token: str | None, request: AccessRequest) -> Decision:
        if token is None:
            return Decision(False, 401, reason="no bearer token (Authorization: Bearer <token>)")
        key = (hashlib.sha256(token.encode("utf-8")).hexdigest(), request)
        now = self._clock()
        kept = self._decisions.get(key)
        if kept is not None and now - kept[0] < self._ttl_s:
            return kept[1]
        decision = await self._review(token, request)
        if decision.status != 503:
            # A review that could not be made is tried again on the next request.
            if len(self._decisions) >= MAX_KEPT_DECISIONS:
                self._decisions.pop(next(iter(self._decisions)))
            self._decisions[key] = (now, decision)
        return decision

    async def _review(self, token: str, request: AccessRequest) -> Decision:
        try:
            with anyio.fail_after(self._timeout_s):
                review = await _json_or_raise(
                    await self._authentication.create_token_review(
                        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
                        _preload_content=False,
                        _request_timeout=self._timeout_s,
                    )
                )
                status = _mapping(review.get("status"))
                user = _mapping(status.get("user"))
                if status.get("authenticated") is not True or not user:
                    reason = str(status.get("error") or "token not authenticated")
                    return Decision(False, 401, reason=f"authentication failed: {reason}")
                spec: dict[str, Any] = {
                    "user": str(user.get("username") or ""),
                    "groups": list(user.get("groups") or []),
                    "uid": str(user.get("uid") or ""),
                    "extra": dict(_mapping(user.get("extra"))),
                    **request.attributes(),
                }
                answer = await _json_or_raise(
                    await self._authorization.create_subject_access_review(
                        {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
                        _preload_content=False,
                        _request_timeout=self._timeout_s,
                    )
                )
        except TimeoutError:
            log.warning("access review timed out", request=request.describe(), timeout=self._timeout_s)
            return Decision(False, 503, reason=f"the access review did not answer within {self._timeout_s:g}s")
        except (ApiStatusError, aiohttp.ClientError, OSError, ValueError) as error:
            log.warning("access review failed", request=request.describe(), error=str(error))
            return Decision(False, 503, reason=f"the access review failed: {error}")
        username = spec["user"]
        verdict = _mapping(answer.get("status"))
        if verdict.get("allowed") is True and verdict.get("denied") is not True:
            return Decision(True, user=username)
        why = str(verdict.get("reason") or "no rule allows it")
        return Decision(False, 403, user=username, reason=f"{username} may not {request.describe()}: {why}")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


async def _json_or_raise(response: Any) -> dict[str, Any]:
    if not 200 <= response.status < 300:
        raise await read_status(response)
    try:
        body = await response.json(content_type=None)
    finally:
        response.release()
    if not isinstance(body, dict):
        raise ValueError(f"expected a JSON object from the API server, got {type(body).__name__}")
    return body
