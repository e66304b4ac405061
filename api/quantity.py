"""Kubernetes resource quantities ("500m", "2Gi", "1e3") parsed exactly, and bounded.

The grammar is apimachinery's (pkg/api/resource/quantity.go, parseQuantityString and the suffixer):

    quantity  ::= [+-] digits [ "." digits ] suffix
    suffix    ::= "" | n | u | m | k | M | G | T | P | E          (decimal SI)
                | Ki | Mi | Gi | Ti | Pi | Ei                      (binary SI)
                | (e | E) [+-] digits                              (decimal exponent)

with ASCII digits only, surrounding whitespace trimmed (as Quantity.UnmarshalJSON does), a JSON
number read from its text, and a non-zero value rounded away from zero to a whole nano unit, as Go
does. We parse into a Fraction so "0.1" CPU and "100m" compare equal and nothing rounds until the
caller decides how.

Where Go is looser than a scheduler can afford, we refuse rather than guess (the API server writes
core objects' quantities canonically, so these only reach us through custom resources or a hostile
writer): a number with no digits at all (Go reads "Gi" or "." as zero), text longer than
MAX_QUANTITY_LENGTH (a 5,000-digit number), an exponent Go would truncate to 32 bits, and a value
that does not fit an int64 in the unit the caller counts in (milli-units for CPU and devices, bytes
for memory): kube-scheduler reads quantities as int64 too, so no real request lies beyond it.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction

# Longest quantity text we read: far beyond any real one ("9223372036854775807" is 19 characters).
MAX_QUANTITY_LENGTH = 64
# The largest value of a Go int64: the bound of every canonical quantity value.
MAX_INT64 = 2**63 - 1
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
# Decimal exponents beyond these cannot change the outcome: above, every non-zero value exceeds
# MAX_INT64 in any unit; below, every non-zero value rounds up to one nano unit.
_LARGEST_EXPONENT = 40
_SMALLEST_EXPONENT = -(MAX_QUANTITY_LENGTH + 12)
_NANOS_PER_UNIT = 10**9

_BINARY_EXPONENTS = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_EXPONENTS = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
# parseQuantityString's scan: sign, digits, optional fraction, then suffix letters, an optional
# sign and digits. Which suffixes are valid is decided afterwards, as the suffixer does.
_SCAN = re.compile(r"(?P<sign>[+-]?)(?P<whole>[0-9]*)(?:\.(?P<fraction>[0-9]*))?(?P<suffix>[eEinumkKMGTP]*[+-]?[0-9]*)")
_EXPONENT = re.compile(r"[eE](?P<value>[+-]?[0-9]+)")


class QuantityError(ValueError):
    """A value that is not a Kubernetes quantity, or one beyond what a quantity may be."""


def shown(value: object, limit: int = 40) -> str:
    """repr for a message, cut short; safe for any JSON value (Python refuses to print an int of
    more than 4,300 digits, and a 5,000-digit string is no use in a log line)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"<integer of about {int(value.bit_length() * 0.30103)} digits>"
    if isinstance(value, (dict, list)):
        return f"<{type(value).__name__}>" if len(value) > 8 else _cut(repr_of_container(value), limit)
    return _cut(repr(value), limit)


def quoted(value: object, limit: int = 40) -> str:
    """A key or string from an object, quoted for a message and cut short with its length said (a
    bad list may be megabytes long); any other value is quoted as its repr."""
    text = value if isinstance(value, str) else repr(value)
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


def repr_of_container(value: dict[object, object] | list[object]) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{shown(key, 20)}: {shown(item, 20)}" for key, item in value.items()) + "}"
    return "[" + ", ".join(shown(item, 20) for item in value) + "]"


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else f"{text[: limit - 8]}...({len(text)} characters)"


def _invalid(value: object, reason: str) -> QuantityError:
    return QuantityError(f"invalid quantity {shown(value)}: {reason}")


def _scale(text: str) -> tuple[int, int, str] | str:
    """(base, exponent, format) of a suffix, or why it is not one."""
    if text in _DECIMAL_EXPONENTS:
        return 10, _DECIMAL_EXPONENTS[text], "decimal"
    if text in _BINARY_EXPONENTS:
        return 2, _BINARY_EXPONENTS[text], "binary"
    match = _EXPONENT.fullmatch(text)
    if match is None:
        return f"unknown suffix {text!r} (use m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei or an exponent such as e3)"
    exponent = int(match["value"])
    if not _INT32_MIN <= exponent <= _INT32_MAX:
        return f"exponent {match['value']} is out of range"
    return 10, exponent, "exponent"


def _parse_text(original: object, text: str) -> tuple[int, int]:
    """(numerator, denominator) of the quantity, the denominator a positive power of ten at most
    10**9: integer arithmetic only, since every pod's every request comes through here."""
    if not text:
        raise _invalid(original, "empty")
    if len(text) > MAX_QUANTITY_LENGTH:
        raise _invalid(original, f"longer than {MAX_QUANTITY_LENGTH} characters")
    match = _SCAN.fullmatch(text)
    if match is None:
        raise _invalid(
            original, "expected a number with an optional suffix (m, k, M, G, Ki, Mi, Gi, ...) or exponent (e3)"
        )
    whole, fraction = match["whole"], match["fraction"] or ""
    if not whole and not fraction:
        raise _invalid(original, "no digits")
    scale = _scale(match["suffix"])
    if isinstance(scale, str):
        raise _invalid(original, scale)
    base, exponent, _ = scale
    digits = int(whole + fraction)
    if digits == 0:
        return 0, 1
    if base == 2:
        numerator, denominator = digits << exponent, 10 ** len(fraction)
    elif exponent > _LARGEST_EXPONENT:
        raise _invalid(original, f"beyond the largest quantity ({MAX_INT64})")
    else:
        power = max(exponent, _SMALLEST_EXPONENT) - len(fraction)
        numerator, denominator = (digits * 10**power, 1) if power >= 0 else (digits, 10**-power)
    if denominator > _NANOS_PER_UNIT:
        # Go keeps nano precision and rounds a non-zero remainder away from zero ("if you want
        # some resources, you should get some resources").
        numerator = -(-numerator * _NANOS_PER_UNIT // denominator)
        denominator = _NANOS_PER_UNIT
    return (-numerator if match["sign"] == "-" else numerator), denominator


def _ratio(value: str | int | float) -> tuple[int, int]:
    """The quantity as (numerator, positive denominator); QuantityError for anything else."""
    if isinstance(value, bool):
        raise _invalid(value, "a boolean is not a quantity")
    if isinstance(value, int):
        if abs(value) > MAX_INT64:
            raise _invalid(value, f"beyond the largest quantity ({MAX_INT64})")
        return value, 1
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise _invalid(value, "not a finite number")
        # A JSON number is read from its text, as Go does; repr gives the shortest text of the float.
        return _parse_text(value, repr(value))
    if not isinstance(value, str):
        raise _invalid(value, f"expected a string or number, got {type(value).__name__}")
    return _parse_string(value)


# Kept per text: a cluster's pods repeat a few quantities ("2", "4Gi") in every watch event, and a
# pure function of an immutable string gives the same answer each time (errors are not kept).
@functools.lru_cache(maxsize=4096)
def _parse_string(value: str) -> tuple[int, int]:
    return _parse_text(value, value.strip())


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a Kubernetes quantity (string or JSON number) into an exact Fraction of base units.

    Raises QuantityError for anything else, never another exception, whatever the value.
    """
    numerator, denominator = _ratio(value)
    return Fraction(numerator, denominator)


def parse_nanos(value: str | int | float) -> int:
    """The quantity exactly, in billionths of its unit (Go keeps nano precision, so every quantity
    is a whole number of them); for exact comparisons and sums without Fractions."""
    numerator, denominator = _ratio(value)
    return numerator * (_NANOS_PER_UNIT // denominator)


def _bounded(value: int, original: object, unit: str) -> int:
    if abs(value) > MAX_INT64:
        raise _invalid(original, f"beyond the largest quantity ({MAX_INT64}{unit})")
    return value


def parse_milli(value: str | int | float) -> int:
    """Quantity in thousandths (Go's MilliValue), rounded up; within int64."""
    numerator, denominator = _ratio(value)
    return _bounded(-(-numerator * 1000 // denominator), value, "m")


def parse_integer(value: str | int | float) -> int:
    """Quantity as a whole number of base units (Go's Value: bytes, devices), rounded up; within int64."""
    numerator, denominator = _ratio(value)
    return _bounded(-(-numerator // denominator), value, "")
