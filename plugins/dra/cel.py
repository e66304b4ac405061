"""CEL device selectors evaluated with Kubernetes' semantics for the DRA environment.

The implementation is cel-python (`celpy`): maintained, written in Python (its regex engine,
google-re2, ships wheels: nothing to build on the scheduler image), and it lets us supply the
Kubernetes library functions ourselves. The other candidates on PyPI wrap native CEL engines
(common-expression-language: Rust; cel-expr-python: C++) whose function sets cannot be extended
from Python as simply. The environment mirrors k8s.io/dynamic-resource-allocation/cel:

- `device.driver` (string), `device.allowMultipleAllocations` (bool),
  `device.attributes['<domain>'].<id>` and `device.capacity['<domain>'].<id>`; names without a
  domain in the slice belong to the driver's domain. Looking up a domain the device does not have
  gives an empty map; looking up an id the domain lacks is an evaluation error, and an error means
  the device does not match and the problem is reported (as the kube-scheduler does).
- version attributes are semver values: `semver(s)`, `isSemver(s)`, `.major()`, `.minor()`,
  `.patch()`, `.isLessThan(v)`, `.isGreaterThan(v)`, `.compareTo(v)` and `==`.
- capacities are quantities: `quantity(s)`, `isQuantity(s)`, `.compareTo(q)`, `.isLessThan(q)`,
  `.isGreaterThan(q)`, `.add(q|int)`, `.sub(q|int)`, `.asInteger()`, `.asApproximateFloat()`,
  `.isInteger()`, `.sign()` and `==`.
- `.includes(x)` on list-valued attributes (and scalars, where it is equality).
- from the strings extension: `.lowerAscii()`, `.upperAscii()`, `.trim()`, `.indexOf(s)`,
  `.lastIndexOf(s)`, `.replace(a, b)`, `.split(s)`; CEL's own `.matches(re)`, `.contains(s)`,
  `.startsWith(s)`, `.endsWith(s)`, `size()`.

Not available: the `cel.bind` macro (celpy's parser has no macro for it) — such an expression
fails to compile and every device it selects is reported as not matching.

celpy does not type-check when compiling, as cel-go does: an ill-typed expression (e.g. `'a' in
'abc'`) fails only when evaluated, or evaluates where cel-go would refuse it. The API server
compiles and type-checks every selector when the object is created, so such expressions do not
reach the scheduler.

Each expression is compiled once (CelEvaluator keeps the compiled programs by expression text).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from fractions import Fraction
from functools import total_ordering
from typing import Any

import attrs
import celpy
from celpy import celtypes

from numasched.api.dra import AttributeValue, DeviceId, DraDevice, SemVer, split_qualified
from numasched.api.quantity import QuantityError, parse_quantity

# An expression longer than this is refused without compiling (the API server's limit).
MAX_EXPRESSION_LENGTH = 10 * 1024

_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
    r"(?:\+[0-9a-zA-Z-]+(?:\.[0-9a-zA-Z-]+)*)?"
)


def parse_semver(text: str) -> SemVer | None:
    """A semantic version 2.0.0 string (no leading `v`), or None."""
    match = _SEMVER.fullmatch(text)
    if match is None:
        return None
    pre = tuple(match.group(4).split(".")) if match.group(4) else ()
    return SemVer(int(match.group(1)), int(match.group(2)), int(match.group(3)), pre, text)


class CelTypeError(Exception):
    """A library function applied to the wrong type (becomes a CEL evaluation error)."""


@total_ordering
@attrs.frozen(slots=True, eq=False)
class CelSemver:
    value: SemVer

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelSemver) and self.value.sort_key() == other.value.sort_key()

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, CelSemver):
            raise CelTypeError("a semver compares only with a semver")
        return self.value.sort_key() < other.value.sort_key()

    def __hash__(self) -> int:
        return hash(self.value.sort_key())


@total_ordering
@attrs.frozen(slots=True, eq=False)
class CelQuantity:
    value: Fraction

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CelQuantity) and self.value == other.value

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, CelQuantity):
            raise CelTypeError("a quantity compares only with a quantity")
        return self.value < other.value

    def __hash__(self) -> int:
        return hash(self.value)


def _compare(left: Any, right: Any) -> celtypes.IntType:
    if type(left) is not type(right) or not isinstance(left, (CelSemver, CelQuantity)):
        raise CelTypeError("compareTo needs two semvers or two quantities")
    return celtypes.IntType(-1 if left < right else (1 if right < left else 0))


def _semver(text: Any) -> CelSemver:
    parsed = parse_semver(str(text))
    if parsed is None:
        raise CelTypeError(f"invalid semver {str(text)[:40]!r}")
    return CelSemver(parsed)


def _quantity(text: Any) -> CelQuantity:
    try:
        return CelQuantity(parse_quantity(str(text)))
    except QuantityError as error:
        raise CelTypeError(str(error)) from None


def _as_quantity(value: Any) -> CelQuantity:
    if isinstance(value, CelQuantity):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return CelQuantity(Fraction(int(value)))
    raise CelTypeError("expected a quantity or an int")


def _semver_part(index: int) -> Callable[[Any], celtypes.IntType]:
    def part(value: Any) -> celtypes.IntType:
        if not isinstance(value, CelSemver):
            raise CelTypeError("major/minor/patch apply to a semver")
        return celtypes.IntType((value.value.major, value.value.minor, value.value.patch)[index])

    return part


def _as_integer(value: Any) -> celtypes.IntType:
    if not isinstance(value, CelQuantity) or value.value.denominator != 1:
        raise CelTypeError("asInteger needs a whole quantity")
    if not -(1 << 63) <= value.value.numerator < 1 << 63:
        raise CelTypeError("quantity overflows an int")
    return celtypes.IntType(value.value.numerator)


def _includes(target: Any, item: Any) -> celtypes.BoolType:
    if isinstance(target, celtypes.ListType):
        return celtypes.BoolType(any(element == item for element in target))
    return celtypes.BoolType(bool(target == item))


def _quantity_only(function: Callable[[CelQuantity], Any]) -> Callable[[Any], Any]:
    def checked(value: Any) -> Any:
        if not isinstance(value, CelQuantity):
            raise CelTypeError("expected a quantity")
        return function(value)

    return checked


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise CelTypeError("expected a string")
    return str(value)


def _string_only(function: Callable[[str], Any]) -> Callable[[Any], Any]:
    def checked(value: Any) -> Any:
        return function(_text(value))

    return checked


def _ascii_case(text: str, change: Callable[[str], str]) -> str:
    """lowerAscii/upperAscii change ASCII letters only (non-ASCII letters stay as they are)."""
    return "".join(change(char) if char.isascii() else char for char in text)


def _is_semver(text: Any) -> celtypes.BoolType:
    return celtypes.BoolType(parse_semver(str(text)) is not None)


def _is_quantity(text: Any) -> celtypes.BoolType:
    try:
        parse_quantity(str(text))
    except QuantityError:
        return celtypes.BoolType(False)
    return celtypes.BoolType(True)


def _library() -> dict[str, Callable[..., Any]]:
    """The Kubernetes semver and quantity libraries, plus DRA's `includes`, as celpy functions
    (celpy calls `x.f(y)` as f(x, y))."""
    return {
        "semver": _semver,
        "isSemver": _is_semver,
        "quantity": _quantity,
        "isQuantity": _is_quantity,
        "compareTo": _compare,
        "isLessThan": lambda left, right: celtypes.BoolType(_compare(left, right) < 0),
        "isGreaterThan": lambda left, right: celtypes.BoolType(_compare(left, right) > 0),
        "major": _semver_part(0),
        "minor": _semver_part(1),
        "patch": _semver_part(2),
        "add": lambda left, right: CelQuantity(_as_quantity(left).value + _as_quantity(right).value),
        "sub": lambda left, right: CelQuantity(_as_quantity(left).value - _as_quantity(right).value),
        "asInteger": _as_integer,
        "asApproximateFloat": _quantity_only(lambda q: celtypes.DoubleType(float(q.value))),
        "isInteger": _quantity_only(lambda q: celtypes.BoolType(q.value.denominator == 1)),
        "sign": _quantity_only(lambda q: celtypes.IntType((q.value > 0) - (q.value < 0))),
        "includes": _includes,
        # The CEL strings extension Kubernetes enables (cel-go ext.Strings), the parts selectors use.
        "lowerAscii": _string_only(lambda text: celtypes.StringType(_ascii_case(text, str.lower))),
        "upperAscii": _string_only(lambda text: celtypes.StringType(_ascii_case(text, str.upper))),
        "trim": _string_only(lambda text: celtypes.StringType(text.strip())),
        "indexOf": lambda text, part: celtypes.IntType(_text(text).find(_text(part))),
        "lastIndexOf": lambda text, part: celtypes.IntType(_text(text).rfind(_text(part))),
        "replace": lambda text, old, new: celtypes.StringType(_text(text).replace(_text(old), _text(new))),
        "split": lambda text, separator: celtypes.ListType(
            [celtypes.StringType(part) for part in _text(text).split(_text(separator))]
        ),
    }


def _environment() -> Any:
    """celpy's Environment sets the interpreter's recursion limit to 2500 (CEL's nesting minimums
    need it); never let that lower a limit someone else raised."""
    before = sys.getrecursionlimit()
    environment = celpy.Environment()
    sys.setrecursionlimit(max(before, sys.getrecursionlimit()))
    return environment


def _cel_scalar(value: AttributeValue) -> Any:
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, int):
        return celtypes.IntType(value)
    if isinstance(value, SemVer):
        return CelSemver(value)
    if isinstance(value, tuple):
        return celtypes.ListType([_cel_scalar(item) for item in value])
    return celtypes.StringType(value)


class _DomainMap(celtypes.MapType):
    """device.attributes / device.capacity: an unknown domain is an empty map (k8s' mapper)."""

    def __getitem__(self, key: Any) -> Any:
        try:
            return super().__getitem__(key)
        except KeyError:
            return celtypes.MapType({})


def device_activation(device: DraDevice) -> dict[str, Any]:
    """The `device` variable for one device, as Kubernetes builds it."""
    attributes: dict[str, dict[Any, Any]] = {}
    for name, value in device.attributes.items():
        domain, ident = split_qualified(name)
        attributes.setdefault(domain, {})[celtypes.StringType(ident)] = _cel_scalar(value)
    capacity: dict[str, dict[Any, Any]] = {}
    for name, amount in device.capacity.items():
        domain, ident = split_qualified(name)
        capacity.setdefault(domain, {})[celtypes.StringType(ident)] = CelQuantity(amount)
    return {
        "device": celtypes.MapType(
            {
                celtypes.StringType("driver"): celtypes.StringType(device.driver),
                celtypes.StringType("allowMultipleAllocations"): celtypes.BoolType(device.shared),
                celtypes.StringType("attributes"): _DomainMap(
                    {celtypes.StringType(domain): celtypes.MapType(inner) for domain, inner in attributes.items()}
                ),
                celtypes.StringType("capacity"): _DomainMap(
                    {celtypes.StringType(domain): celtypes.MapType(inner) for domain, inner in capacity.items()}
                ),
            }
        )
    }


@attrs.frozen(slots=True)
class CelResult:
    """matched: the device is selected; error: why the expression could not decide (then
    matched is False), naming the expression."""

    matched: bool
    error: str | None = None


@attrs.define
class CelEvaluator:
    """Compiles each expression once and evaluates it against devices.

    Not shared between threads; one per scheduler (compiled programs are kept for the life of the
    evaluator, bounded by max_programs: past that the oldest half is dropped)."""

    max_programs: int = 4096
    _programs: dict[str, Any | str] = attrs.field(factory=dict, init=False)
    _environment: Any = attrs.field(factory=lambda: _environment(), init=False)
    _functions: Mapping[str, Callable[..., Any]] = attrs.field(factory=_library, init=False)
    # (expression, device id) -> (the device judged, result): devices are frozen, so a result
    # holds while the same device object is asked about again (a new slice makes new objects).
    _verdicts: dict[tuple[str, DeviceId], tuple[DraDevice, CelResult]] = attrs.field(factory=dict, init=False)
    max_verdicts: int = 65536
    _activations: dict[DeviceId, tuple[DraDevice, Mapping[str, Any]]] = attrs.field(factory=dict, init=False)

    def compile(self, expression: str) -> str | None:
        """None when the expression compiles; else the compiler's message."""
        program = self._program(expression)
        return program if isinstance(program, str) else None

    def _program(self, expression: str) -> Any | str:
        cached = self._programs.get(expression)
        if cached is not None:
            return cached
        if len(expression) > MAX_EXPRESSION_LENGTH:
            program: Any | str = f"expression longer than {MAX_EXPRESSION_LENGTH} characters"
        else:
            try:
                program = self._environment.program(self._environment.compile(expression), functions=self._functions)
            except Exception as error:
                program = "does not compile: " + " ".join(str(error).split())[:200]
        if len(self._programs) >= self.max_programs:
            for key in list(self._programs)[: self.max_programs // 2]:
                del self._programs[key]
        self._programs[expression] = program
        return program

    def selects(self, expression: str, device: DraDevice) -> CelResult:
        """matches(), remembered per expression and device object (the hot path asks the same
        question for every pod with the same claim spec); the device's CEL value is built once
        per device object too."""
        key = (expression, device.id)
        known = self._verdicts.get(key)
        if known is not None and known[0] is device:
            return known[1]
        built = self._activations.get(device.id)
        if built is None or built[0] is not device:
            built = (device, device_activation(device))
            self._activations[device.id] = built
        result = self.matches(expression, device, built[1])
        if len(self._verdicts) >= self.max_verdicts:
            for stale in list(self._verdicts)[: self.max_verdicts // 2]:
                del self._verdicts[stale]
            self._activations.clear()
        self._verdicts[key] = (device, result)
        return result

    def matches(self, expression: str, device: DraDevice, activation: Mapping[str, Any] | None = None) -> CelResult:
        """Whether `expression` selects `device`; `activation` is device_activation(device) when
        the caller evaluates several expressions on one device."""
        program = self._program(expression)
        if isinstance(program, str):
            return CelResult(False, f"CEL {_short(expression)}: {program}")
        try:
            value = program.evaluate(dict(activation) if activation is not None else device_activation(device))
        except Exception as error:
            return CelResult(False, f"CEL {_short(expression)} on {device.describe()}: {_message(error)}")
        if not isinstance(value, celtypes.BoolType):
            return CelResult(False, f"CEL {_short(expression)}: result is {type(value).__name__}, not bool")
        return CelResult(bool(value))


def _short(expression: str) -> str:
    text = " ".join(expression.split())
    return repr(text if len(text) <= 120 else text[:117] + "...")


def _message(error: Exception) -> str:
    args = getattr(error, "args", ())
    first = args[0] if args else error
    return " ".join(str(first).split())[:200]
