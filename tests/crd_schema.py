"""What the Kubernetes API server does to a custom object under a CRD's structural schema.

A small, independent model of apiextensions-apiserver's handling of a create or update, enough for
the schemas tests hold our objects to (Volcano's Numatopology CRD, the NodeResourceTopology CRD):

- pruning (structural schema semantics, as k8s.io/apiextensions-apiserver pkg/apiserver/schema/pruning
  does it, whatever the value's type): in an object whose schema has `properties`, a field not
  declared there is dropped unless the schema says `x-kubernetes-preserve-unknown-fields: true`; an
  object schema with `additionalProperties` keeps every key and walks each value with that schema;
  an object schema with neither (and no preserve) keeps nothing. At the root, apiVersion, kind and
  metadata are the server's own (ObjectMeta is pruned by its Go type, not by the CRD schema).
- validation of what is left: `type` (integer is an int, not a bool or float; number accepts
  both), `nullable`, `required`, `enum`, `minimum` / `maximum` (with exclusive forms),
  `minLength` / `maxLength`, `pattern`, `minItems` / `maxItems`, `anyOf` / `allOf`, and
  `x-kubernetes-int-or-string` (an int or a string, whatever `type` says), `format` int32 / int64
  (their ranges).

Not modelled: defaulting, `oneOf` / `not`, other formats, CEL rules (x-kubernetes-validations), list
types and map keys; none occurs in the schemas the tests use (crd_features_used says so).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from typing import Any

import attrs

ROOT_SERVER_FIELDS = ("apiVersion", "kind", "metadata")
# The keywords this model implements; anything else in a schema makes the model unfit for it.
MODELLED_KEYWORDS = frozenset(
    {
        "type",
        "description",
        "properties",
        "additionalProperties",
        "items",
        "required",
        "enum",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "nullable",
        "anyOf",
        "allOf",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-int-or-string",
        "format",  # int32 and int64 only (their ranges); any other raises
    }
)
_INTEGER_FORMATS = {"int32": 2**31, "int64": 2**63}


@attrs.frozen(slots=True)
class Admission:
    """The object as stored, the paths pruning dropped, and the validation errors (empty: admitted)."""

    stored: Any
    dropped: tuple[str, ...]
    errors: tuple[str, ...]


def crd_schema(crd: Mapping[str, Any], version: str) -> Mapping[str, Any]:
    """The openAPIV3Schema of one served version of a CRD."""
    for entry in crd["spec"]["versions"]:
        if entry["name"] == version:
            schema: Mapping[str, Any] = entry["schema"]["openAPIV3Schema"]
            return schema
    raise KeyError(f"{crd['metadata']['name']}: no version {version}")


def crd_features_used(schema: Mapping[str, Any]) -> set[str]:
    """Every keyword the schema uses (to check the model covers them)."""
    used: set[str] = set()
    for node in _walk_schemas(schema):
        used.update(node)
    return used


def _walk_schemas(schema: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield schema
    for child in (schema.get("properties") or {}).values():
        yield from _walk_schemas(child)
    for key in ("additionalProperties", "items"):
        child = schema.get(key)
        if isinstance(child, Mapping):
            yield from _walk_schemas(child)
    for key in ("anyOf", "allOf"):
        for child in schema.get(key) or ():
            yield from _walk_schemas(child)


def _preserves(schema: Mapping[str, Any]) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields"))


def prune(schema: Mapping[str, Any], value: Any, path: str = "", dropped: list[str] | None = None) -> Any:
    """A copy of value with the fields the schema does not declare removed; their paths appended to
    dropped. Values of the wrong type are left for validation to reject."""
    sink = dropped if dropped is not None else []
    if isinstance(value, dict):
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        result: dict[str, Any] = {}
        for key, item in value.items():
            child_path = f"{path}.{key}" if path else key
            if isinstance(properties, Mapping) and key in properties:
                result[key] = prune(properties[key], item, child_path, sink)
            elif isinstance(additional, Mapping):
                result[key] = prune(additional, item, child_path, sink)
            elif additional is True or _preserves(schema):
                result[key] = copy.deepcopy(item)
            else:
                sink.append(child_path)
        return result
    if isinstance(value, list):
        # Without an items schema, objects in the list lose every key (the server prunes with no schema).
        items = schema.get("items")
        item_schema: Mapping[str, Any] = items if isinstance(items, Mapping) else {}
        return [prune(item_schema, item, f"{path}[{index}]", sink) for index, item in enumerate(value)]
    return value


def _type_matches(expected: str, value: Any) -> bool:
    if expected == "object":
        return isinstance(value, dict)
    if expected == "array":
        return isinstance(value, list)
    if expected == "string":
        return isinstance(value, str)
    if expected == "boolean":
        return isinstance(value, bool)
    if expected == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    raise ValueError(f"unknown schema type {expected!r}")


def _bounds(schema: Mapping[str, Any], value: float, path: str) -> list[str]:
    errors: list[str] = []
    minimum = schema.get("minimum")
    if minimum is not None:
        if schema.get("exclusiveMinimum") and value <= minimum:
            errors.append(f"{path}: {value} must be greater than {minimum}")
        elif value < minimum:
            errors.append(f"{path}: {value} must be greater than or equal to {minimum}")
    maximum = schema.get("maximum")
    if maximum is not None:
        if schema.get("exclusiveMaximum") and value >= maximum:
            errors.append(f"{path}: {value} must be less than {maximum}")
        elif value > maximum:
            errors.append(f"{path}: {value} must be less than or equal to {maximum}")
    return errors


def _format(schema: Mapping[str, Any], value: float, path: str) -> list[str]:
    name = schema.get("format")
    if name is None:
        return []
    if name not in _INTEGER_FORMATS:
        raise ValueError(f"format {name!r} is not modelled")
    limit = _INTEGER_FORMATS[name]
    return [] if -limit <= value < limit else [f"{path}: {value} is out of range for {name}"]


def _string_rules(schema: Mapping[str, Any], value: str, path: str) -> list[str]:
    errors: list[str] = []
    if "minLength" in schema and len(value) < schema["minLength"]:
        errors.append(f"{path}: shorter than {schema['minLength']}")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{path}: longer than {schema['maxLength']}")
    if "pattern" in schema and re.search(schema["pattern"], value) is None:
        errors.append(f"{path}: {value!r} does not match {schema['pattern']!r}")
    return errors


def validate(schema: Mapping[str, Any], value: Any, path: str = "") -> list[str]:
    """The errors the API server would report for value (already pruned) under schema."""
    where = path or "<root>"
    if value is None:
        return [] if schema.get("nullable") else [f"{where}: must not be null"]
    errors: list[str] = []
    for option in schema.get("allOf") or ():
        errors += validate(option, value, path)
    any_of = schema.get("anyOf")
    if any_of and all(validate(option, value, path) for option in any_of):
        errors.append(f"{where}: matches none of anyOf")
    expected = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or _type_matches("integer", value)):
            return [*errors, f"{where}: expected an integer or a string, got {type(value).__name__}"]
    elif expected is not None and not _type_matches(expected, value):
        return [*errors, f"{where}: expected {expected}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        errors += _bounds(schema, value, where)
        errors += _format(schema, value, where)
    if isinstance(value, str):
        errors += _string_rules(schema, value, where)
    if isinstance(value, list):
        if "minItems" in schema and len(value) < schema["minItems"]:
            errors.append(f"{where}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errors.append(f"{where}: more than {schema['maxItems']} items")
        items = schema.get("items")
        if isinstance(items, Mapping):
            for index, item in enumerate(value):
                errors += validate(items, item, f"{path}[{index}]")
    if isinstance(value, dict):
        for name in schema.get("required") or ():
            if name not in value:
                errors.append(f"{path + '.' if path else ''}{name}: required")
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            child_path = f"{path}.{key}" if path else key
            if key in properties:
                errors += validate(properties[key], item, child_path)
            elif isinstance(additional, Mapping):
                errors += validate(additional, item, child_path)
    return errors


def admit(crd: Mapping[str, Any], obj: Mapping[str, Any]) -> Admission:
    """Prune then validate obj under the CRD's schema for the version its apiVersion names."""
    group = crd["spec"]["group"]
    api_version = str(obj.get("apiVersion", ""))
    prefix = f"{group}/"
    if not api_version.startswith(prefix):
        return Admission(obj, (), (f"apiVersion {api_version!r} is not in group {group}",))
    if obj.get("kind") != crd["spec"]["names"]["kind"]:
        return Admission(obj, (), (f"kind {obj.get('kind')!r} is not {crd['spec']['names']['kind']}",))
    schema = crd_schema(crd, api_version[len(prefix) :])
    dropped: list[str] = []
    body = {key: value for key, value in obj.items() if key not in ROOT_SERVER_FIELDS}
    pruned = prune(schema, body, "", dropped)
    stored = {key: copy.deepcopy(obj[key]) for key in ROOT_SERVER_FIELDS if key in obj} | pruned
    # The root's own fields are the server's; validate the rest against the schema.
    root_schema = {key: value for key, value in schema.items() if key != "properties"}
    root_schema["properties"] = {
        key: value for key, value in (schema.get("properties") or {}).items() if key not in ROOT_SERVER_FIELDS
    }
    errors = validate(root_schema, pruned)
    return Admission(stored, tuple(dropped), tuple(errors))
