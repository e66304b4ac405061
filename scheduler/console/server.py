"""The console's HTTP routes, added to the scheduler's metrics server (scheduler/health.py):

GET  /ui/, /ui/nodes/{name}, /ui/pending, /ui/problems   pages (?fragment=1: the content alone)
GET  /ui/api/view                                        the whole view as JSON
GET  /ui/static/console.css, console.js                  served from the package
GET  /rest/scheduling/v1/numaaware                       the numa-aware policy
PUT  /rest/scheduling/v1/numaaware                       change it (authenticated, authorised)
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import anyio
import attrs
import structlog
from aiohttp import web

from numasched.api.snapshot import ClusterSnapshot
from numasched.cache.cache import Cache
from numasched.conf.model import SchedulerConfig
from numasched.scheduler.console import render
from numasched.scheduler.console.access import Access, AccessRequest, PathRequest, ResourceRequest, bearer_token
from numasched.scheduler.console.assets import CONSOLE_CSS, CONSOLE_JS
from numasched.scheduler.console.policy import (
    NumaAwareState,
    PolicyRequestError,
    numa_aware_state,
    parse_change,
    state_document,
)
from numasched.scheduler.console.policy_store import PolicyStore, PolicyWriteError
from numasched.scheduler.console.view import (
    ClusterView,
    NodeView,
    build_view,
    node_view,
    pending_device_shapes,
    pending_tasks,
    problems_by_node,
)
from numasched.scheduler.explain import PodNotFound
from numasched.scheduler.framework.registry import Registry

log = structlog.get_logger("numasched.console")

POLICY_PATH = "/rest/scheduling/v1/numaaware"
# A snapshot of a large cache takes a good part of a second: pages and scrapes within this long
# of the last one share it (the page refreshes every two seconds).
DEFAULT_VIEW_MAX_AGE_S = 2.0
MAX_POLICY_BODY_BYTES = 64 * 1024


class CacheViews:
    """The view of the cache, rebuilt from a fresh snapshot at most once per max_age_s.

    Runs on the event loop, where the informers change the cache, so a snapshot never sees a
    half-applied event; the snapshot is a copy, so nothing here touches the cache's state. The
    snapshot is kept with the view for as long, to draw one node's CPUs one by one on its page.
    """

    def __init__(
        self, cache: Cache, *, max_age_s: float = DEFAULT_VIEW_MAX_AGE_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._cache = cache
        self._max_age_s = max_age_s
        self._clock = clock
        self._kept: _Kept | None = None

    def _fresh(self) -> _Kept:
        now = self._clock()
        if self._kept is not None and now - self._kept.taken < self._max_age_s:
            return self._kept
        cache = self._cache
        snapshot = cache.snapshot()
        without_topology = cache.nodes_without_topology()
        sources = {name: cache.topology_source(name) for name in snapshot.nodes}
        problems = dict(cache.problems)
        view = build_view(
            snapshot,
            pod_objects=cache.pod_object,
            problems=problems,
            nodes_without_topology=without_topology,
            waiting_for_group=cache.tasks_waiting_for_group(),
        )
        self._kept = _Kept(now, snapshot, view, problems, without_topology, sources)
        return self._kept

    def view(self) -> ClusterView:
        return self._fresh().view

    def snapshot_now(self) -> ClusterSnapshot:
        """A fresh snapshot of its own (explain opens a session on it, which may change it)."""
        return self._cache.snapshot()

    def latest(self) -> ClusterView:
        """The view last built, never a new one: safe off the event loop (the metrics exposition
        runs in a worker thread after view() was called on the loop)."""
        kept = self._kept
        return kept.view if kept is not None else ClusterView(nodes=(), pending=(), problems=())

    def node(self, name: str) -> NodeView | None:
        """One node with every CPU and device link drawn, from the same snapshot as view()."""
        kept = self._fresh()
        node = kept.snapshot.nodes.get(name)
        if node is None:
            return None
        shapes = pending_device_shapes(pending_tasks(kept.snapshot, ()))
        return node_view(
            node,
            shapes,
            problems_by_node(kept.problems).get(name, ()),
            kept.without_topology.get(name, ""),
            detail=True,
            source=kept.sources.get(name, ""),
        )


@attrs.frozen(slots=True)
class _Kept:
    taken: float
    snapshot: ClusterSnapshot
    view: ClusterView
    problems: dict[tuple[str, str], str]
    without_topology: dict[str, str]
    # Per node, the kind of object its topology is read from.
    sources: dict[str, str]


@attrs.frozen(slots=True)
class PolicyAccess:
    """What a read of the console and a write of the policy are reviewed as."""

    read: Access
    write: Access
    write_request: AccessRequest


class Console:
    def __init__(
        self,
        views: CacheViews,
        config: Callable[[], SchedulerConfig],
        generation: Callable[[], int],
        store: PolicyStore,
        access: PolicyAccess,
        *,
        registry: Registry | None = None,
    ) -> None:
        self.views = views
        self._config = config
        self._generation = generation
        self._store = store
        self._access = access
        # For `numasched explain` of a pending pod (none: no explain page).
        self._registry = registry

    def install(self, app: web.Application) -> None:
        app.router.add_get("/ui", self._redirect_home)
        app.router.add_get("/ui/", self._overview)
        app.router.add_get("/ui/nodes/{name}", self._node)
        app.router.add_get("/ui/pending", self._pending)
        app.router.add_get("/ui/problems", self._problems)
        app.router.add_get("/ui/explain/{namespace}/{name}", self._explain)
        app.router.add_get("/ui/api/view", self._view_json)
        app.router.add_get("/ui/static/console.css", self._css)
        app.router.add_get("/ui/static/console.js", self._js)
        app.router.add_get(POLICY_PATH, self._policy_get)
        app.router.add_put(POLICY_PATH, self._policy_put)

    # -- access ---------------------------------------------------------------------------------

    async def _refused(self, request: web.Request, access: Access, wanted: AccessRequest) -> web.Response | None:
        decision = await access.decide(bearer_token(request.headers), wanted)
        if decision.allowed:
            return None
        headers = {"WWW-Authenticate": 'Bearer realm="numasched"'} if decision.status == 401 else None
        log.info("console request refused", path=request.path, status=decision.status, reason=decision.reason)
        return _json({"error": decision.reason, "status": decision.status}, decision.status, headers)

    async def _read_refused(self, request: web.Request) -> web.Response | None:
        return await self._refused(request, self._access.read, PathRequest("get", request.path))

    # -- pages ----------------------------------------------------------------------------------

    async def _redirect_home(self, request: web.Request) -> web.Response:
        raise web.HTTPFound("/ui/")

    async def _page(self, request: web.Request, title: str, draw: Callable[[ClusterView], str]) -> web.Response:
        refused = await self._read_refused(request)
        if refused is not None:
            return refused
        view = self.views.view()
        content = draw(view)
        body = content if request.query.get("fragment") == "1" else render.page(title, content, view=view)
        return web.Response(text=body, content_type="text/html", charset="utf-8", headers=_NO_STORE)

    async def _overview(self, request: web.Request) -> web.Response:
        policy = self._state()
        return await self._page(request, "Nodes", lambda view: render.overview(view, policy))

    async def _node(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]

        def draw(view: ClusterView) -> str:
            node = self.views.node(name)
            return render.not_found(name) if node is None else render.node_page(node)

        return await self._page(request, name, draw)

    async def _pending(self, request: web.Request) -> web.Response:
        return await self._page(request, "Pending pods", render.pending_page)

    async def _problems(self, request: web.Request) -> web.Response:
        return await self._page(request, "Problems", render.problems_page)

    async def _explain(self, request: web.Request) -> web.Response:
        """`numasched explain` of one pod, on a snapshot taken here (on the event loop) and
        explained in a worker thread; ?what_if=1 adds which departures would make room."""
        refused = await self._read_refused(request)
        if refused is not None:
            return refused
        key = f"{request.match_info['namespace']}/{request.match_info['name']}"
        what_if = request.query.get("what_if") == "1"
        if self._registry is None:
            content = render.explain_page(key, None, "explain is not available here", what_if)
        else:
            snapshot = self.views.snapshot_now()
            try:
                text = await anyio.to_thread.run_sync(
                    explain_text, snapshot, self._config(), self._registry, key, what_if
                )
            except PodNotFound as error:
                content = render.explain_page(key, None, str(error), what_if)
            else:
                content = render.explain_page(key, text, "", what_if)
        body = content if request.query.get("fragment") == "1" else render.page(key, content, view=self.views.view())
        return web.Response(text=body, content_type="text/html", charset="utf-8", headers=_NO_STORE)

    async def _view_json(self, request: web.Request) -> web.Response:
        refused = await self._read_refused(request)
        if refused is not None:
            return refused
        return _json(attrs.asdict(self.views.view(), retain_collection_types=False))

    async def _css(self, request: web.Request) -> web.Response:
        return web.Response(text=CONSOLE_CSS, content_type="text/css", charset="utf-8")

    async def _js(self, request: web.Request) -> web.Response:
        return web.Response(text=CONSOLE_JS, content_type="application/javascript", charset="utf-8")

    # -- policy API -----------------------------------------------------------------------------

    def _state(self) -> NumaAwareState:
        return numa_aware_state(self._config())

    def _policy_document(self) -> dict[str, Any]:
        return state_document(
            self._state(), source=self._store.source, writable=self._store.writable, generation=self._generation()
        )

    async def _policy_get(self, request: web.Request) -> web.Response:
        refused = await self._read_refused(request)
        if refused is not None:
            return refused
        return _json(self._policy_document())

    async def _policy_put(self, request: web.Request) -> web.Response:
        refused = await self._refused(request, self._access.write, self._access.write_request)
        if refused is not None:
            return refused
        if request.content_length is not None and request.content_length > MAX_POLICY_BODY_BYTES:
            return _json({"error": f"body larger than {MAX_POLICY_BODY_BYTES} bytes", "status": 413}, 413)
        try:
            raw = await request.content.read(MAX_POLICY_BODY_BYTES + 1)
            if len(raw) > MAX_POLICY_BODY_BYTES:
                return _json({"error": f"body larger than {MAX_POLICY_BODY_BYTES} bytes", "status": 413}, 413)
            try:
                body = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as error:
                raise PolicyRequestError("body", f"not JSON: {error}") from None
            change = parse_change(body)
            await self._store.write(change)
        except PolicyRequestError as error:
            return _json({"error": str(error), "field": error.field, "status": 400}, 400)
        except PolicyWriteError as error:
            return _json({"error": error.message, "status": error.status}, error.status)
        return _json(self._policy_document())


_NO_STORE = {"Cache-Control": "no-store"}


def _json(document: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(document, status=status, headers={**_NO_STORE, **(headers or {})}, dumps=_dumps)


def _dumps(document: Any) -> str:
    return json.dumps(document, sort_keys=False, default=str)


def explain_text(
    snapshot: ClusterSnapshot, config: SchedulerConfig, registry: Registry, key: str, what_if: bool
) -> str:
    """The table `numasched explain` prints for the pod (runs in a worker thread)."""
    from numasched.scheduler.explain import explain_in_cache
    from numasched.scheduler.explain_command import render_table

    return render_table(explain_in_cache(snapshot, config, registry, key, with_what_if=what_if))


def write_request_for(namespace: str, name: str) -> ResourceRequest:
    """A policy write is reviewed as an update of the scheduler's ConfigMap, which it is."""
    return ResourceRequest(verb="update", resource="configmaps", namespace=namespace, name=name)
