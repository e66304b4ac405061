"""TokenReview and SubjectAccessReview for the test API server: which tokens name which users, and
what each user may do. Answers as the real API server does (201 with the review's status filled in)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

JsonObject = dict[str, Any]

AUTHENTICATION = ("apis", "authentication.k8s.io", "v1", "tokenreviews")
AUTHORIZATION = ("apis", "authorization.k8s.io", "v1", "subjectaccessreviews")


@dataclass
class AccessReviews:
    # token -> (username, groups)
    users: dict[str, tuple[str, tuple[str, ...]]] = field(default_factory=dict)
    # (username, verb, resource, namespace, name) a user may do; resource "" with a path below for URLs
    allowed: set[tuple[str, str, str, str, str]] = field(default_factory=set)
    # (username, verb, path) on non-resource URLs
    allowed_paths: set[tuple[str, str, str]] = field(default_factory=set)
    # Every review received, in order: ("TokenReview" | "SubjectAccessReview", spec)
    received: list[tuple[str, JsonObject]] = field(default_factory=list)

    def add_user(self, token: str, username: str, groups: tuple[str, ...] = ("system:authenticated",)) -> None:
        self.users[token] = (username, groups)

    def allow(self, username: str, verb: str, resource: str, namespace: str = "", name: str = "") -> None:
        self.allowed.add((username, verb, resource, namespace, name))

    def allow_path(self, username: str, verb: str, path: str) -> None:
        self.allowed_paths.add((username, verb, path))

    def handler(self, method: str, parts: list[str]) -> Callable[[JsonObject], JsonObject] | None:
        if method != "POST":
            return None
        if tuple(parts) == AUTHENTICATION:
            return self.token_review
        if tuple(parts) == AUTHORIZATION:
            return self.subject_access_review
        return None

    def token_review(self, body: JsonObject) -> JsonObject:
        spec = body.get("spec") or {}
        self.received.append(("TokenReview", spec))
        user = self.users.get(str(spec.get("token") or ""))
        status: JsonObject = (
            {"authenticated": True, "user": {"username": user[0], "groups": list(user[1]), "uid": f"uid-{user[0]}"}}
            if user is not None
            else {"authenticated": False, "error": "invalid bearer token"}
        )
        return {**body, "status": status}

    def subject_access_review(self, body: JsonObject) -> JsonObject:
        spec = body.get("spec") or {}
        self.received.append(("SubjectAccessReview", spec))
        user = str(spec.get("user") or "")
        resource = spec.get("resourceAttributes")
        path = spec.get("nonResourceAttributes")
        if isinstance(resource, dict):
            wanted = (
                user,
                str(resource.get("verb") or ""),
                str(resource.get("resource") or ""),
                str(resource.get("namespace") or ""),
                str(resource.get("name") or ""),
            )
            allowed = wanted in self.allowed
        elif isinstance(path, dict):
            allowed = (user, str(path.get("verb") or ""), str(path.get("path") or "")) in self.allowed_paths
        else:
            allowed = False
        status: JsonObject = {"allowed": allowed}
        if not allowed:
            status["reason"] = "no RBAC rule matched"
        return {**body, "status": status}
