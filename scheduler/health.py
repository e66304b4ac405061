"""/healthz, /readyz and /metrics over HTTP for the kubelet's probes and Prometheus; other routes
(the NUMA console, scheduler/console/) are added to the same server by extensions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import anyio
import structlog
from aiohttp import web

from numasched.scheduler.metrics import SchedulerMetrics

log = structlog.get_logger("numasched.health")

# A check answers None when all is well, or why not.
Check = Callable[[], str | None]
# Adds routes to the server's application.
Extension = Callable[[web.Application], None]


def parse_address(text: str) -> tuple[str, int]:
    """'HOST:PORT', ':PORT' (all interfaces) or 'PORT'."""
    host, colon, port_text = text.rpartition(":")
    if not colon:
        host, port_text = "", text
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"metrics address must be HOST:PORT, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"metrics port out of range in {text!r}")
    return host.strip("[]") or "0.0.0.0", port


class HealthServer:
    def __init__(
        self,
        metrics: SchedulerMetrics,
        *,
        live: Check,
        ready: Check,
        extensions: Sequence[Extension] = (),
        before_scrape: Sequence[Callable[[], object]] = (),
    ) -> None:
        self._metrics = metrics
        self._live = live
        self._ready = ready
        self._extensions = tuple(extensions)
        # Run on the event loop before each scrape (the console's view of the cache is taken
        # there, where the informers change the cache); the exposition then runs in a worker
        # thread, so writing thousands of per-NUMA samples does not hold up the loop.
        self._before_scrape = tuple(before_scrape)
        self.port = 0

    def application(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/livez", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics_page)
        for extend in self._extensions:
            extend(app)
        return app

    async def _healthz(self, request: web.Request) -> web.Response:
        return _answer(self._live())

    async def _readyz(self, request: web.Request) -> web.Response:
        return _answer(self._ready())

    async def _metrics_page(self, request: web.Request) -> web.Response:
        for prepare in self._before_scrape:
            prepare()
        body = await anyio.to_thread.run_sync(self._metrics.exposition)
        return web.Response(body=body, content_type="text/plain", charset="utf-8")

    async def serve(self, address: str, *, task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        """Serve until cancelled; task_status.started() gets the bound port."""
        host, port = parse_address(address)
        runner = web.AppRunner(self.application(), handle_signals=False, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host, port)
            await site.start()
            server: Any = site._server
            sockets = server.sockets if server is not None else None
            self.port = sockets[0].getsockname()[1] if sockets else port
            log.info("serving health and metrics", address=f"{host}:{self.port}", extensions=len(self._extensions))
            task_status.started(self.port)
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await runner.cleanup()


def _answer(problem: str | None) -> web.Response:
    if problem is None:
        return web.Response(text="ok\n")
    return web.Response(status=503, text=f"{problem}\n")
