"""List-and-watch informers on kubernetes_asyncio that feed the cache.

One informer per resource: list (the whole set, handed over as a re-list), then watch from the
list's resourceVersion with bookmarks. A 410 Gone re-lists at once; any other failure reconnects
after a capped exponential backoff with jitter. A resource whose API group is not installed (404)
is reported once and retried slowly; it never stops the others. Objects are handled as plain JSON
dicts (the client's raw mode), so nothing is lost or renamed by the client's models.

No object can stall a watch: whatever the sink raises while taking one event (a converter bug, an
object nothing foresaw) is logged once with the kind, name and resourceVersion, and the watch moves
past it; reconnecting from the same resourceVersion would only replay the same event for ever. An
event line that is not even JSON we can read is skipped the same way when its resourceVersion can
be found in it. Conversion problems proper (ConversionError) are the sink's to report.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import aiohttp
import anyio
import attrs
import structlog

from numasched.api.quantity import shown
from numasched.cache.events import EventType, ObjectEvent

log = structlog.get_logger("numasched.informer")

# A list function of the client (CoreV1Api.list_node, CustomObjectsApi.list_cluster_custom_object
# with its group/version/plural bound): called with keyword arguments only.
ListFunction = Callable[..., Awaitable[Any]]


class EventSink(Protocol):
    """Where an informer delivers: the Cache, or the ConfigMap feed."""

    def apply(self, event: ObjectEvent) -> None: ...

    def replace(self, kind: str, objects: list[Mapping[str, Any]]) -> None: ...


class ApiStatusError(Exception):
    """A non-2xx answer from the API server, with its Status message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}")
        self.status = status
        self.message = message


class ResourceGone(Exception):
    """410: the resourceVersion we asked for is compacted away; re-list."""


@attrs.frozen(slots=True)
class InformerTiming:
    request_timeout: float = 30.0
    # The server ends a watch after this long (jittered up to +50%); we then resume from our version.
    watch_timeout: int = 300
    backoff_initial: float = 0.5
    backoff_cap: float = 30.0
    # A resource not installed (404) is looked for again this often.
    missing_retry: float = 60.0
    # A watch that ends sooner than this without any event counts as a failure for backoff.
    min_healthy_watch: float = 1.0


DEFAULT_INFORMER_TIMING = InformerTiming()


@attrs.define
class Backoff:
    """Capped exponential backoff with full jitter."""

    initial: float
    cap: float
    attempt: int = 0
    rng: random.Random = attrs.field(factory=random.Random)

    def next_delay(self) -> float:
        ceiling = min(self.cap, self.initial * (2**self.attempt))
        self.attempt += 1
        return self.rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempt = 0


async def read_status(response: Any) -> ApiStatusError:
    """The error a non-2xx raw response stands for."""
    text = ""
    try:
        text = (await response.read()).decode("utf-8", "replace")
        body = json.loads(text)
        message = str(body.get("message") or body.get("reason") or text) if isinstance(body, dict) else text
    except (ValueError, aiohttp.ClientError):
        message = text or "no body"
    finally:
        response.release()
    return ApiStatusError(int(response.status), message)


# Python refuses to turn more than 4,300 digits into an int (CVE-2020-10735); Go's decoder does not
# care. A longer integer is read as a float (inf, or a large finite one) for the converters to refuse.
_LONGEST_INT_TEXT = 4000
# Where a line we cannot parse still says what it was: the API server writes the event type first
# and the object's metadata (with its resourceVersion) before anything nested.
_EVENT_TYPE = re.compile(rb'"type"\s*:\s*"(ADDED|MODIFIED|DELETED|BOOKMARK)"')
# The scalar fields at the head of metadata (Go's ObjectMeta writes name, namespace, uid and
# resourceVersion before any nested labels or annotations): up to the first brace after it opens.
_METADATA_HEAD = re.compile(rb'"metadata"\s*:\s*\{([^{}]{0,4096})')
_IDENTITY_FIELD = re.compile(rb'"(name|namespace|uid|resourceVersion)"\s*:\s*"([^"\\]{1,253})"')


def metadata_head(line: bytes) -> dict[str, str]:
    """name, namespace, uid and resourceVersion of the first object's metadata in a raw JSON line,
    found without parsing it (for a line the parser refuses)."""
    head = _METADATA_HEAD.search(line)
    if head is None:
        return {}
    found: dict[str, str] = {}
    for match in _IDENTITY_FIELD.finditer(head[1]):
        found.setdefault(match[1].decode(), match[2].decode("utf-8", "replace"))
    return found


def _describe(obj: Mapping[str, Any]) -> str:
    """namespace/name of an object for a log line; never raises, whatever the object holds."""
    metadata = obj.get("metadata")
    if not isinstance(metadata, Mapping):
        return "<no metadata>"
    parts = [metadata.get("namespace"), metadata.get("name")]
    return "/".join(shown(part, 253) for part in parts if isinstance(part, str) and part) or "<no name>"


def _tolerant_int(text: str) -> int | float:
    return int(text) if len(text) <= _LONGEST_INT_TEXT else float(text)


def parse_json(data: bytes) -> Any:
    """json.loads that reads what the API server may send and Python would refuse by default:
    integers beyond 4,300 digits and bytes that are not UTF-8. Raises ValueError or RecursionError."""
    try:
        return json.loads(data)
    except ValueError:
        # The rare slow path: parse_int costs a Python call per integer.
        return json.loads(data.decode("utf-8", "replace"), parse_int=_tolerant_int)


def with_kind(obj: Mapping[str, Any], api_version: str, kind: str) -> Mapping[str, Any]:
    """List items come without apiVersion/kind; converters and messages want them."""
    if obj.get("kind") and obj.get("apiVersion"):
        return obj
    return {**obj, "apiVersion": obj.get("apiVersion") or api_version, "kind": obj.get("kind") or kind}


class Informer:
    """Keeps one sink current with one resource, until cancelled."""

    def __init__(
        self,
        kind: str,
        api_version: str,
        list_function: ListFunction,
        sink: EventSink,
        *,
        field_selector: str = "",
        label_selector: str = "",
        optional: bool = False,
        timing: InformerTiming = DEFAULT_INFORMER_TIMING,
        rng: random.Random | None = None,
    ) -> None:
        self.kind = kind
        self.api_version = api_version
        self._list = list_function
        self._sink = sink
        self._selectors: dict[str, str] = {}
        if field_selector:
            self._selectors["field_selector"] = field_selector
        if label_selector:
            self._selectors["label_selector"] = label_selector
        self.optional = optional
        self.timing = timing
        self._rng = rng or random.Random()
        self._backoff = Backoff(timing.backoff_initial, timing.backoff_cap, rng=self._rng)
        # Set once the first list is delivered (or, for an optional resource, found missing).
        self.synced = anyio.Event()
        self.installed = True
        self.resource_version = ""
        self.relists = 0
        self.reconnects = 0
        # Events the sink could not take (or we could not read), each skipped once.
        self.poison_events = 0
        self._log = log.bind(kind=kind)

    async def run(self) -> None:
        while True:
            try:
                if not self.resource_version:
                    await self._relist()
                started = time.monotonic()
                delivered = await self._watch(self.resource_version)
                self.reconnects += 1
                if delivered or time.monotonic() - started >= self.timing.min_healthy_watch:
                    self._backoff.reset()
                else:
                    await anyio.sleep(self._backoff.next_delay())
            except ResourceGone:
                self._log.info("watch history compacted; re-listing", resource_version=self.resource_version)
                self.resource_version = ""
            except ApiStatusError as error:
                self.resource_version = ""
                if error.status == 404 and self.optional:
                    await self._missing(error)
                    continue
                delay = self._backoff.next_delay()
                self._log.warning("list/watch failed", status=error.status, error=error.message, retry_in=delay)
                await anyio.sleep(delay)
            except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as error:
                # A dropped connection, a timeout, a garbled line: resume from the last version we saw.
                delay = self._backoff.next_delay()
                self._log.warning("list/watch interrupted", error=repr(error), retry_in=delay)
                await anyio.sleep(delay)
            except Exception as error:  # nothing unforeseen may end this informer
                # Not a network fault we know: start again from a fresh list, after a pause.
                self.resource_version = ""
                delay = self._backoff.next_delay()
                self._log.error(
                    "list/watch failed unexpectedly; re-listing",
                    error=f"{type(error).__name__}: {error}",
                    retry_in=delay,
                )
                await anyio.sleep(delay)

    async def _missing(self, error: ApiStatusError) -> None:
        if self.installed:
            self._log.warning(
                "resource not served by the API server (CRD not installed?); skipping it",
                api_version=self.api_version,
                error=error.message,
                retry_in=self.timing.missing_retry,
            )
        self.installed = False
        self._sink.replace(self.kind, [])
        self.synced.set()
        await anyio.sleep(self.timing.missing_retry)

    async def _relist(self) -> None:
        response = await self._list(
            **self._selectors, _preload_content=False, _request_timeout=self.timing.request_timeout
        )
        if not 200 <= response.status < 300:
            raise await read_status(response)
        try:
            with anyio.fail_after(self.timing.request_timeout):
                data = await response.read()
        finally:
            response.release()
        try:
            body = parse_json(data)
        except RecursionError:
            raise ValueError(f"{self.kind} list nests deeper than this reader can follow") from None
        items = body.get("items") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise ValueError(f"{self.kind} list has no items array")
        kind = str(body.get("kind", "")).removesuffix("List") or self.kind
        objects = [with_kind(item, self.api_version, kind) for item in items if isinstance(item, Mapping)]
        self._deliver_list(objects)
        if not self.installed:
            self._log.info("resource is served again", api_version=self.api_version)
        self.installed = True
        self.relists += 1
        self.resource_version = str((body.get("metadata") or {}).get("resourceVersion") or "")
        self.synced.set()
        self._log.debug("listed", count=len(objects), resource_version=self.resource_version)

    async def _watch(self, resource_version: str) -> bool:
        """Follow changes from resource_version until the stream ends; True when any event came."""
        server_timeout = int(self.timing.watch_timeout * self._rng.uniform(1.0, 1.5))
        client_timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self.timing.request_timeout, sock_read=server_timeout + self.timing.request_timeout
        )
        response = await self._list(
            **self._selectors,
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=server_timeout,
            _preload_content=False,
            _request_timeout=client_timeout,
        )
        if not 200 <= response.status < 300:
            raise await read_status(response)
        delivered = False
        buffer = b""
        try:
            async for chunk in response.content.iter_any():
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        self._handle_line(line)
                        delivered = True
        finally:
            response.release()
        return delivered

    def _deliver_list(self, objects: list[Mapping[str, Any]]) -> None:
        try:
            self._sink.replace(self.kind, objects)
        except Exception as error:  # one object must not keep the rest out
            # The sink stopped part-way; hand it the objects one by one, so each bad one only
            # loses itself (the re-list's deletions come first in a replace, and are done).
            self._log.error("re-list not taken whole; delivering its objects one by one", error=repr(error))
            for obj in objects:
                self._deliver(ObjectEvent(self.kind, EventType.MODIFIED, obj), self._version_of(obj))

    def _deliver(self, event: ObjectEvent, version: str) -> None:
        """Give one event to the sink; whatever it raises is reported once and left behind."""
        try:
            self._sink.apply(event)
        except Exception as error:  # the watch moves past a poison event
            self.poison_events += 1
            self._log.error(
                "event not handled; skipped",
                event_type=str(event.type),
                object=_describe(event.obj),
                resource_version=version,
                error=f"{type(error).__name__}: {error}",
            )

    def _version_of(self, obj: Mapping[str, Any]) -> str:
        metadata = obj.get("metadata")
        version = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
        return str(version) if version else self.resource_version

    def _skip_unreadable(self, line: bytes, error: BaseException) -> None:
        """A line that does not parse: move past it if it says which version it was, else give up
        on this stream (a truncated line is a transport fault; reconnecting reads it again whole).
        A deletion we cannot read is still a deletion: the sink gets it with the object's identity."""
        event_type = _EVENT_TYPE.search(line)
        identity = metadata_head(line)
        version = identity.get("resourceVersion")
        if event_type is None or not version:
            raise ValueError(f"{self.kind} watch sent an unreadable line: {error!r:.200}") from None
        self.poison_events += 1
        self._log.error(
            "unreadable event skipped",
            event_type=event_type[1].decode(),
            object="/".join(identity[key] for key in ("namespace", "name") if identity.get(key)) or "<unknown>",
            resource_version=version,
            error=f"{type(error).__name__}: {error!s:.200}",
        )
        if event_type[1] == b"DELETED" and identity.get("name"):
            obj = {"apiVersion": self.api_version, "kind": self.kind, "metadata": identity}
            self._deliver(ObjectEvent(self.kind, EventType.DELETED, obj), version)
        self.resource_version = version

    def _handle_line(self, line: bytes) -> None:
        try:
            event = parse_json(line)
        except (ValueError, RecursionError) as error:
            self._skip_unreadable(line, error)
            return
        if not isinstance(event, dict):
            raise ValueError(f"{self.kind} watch sent a non-object line")
        event_type = event.get("type")
        obj = event.get("object")
        if not isinstance(obj, Mapping):
            raise ValueError(f"{self.kind} watch event {event_type!r} has no object")
        if event_type == "ERROR":
            code = int(obj.get("code") or 0)
            if code == 410:
                raise ResourceGone(str(obj.get("message", "")))
            raise ApiStatusError(code, str(obj.get("message", "watch error")))
        version = str((obj.get("metadata") or {}).get("resourceVersion") or self.resource_version)
        if event_type == "BOOKMARK":
            self.resource_version = version
            return
        try:
            kind_of_event = EventType(str(event_type))
        except ValueError as error:
            raise ValueError(f"{self.kind} watch sent unknown event type {event_type!r}") from error
        self._deliver(ObjectEvent(self.kind, kind_of_event, with_kind(obj, self.api_version, self.kind)), version)
        self.resource_version = version
