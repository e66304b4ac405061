"""resource.k8s.io/v1 objects (dicts as the API server returns them) -> api/dra.py types.

Every problem names the object (kind, namespace/name) and the field path, e.g.
`ResourceSlice node1-gpu: spec.devices[3].attributes["index"]: expected exactly one of int, bool,
string, version, ints, bools, strings, versions`. A bad device, request or constraint is left out
(and reported) while the rest of the object keeps working; a field the scheduler does not
implement is reported, never silently ignored. Nothing here raises on any JSON input.

A claim with a problem in a request or constraint is still returned (so the pod can be told why it
waits), with `usable` False: allocating it without the part left out would break the user's intent.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any, TypeVar

import attrs

from numasched.api.dra import (
    DEVICE_REQUESTS_MAX,
    AllocationMode,
    AttributeValue,
    ClaimAllocation,
    ClaimConstraint,
    ClaimInfo,
    ClaimRequest,
    ClaimSpec,
    ConsumerRef,
    CounterConsumption,
    DeviceClassInfo,
    DeviceResult,
    DeviceSubRequest,
    DeviceTaint,
    DeviceToleration,
    DraDevice,
    DraProblem,
    ResourceSliceInfo,
    ScalarAttribute,
    qualify,
)
from numasched.api.quantity import QuantityError, parse_quantity, shown
from numasched.api.task import NodeSelectorRequirement, NodeSelectorTerm
from numasched.plugins.dra.cel import parse_semver

T = TypeVar("T")

# More devices in one request than any node has: an object saying so is wrong, not big.
MAX_COUNT = 1024
_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,31}")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute", "None"})
_TOLERATION_OPERATORS = frozenset({"Equal", "Exists"})
_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


class _Bad(Exception):
    """A field that cannot be read; carries the field path and the reason."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@attrs.define
class _Reader:
    """Reads one object's fields, collecting problems that name the object and the path."""

    kind: str
    namespace: str
    name: str
    problems: list[DraProblem] = attrs.field(factory=list)

    def report(self, field: str, message: str) -> None:
        self.problems.append(DraProblem(self.kind, self.namespace, self.name, field, message))

    def guarded(self, read: Callable[..., T], *args: Any) -> T | None:
        """read(*args), or None with its problem reported (any _Bad it raises)."""
        try:
            return read(*args)
        except _Bad as bad:
            self.report(bad.field, bad.message)
            return None

    def unsupported(self, raw: Mapping[str, Any], path: str, known: Sequence[str], ignored: Sequence[str] = ()) -> bool:
        """Report every set field not in `known` (ignored: set fields we accept and do not use,
        reported as ignored). True when something unsupported is set."""
        found = False
        for key, value in raw.items():
            if key in known or value in (None, [], {}, False, ""):
                continue
            if key in ignored:
                continue
            self.report(
                f"{path}.{key}" if path else str(key), "not supported by numasched (the object is not used as asked)"
            )
            found = True
        return found


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _Bad(field, f"expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Bad(field, f"expected a list, got {type(value).__name__}")
    return value


def _string(value: Any, field: str, *, required: bool = True) -> str:
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise _Bad(field, f"expected a non-empty string, got {shown(value)}")
    return value


def _integer(value: Any, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(field, f"expected an integer, got {shown(value)}")
    if not low <= value <= high:
        raise _Bad(field, f"{value} is outside {low}-{high}")
    return value


def _boolean(value: Any, field: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise _Bad(field, f"expected true or false, got {shown(value)}")
    return value


def _quantity(value: Any, field: str) -> Fraction:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise _Bad(field, f"expected a quantity, got {shown(value)}")
    try:
        return parse_quantity(value)
    except QuantityError as error:
        raise _Bad(field, str(error)) from None


def _qualified_name(name: Any, field: str, *, full: bool = False) -> str:
    if not isinstance(name, str) or not name:
        raise _Bad(field, f"expected a qualified name, got {shown(name)}")
    domain, slash, ident = name.rpartition("/")
    if full and not slash:
        raise _Bad(field, f"{shown(name)} needs a domain (domain/name)")
    if not _C_IDENTIFIER.fullmatch(ident) or (slash and (len(domain) > 63 or not _DNS_SUBDOMAIN.fullmatch(domain))):
        raise _Bad(field, f"{shown(name)} is not a C identifier optionally prefixed by a DNS subdomain and '/'")
    return name


def _strings(value: Any, field: str) -> tuple[str, ...]:
    return tuple(_string(item, f"{field}[{index}]") for index, item in enumerate(_list(value, field)))


_SCALARS: tuple[tuple[str, Callable[[Any], bool]], ...] = (
    ("int", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    ("bool", lambda v: isinstance(v, bool)),
    ("string", lambda v: isinstance(v, str)),
    ("version", lambda v: isinstance(v, str)),
)


def _attribute(raw: Any, field: str) -> AttributeValue:
    body = _mapping(raw, field)
    kinds = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")
    present = [key for key in kinds if body.get(key) is not None]
    extra = [key for key in body if key not in kinds]
    if len(present) != 1 or extra:
        raise _Bad(field, "expected exactly one of int, bool, string, version, ints, bools, strings, versions")
    key = present[0]
    scalar_kind = key.rstrip("s") if key != "bools" else "bool"
    check = dict(_SCALARS)[scalar_kind]

    def one(value: Any, where: str) -> ScalarAttribute:
        if not check(value):
            raise _Bad(where, f"expected {'a' if scalar_kind != 'int' else 'an'} {scalar_kind}, got {shown(value)}")
        if scalar_kind == "int" and not -(1 << 63) <= value < 1 << 63:
            raise _Bad(where, "integer out of int64 range")
        if scalar_kind == "string" and len(value) > 64:
            raise _Bad(where, "string longer than 64 characters")
        if scalar_kind == "version":
            parsed = parse_semver(value)
            if parsed is None:
                raise _Bad(where, f"{shown(value)} is not a semantic version 2.0.0")
            return parsed
        result: ScalarAttribute = value
        return result

    if key in ("int", "bool", "string", "version"):
        return one(body[key], f"{field}.{key}")
    items = _list(body[key], f"{field}.{key}")
    return tuple(one(item, f"{field}.{key}[{index}]") for index, item in enumerate(items))


def _counters(raw: Any, field: str) -> dict[str, Fraction]:
    result: dict[str, Fraction] = {}
    for name, counter in _mapping(raw, field).items():
        where = f"{field}[{name!r}]"
        body = _mapping(counter, where)
        result[str(name)] = _quantity(body.get("value"), f"{where}.value")
    return result


def _taints(raw: Any, field: str) -> tuple[DeviceTaint, ...]:
    taints: list[DeviceTaint] = []
    for index, item in enumerate(_list(raw, field)):
        where = f"{field}[{index}]"
        body = _mapping(item, where)
        effect = _string(body.get("effect"), f"{where}.effect")
        if effect not in _TAINT_EFFECTS:
            raise _Bad(f"{where}.effect", f"{shown(effect)} is not one of {', '.join(sorted(_TAINT_EFFECTS))}")
        taints.append(
            DeviceTaint(
                _string(body.get("key"), f"{where}.key"),
                _string(body.get("value"), f"{where}.value", required=False),
                effect,
            )
        )
    return tuple(taints)


def _device(reader: _Reader, raw: Any, driver: str, pool: str, field: str) -> DraDevice | None:
    body = _mapping(raw, field)
    name = _string(body.get("name"), f"{field}.name")
    attributes: dict[str, AttributeValue] = {}
    for key, value in _mapping(body.get("attributes"), f"{field}.attributes").items():
        where = f"{field}.attributes[{key!r}]"
        attributes[qualify(_qualified_name(key, where), driver)] = _attribute(value, where)
    capacity: dict[str, Fraction] = {}
    for key, value in _mapping(body.get("capacity"), f"{field}.capacity").items():
        where = f"{field}.capacity[{key!r}]"
        entry = _mapping(value, where)
        capacity[qualify(_qualified_name(key, where), driver)] = _quantity(entry.get("value"), f"{where}.value")
        if entry.get("requestPolicy") is not None:
            raise _Bad(f"{where}.requestPolicy", "consumable capacity is not supported by numasched")
    consumes: list[CounterConsumption] = []
    for index, item in enumerate(_list(body.get("consumesCounters"), f"{field}.consumesCounters")):
        where = f"{field}.consumesCounters[{index}]"
        entry = _mapping(item, where)
        consumes.append(
            CounterConsumption(
                _string(entry.get("counterSet"), f"{where}.counterSet"),
                _counters(entry.get("counters"), f"{where}.counters"),
            )
        )
    known = ("name", "attributes", "capacity", "consumesCounters", "taints", "allowMultipleAllocations")
    if reader.unsupported(body, field, known):
        # Per-device node selection, binding conditions, node-allocatable mapping: using the device
        # without them could place a pod where the device cannot serve it.
        return None
    return DraDevice(
        driver=driver,
        pool=pool,
        name=name,
        attributes=attributes,
        capacity=capacity,
        consumes_counters=tuple(consumes),
        taints=_taints(body.get("taints"), f"{field}.taints"),
        shared=_boolean(body.get("allowMultipleAllocations"), f"{field}.allowMultipleAllocations"),
    )


def _start(obj: Any, kind: str, namespaced: bool) -> tuple[_Reader, Mapping[str, Any]] | tuple[None, list[DraProblem]]:
    if not isinstance(obj, Mapping):
        return None, [DraProblem(kind, "", "<unknown>", "", f"expected an object, got {type(obj).__name__}")]
    metadata = obj.get("metadata")
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        return None, [DraProblem(kind, "", "<unknown>", "metadata.name", "missing")]
    namespace = metadata.get("namespace") if namespaced and isinstance(metadata, Mapping) else ""
    if namespaced and (not isinstance(namespace, str) or not namespace):
        return None, [DraProblem(kind, "", name, "metadata.namespace", "missing")]
    return _Reader(kind, str(namespace or ""), name), obj


def _requirements(raw: Any, field: str) -> tuple[NodeSelectorRequirement, ...]:
    result: list[NodeSelectorRequirement] = []
    for index, item in enumerate(_list(raw, field)):
        where = f"{field}[{index}]"
        body = _mapping(item, where)
        operator = _string(body.get("operator"), f"{where}.operator")
        if operator not in _SELECTOR_OPERATORS:
            raise _Bad(f"{where}.operator", f"{shown(operator)} is not one of {', '.join(_SELECTOR_OPERATORS)}")
        values = _strings(body.get("values"), f"{where}.values")
        result.append(NodeSelectorRequirement(_string(body.get("key"), f"{where}.key"), operator, values))
    return tuple(result)


def _node_selector(raw: Any, field: str) -> tuple[NodeSelectorTerm, ...]:
    """A core/v1 NodeSelector: its terms (ORed), each with match expressions and fields."""
    terms: list[NodeSelectorTerm] = []
    for index, item in enumerate(_list(_mapping(raw, field).get("nodeSelectorTerms"), f"{field}.nodeSelectorTerms")):
        where = f"{field}.nodeSelectorTerms[{index}]"
        body = _mapping(item, where)
        terms.append(
            NodeSelectorTerm(
                _requirements(body.get("matchExpressions"), f"{where}.matchExpressions"),
                _requirements(body.get("matchFields"), f"{where}.matchFields"),
            )
        )
    if not terms:
        raise _Bad(f"{field}.nodeSelectorTerms", "at least one term is required")
    return tuple(terms)


def convert_resource_slice(obj: Any) -> tuple[ResourceSliceInfo | None, list[DraProblem]]:
    """A ResourceSlice; None when it is unusable as a whole (no driver or pool, or a node
    selection it cannot state). A bad device is left out and reported."""
    reader, body = _start(obj, "ResourceSlice", namespaced=False)
    if reader is None:
        return None, body  # type: ignore[return-value]
    assert isinstance(body, Mapping)
    try:
        spec = _mapping(body.get("spec"), "spec")
        driver = _string(spec.get("driver"), "spec.driver")
        pool_body = _mapping(spec.get("pool"), "spec.pool")
        pool = _string(pool_body.get("name"), "spec.pool.name")
        generation = _integer(pool_body.get("generation", 0), "spec.pool.generation", 0, (1 << 63) - 1)
        count = _integer(pool_body.get("resourceSliceCount", 1), "spec.pool.resourceSliceCount", 1, 1 << 20)
        node_name = spec.get("nodeName")
        if node_name is not None:
            node_name = _string(node_name, "spec.nodeName")
        all_nodes = _boolean(spec.get("allNodes"), "spec.allNodes")
        selector = (
            None if spec.get("nodeSelector") is None else _node_selector(spec["nodeSelector"], "spec.nodeSelector")
        )
        chosen = sum(1 for item in (node_name, selector) if item is not None) + int(all_nodes)
        if spec.get("perDeviceNodeSelection"):
            raise _Bad("spec.perDeviceNodeSelection", "per-device node selection is not supported by numasched")
        if chosen != 1:
            raise _Bad("spec", "exactly one of nodeName, nodeSelector, allNodes must be set")
        shared: dict[str, Mapping[str, Fraction]] = {}
        for index, item in enumerate(_list(spec.get("sharedCounters"), "spec.sharedCounters")):
            where = f"spec.sharedCounters[{index}]"
            entry = _mapping(item, where)
            shared[_string(entry.get("name"), f"{where}.name")] = _counters(entry.get("counters"), f"{where}.counters")
    except _Bad as bad:
        reader.report(bad.field, bad.message)
        return None, reader.problems
    reader.unsupported(
        spec,
        "spec",
        (
            "driver",
            "pool",
            "nodeName",
            "nodeSelector",
            "allNodes",
            "devices",
            "sharedCounters",
            "perDeviceNodeSelection",
        ),
    )
    devices: list[DraDevice] = []
    names: set[str] = set()
    device_list = reader.guarded(_list, spec.get("devices"), "spec.devices") or []
    for index, raw in enumerate(device_list):
        field = f"spec.devices[{index}]"
        device = reader.guarded(_device, reader, raw, driver, pool, field)
        if device is None:
            continue
        if device.name in names:
            reader.report(f"{field}.name", f"duplicate device name {device.name!r}")
            continue
        unknown_sets = [c.counter_set for c in device.consumes_counters if c.counter_set not in shared]
        if unknown_sets:
            reader.report(f"{field}.consumesCounters", f"counter set {unknown_sets[0]!r} is not in spec.sharedCounters")
            continue
        names.add(device.name)
        devices.append(device)
    info = ResourceSliceInfo(
        name=reader.name,
        driver=driver,
        pool=pool,
        pool_generation=generation,
        pool_slice_count=count,
        node_name=node_name,
        all_nodes=all_nodes,
        node_selector=selector,
        devices=tuple(devices),
        shared_counters=shared,
    )
    return info, reader.problems


def _cel_expression(raw: Any, field: str) -> str:
    cel = _mapping(_mapping(raw, field).get("cel"), f"{field}.cel")
    return _string(cel.get("expression"), f"{field}.cel.expression")


def _selectors(reader: _Reader, raw: Any, field: str) -> tuple[tuple[str, ...], bool]:
    """CEL expressions; the flag is False when a selector could not be read (then the object must
    not be used: dropping a selector would select more devices than asked)."""
    expressions: list[str] = []
    complete = True
    for index, item in enumerate(reader.guarded(_list, raw, field) or []):
        where = f"{field}[{index}]"
        expression = reader.guarded(_cel_expression, item, where)
        if expression is None:
            complete = False
            continue
        if isinstance(item, Mapping) and reader.unsupported(item, where, ("cel",)):
            complete = False
            continue
        expressions.append(expression)
    if not isinstance(raw, (list, type(None))):
        complete = False
    return tuple(expressions), complete


def convert_device_class(obj: Any) -> tuple[DeviceClassInfo | None, list[DraProblem]]:
    """A DeviceClass; None when it has no name or a selector cannot be read (a class that selects
    more than it says must not be used)."""
    reader, body = _start(obj, "DeviceClass", namespaced=False)
    if reader is None:
        return None, body  # type: ignore[return-value]
    assert isinstance(body, Mapping)
    spec = reader.guarded(_mapping, body.get("spec"), "spec")
    if spec is None:
        return None, reader.problems
    selectors, complete = _selectors(reader, spec.get("selectors"), "spec.selectors")
    extended = spec.get("extendedResourceName")
    if extended is not None and not isinstance(extended, str):
        reader.report("spec.extendedResourceName", f"expected a string, got {shown(extended)}")
        extended = None
    reader.unsupported(spec, "spec", ("selectors", "config", "extendedResourceName"))
    if not complete:
        return None, reader.problems
    return DeviceClassInfo(reader.name, selectors, extended, bool(spec.get("config"))), reader.problems


def _tolerations(raw: Any, field: str) -> tuple[DeviceToleration, ...]:
    result: list[DeviceToleration] = []
    for index, item in enumerate(_list(raw, field)):
        where = f"{field}[{index}]"
        body = _mapping(item, where)
        operator = body.get("operator") or "Equal"
        if operator not in _TOLERATION_OPERATORS:
            raise _Bad(f"{where}.operator", f"{shown(operator)} is not Equal or Exists")
        effect = body.get("effect") or ""
        if effect and effect not in _TAINT_EFFECTS:
            raise _Bad(f"{where}.effect", f"{shown(effect)} is not one of {', '.join(sorted(_TAINT_EFFECTS))}")
        if body.get("tolerationSeconds") is not None:
            raise _Bad(f"{where}.tolerationSeconds", "not supported by numasched")
        result.append(
            DeviceToleration(
                key=_string(body.get("key"), f"{where}.key", required=False),
                operator=str(operator),
                value=_string(body.get("value"), f"{where}.value", required=False),
                effect=str(effect),
            )
        )
    return tuple(result)


def _sub_request(reader: _Reader, raw: Any, name: str, field: str, *, exact: bool) -> DeviceSubRequest:
    body = _mapping(raw, field)
    mode_text = body.get("allocationMode") or AllocationMode.EXACT_COUNT.value
    if mode_text not in (AllocationMode.EXACT_COUNT.value, AllocationMode.ALL.value):
        raise _Bad(f"{field}.allocationMode", f"{shown(mode_text)} is not ExactCount or All")
    mode = AllocationMode(mode_text)
    count = 1
    if mode is AllocationMode.EXACT_COUNT and body.get("count") is not None:
        count = _integer(body.get("count"), f"{field}.count", 1, MAX_COUNT)
    elif mode is AllocationMode.ALL and body.get("count") not in (None, 0):
        raise _Bad(f"{field}.count", "must not be set with allocationMode All")
    selectors, complete = _selectors(reader, body.get("selectors"), f"{field}.selectors")
    if not complete:
        raise _Bad(f"{field}.selectors", "a selector could not be read; the request is not used")
    known = ["deviceClassName", "selectors", "allocationMode", "count", "tolerations"]
    if exact:
        known.append("adminAccess")
    else:
        known.append("name")
    if reader.unsupported(body, field, known):
        raise _Bad(field, "uses a field numasched does not support; the request is not used")
    return DeviceSubRequest(
        name=name,
        device_class_name=_string(body.get("deviceClassName"), f"{field}.deviceClassName"),
        selectors=selectors,
        allocation_mode=mode,
        count=count,
        admin_access=_boolean(body.get("adminAccess"), f"{field}.adminAccess") if exact else False,
        tolerations=_tolerations(body.get("tolerations"), f"{field}.tolerations"),
    )


def _request(reader: _Reader, raw: Any, field: str) -> ClaimRequest:
    body = _mapping(raw, field)
    name = _string(body.get("name"), f"{field}.name")
    exactly = body.get("exactly")
    first = body.get("firstAvailable")
    if (exactly is None) == (first in (None, [])):
        raise _Bad(field, "exactly one of exactly, firstAvailable must be set")
    reader.unsupported(body, field, ("name", "exactly", "firstAvailable"))
    if exactly is not None:
        return ClaimRequest(name, exactly=_sub_request(reader, exactly, name, f"{field}.exactly", exact=True))
    alternatives: list[DeviceSubRequest] = []
    for index, item in enumerate(_list(first, f"{field}.firstAvailable")):
        where = f"{field}.firstAvailable[{index}]"
        sub_name = _string(_mapping(item, where).get("name"), f"{where}.name")
        alternatives.append(_sub_request(reader, item, sub_name, where, exact=False))
    if len(alternatives) > 8:
        raise _Bad(f"{field}.firstAvailable", "more than 8 subrequests")
    return ClaimRequest(name, first_available=tuple(alternatives))


def _constraint(reader: _Reader, raw: Any, field: str, request_names: set[str]) -> ClaimConstraint:
    body = _mapping(raw, field)
    requests = _strings(body.get("requests"), f"{field}.requests")
    for index, name in enumerate(requests):
        if name.split("/")[0] not in request_names:
            raise _Bad(f"{field}.requests[{index}]", f"names no request of the claim ({name!r})")
    match = body.get("matchAttribute")
    distinct = body.get("distinctAttribute")
    if (match is None) == (distinct is None):
        raise _Bad(field, "exactly one of matchAttribute, distinctAttribute must be set")
    if reader.unsupported(body, field, ("requests", "matchAttribute", "distinctAttribute")):
        raise _Bad(field, "uses a field numasched does not support")
    return ClaimConstraint(
        requests=requests,
        match_attribute=_qualified_name(match, f"{field}.matchAttribute", full=True) if match is not None else None,
        distinct_attribute=_qualified_name(distinct, f"{field}.distinctAttribute", full=True)
        if distinct is not None
        else None,
    )


def _claim_spec(reader: _Reader, raw: Any, field: str) -> tuple[ClaimSpec, bool]:
    """The spec and whether all of it could be read (False: a request or constraint is left out)."""
    complete = True
    body = reader.guarded(_mapping, raw, field)
    if body is None:
        return ClaimSpec(), False
    devices = reader.guarded(_mapping, body.get("devices"), f"{field}.devices")
    if devices is None:
        return ClaimSpec(), False
    reader.unsupported(body, field, ("devices",))
    requests: list[ClaimRequest] = []
    raw_requests = reader.guarded(_list, devices.get("requests"), f"{field}.devices.requests")
    if raw_requests is None:
        complete = False
    elif len(raw_requests) > DEVICE_REQUESTS_MAX:
        reader.report(f"{field}.devices.requests", f"more than {DEVICE_REQUESTS_MAX} requests")
        complete = False
    else:
        for index, item in enumerate(raw_requests):
            where = f"{field}.devices.requests[{index}]"
            request = reader.guarded(_request, reader, item, where)
            if request is None:
                complete = False
            else:
                requests.append(request)
    if len({request.name for request in requests}) != len(requests):
        reader.report(f"{field}.devices.requests", "request names must be unique")
        complete = False
    # Constraints may name a request that was left out for a problem of its own: check them
    # against the names as written, so only their own problems are reported.
    names = {
        item["name"] for item in raw_requests or () if isinstance(item, Mapping) and isinstance(item.get("name"), str)
    }
    constraints: list[ClaimConstraint] = []
    raw_constraints = reader.guarded(_list, devices.get("constraints"), f"{field}.devices.constraints")
    if raw_constraints is None:
        complete = False
    for index, item in enumerate(raw_constraints or []):
        where = f"{field}.devices.constraints[{index}]"
        constraint = reader.guarded(_constraint, reader, item, where, names)
        if constraint is None:
            complete = False
        else:
            constraints.append(constraint)
    reader.unsupported(devices, f"{field}.devices", ("requests", "constraints", "config"))
    return ClaimSpec(tuple(requests), tuple(constraints), bool(devices.get("config"))), complete


def claim_spec_of(
    raw: Any, kind: str, namespace: str, name: str, field: str
) -> tuple[ClaimSpec | None, list[DraProblem]]:
    """A ResourceClaimSpec (`spec` of a claim, `spec.spec` of a template); None when a part of it
    could not be read (the problems say which)."""
    reader = _Reader(kind, namespace, name)
    spec, complete = _claim_spec(reader, raw, field)
    return (spec if complete else None), reader.problems


def _allocation(raw: Any, field: str) -> ClaimAllocation:
    body = _mapping(raw, field)
    devices = _mapping(body.get("devices"), f"{field}.devices")
    results: list[DeviceResult] = []
    for index, item in enumerate(_list(devices.get("results"), f"{field}.devices.results")):
        where = f"{field}.devices.results[{index}]"
        entry = _mapping(item, where)
        results.append(
            DeviceResult(
                request=_string(entry.get("request"), f"{where}.request"),
                driver=_string(entry.get("driver"), f"{where}.driver"),
                pool=_string(entry.get("pool"), f"{where}.pool"),
                device=_string(entry.get("device"), f"{where}.device"),
                admin_access=_boolean(entry.get("adminAccess"), f"{where}.adminAccess"),
            )
        )
    return ClaimAllocation(tuple(results), _selector_node_name(body.get("nodeSelector"), f"{field}.nodeSelector"))


def _selector_node_name(raw: Any, field: str) -> str | None:
    """The node of a node selector of the shape the scheduler writes (one term, one field
    requirement metadata.name In [node]); None for no selector. Other shapes: _Bad."""
    if raw is None:
        return None
    terms = _list(_mapping(raw, field).get("nodeSelectorTerms"), f"{field}.nodeSelectorTerms")
    if len(terms) == 1:
        term = _mapping(terms[0], f"{field}.nodeSelectorTerms[0]")
        fields = _list(term.get("matchFields"), f"{field}.nodeSelectorTerms[0].matchFields")
        if len(fields) == 1 and not term.get("matchExpressions"):
            requirement = _mapping(fields[0], f"{field}.nodeSelectorTerms[0].matchFields[0]")
            values = requirement.get("values")
            if (
                requirement.get("key") == "metadata.name"
                and requirement.get("operator") == "In"
                and isinstance(values, list)
                and len(values) == 1
                and isinstance(values[0], str)
            ):
                return values[0]
    raise _Bad(field, "only a node selector on metadata.name of one node is understood")


def _consumer_ref(raw: Any, field: str) -> ConsumerRef:
    body = _mapping(raw, field)
    return ConsumerRef(
        resource=_string(body.get("resource"), f"{field}.resource"),
        name=_string(body.get("name"), f"{field}.name"),
        uid=_string(body.get("uid"), f"{field}.uid"),
        api_group=_string(body.get("apiGroup"), f"{field}.apiGroup", required=False),
    )


def convert_resource_claim(obj: Any) -> tuple[ClaimInfo | None, list[DraProblem]]:
    """A ResourceClaim with its status.allocation and status.reservedFor. The claim comes back
    even when its spec has problems (they are reported), with those parts left out; callers must
    not allocate a claim that has spec problems (claim_is_usable)."""
    reader, body = _start(obj, "ResourceClaim", namespaced=True)
    if reader is None:
        return None, body  # type: ignore[return-value]
    assert isinstance(body, Mapping)
    metadata = body["metadata"]
    uid = metadata.get("uid") if isinstance(metadata.get("uid"), str) else ""
    spec, _ = _claim_spec(reader, body.get("spec"), "spec")
    status = reader.guarded(_mapping, body.get("status"), "status") or {}
    allocation = None
    if status.get("allocation") is not None:
        allocation = reader.guarded(_allocation, status.get("allocation"), "status.allocation")
    reserved: list[ConsumerRef] = []
    for index, item in enumerate(reader.guarded(_list, status.get("reservedFor"), "status.reservedFor") or []):
        where = f"status.reservedFor[{index}]"
        ref = reader.guarded(_consumer_ref, item, where)
        if ref is not None:
            reserved.append(ref)
    return ClaimInfo(reader.namespace, reader.name, str(uid), spec, allocation, tuple(reserved)), reader.problems


def claim_is_usable(problems: Sequence[DraProblem]) -> bool:
    """Whether a claim converted with these problems may be allocated: no problem in its spec,
    and none in its status.allocation (a claim whose allocation cannot be read may hold devices
    already; allocating it again could hand them out twice)."""
    return not any(problem.field.startswith(("spec", "status.allocation")) for problem in problems)


def convert_claim_template(obj: Any) -> tuple[tuple[str, str, ClaimSpec] | None, list[DraProblem]]:
    """A ResourceClaimTemplate: (namespace, name, spec.spec); None when its spec has problems."""
    reader, body = _start(obj, "ResourceClaimTemplate", namespaced=True)
    if reader is None:
        return None, body  # type: ignore[return-value]
    assert isinstance(body, Mapping)
    spec_body = reader.guarded(_mapping, body.get("spec"), "spec")
    if spec_body is None:
        return None, reader.problems
    spec, complete = _claim_spec(reader, spec_body.get("spec"), "spec.spec")
    if not complete:
        return None, reader.problems
    return (reader.namespace, reader.name, spec), reader.problems


def allocation_status(allocation: ClaimAllocation, pod_name: str, pod_uid: str) -> dict[str, Any]:
    """The claim `status` the API server expects for an allocation reserved for one pod:
    {"allocation": {"devices": {"results": [...]}, "nodeSelector": ...}, "reservedFor": [...]}."""
    results: list[dict[str, Any]] = []
    for result in allocation.results:
        entry: dict[str, Any] = {
            "request": result.request,
            "driver": result.driver,
            "pool": result.pool,
            "device": result.device,
        }
        if result.admin_access:
            entry["adminAccess"] = True
        results.append(entry)
    body: dict[str, Any] = {"devices": {"results": results}}
    if allocation.node_name is not None:
        body["nodeSelector"] = {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [allocation.node_name]}]}
            ]
        }
    return {"allocation": body, "reservedFor": [{"resource": "pods", "name": pod_name, "uid": pod_uid}]}
