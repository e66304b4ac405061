"""Who may use the console: what a request is reviewed as, and the decisions. The cluster's
reviews (TokenReview, SubjectAccessReview) are in access_review.py, apart, so a simulation's
console loads no Kubernetes client.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import attrs


@attrs.frozen(slots=True)
class ResourceRequest:
    """A request on an API object, as a SubjectAccessReview's resourceAttributes."""

    verb: str
    resource: str
    namespace: str = ""
    name: str = ""
    group: str = ""

    def attributes(self) -> dict[str, Any]:
        return {
            "resourceAttributes": {
                "verb": self.verb,
                "group": self.group,
                "resource": self.resource,
                "namespace": self.namespace,
                "name": self.name,
            }
        }

    def describe(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.verb} {self.resource} {where}".strip()


@attrs.frozen(slots=True)
class PathRequest:
    """A request on a URL path, as a SubjectAccessReview's nonResourceAttributes."""

    verb: str
    path: str

    def attributes(self) -> dict[str, Any]:
        return {"nonResourceAttributes": {"verb": self.verb, "path": self.path}}

    def describe(self) -> str:
        return f"{self.verb} {self.path}"


AccessRequest = ResourceRequest | PathRequest


@attrs.frozen(slots=True)
class Decision:
    allowed: bool
    # The HTTP status to answer when not allowed: 401 (no or bad token), 403 (not authorised),
    # 503 (the reviews could not be made).
    status: int = 200
    user: str = ""
    reason: str = ""


class Access(Protocol):
    async def decide(self, token: str | None, request: AccessRequest) -> Decision: ...


class OpenAccess:
    """Everyone may: the simulated cluster's console, and reads when the operator opens them."""

    async def decide(self, token: str | None, request: AccessRequest) -> Decision:
        return Decision(True, user="anonymous")


class ClosedAccess:
    """No one may, with the reason (writes where no cluster can review them)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def decide(self, token: str | None, request: AccessRequest) -> Decision:
        return Decision(False, 403, reason=self.reason)


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The token of an `Authorization: Bearer <token>` header; None when there is none."""
    value = headers.get("Authorization", "")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()
