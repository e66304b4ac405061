"""Kubernetes resource quantities ("500m", "2Gi", "1e3") parsed exactly.

The API server accepts a decimal number with an optional binary suffix (Ki..Ei), decimal suffix
(n, u, m, "", k, M, G, T, P, E) or decimal exponent (e3, E-2). We parse into a Fraction so that
"0.1" CPU and "100m" compare equal and nothing rounds until the caller decides how.
"""

from __future__ import annotations

import re
from fractions import Fraction

_BINARY_SUFFIXES = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_DECIMAL_SUFFIXES = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_QUANTITY = re.compile(
    r"^(?P<sign>[+-]?)(?P<number>\d+(?:\.\d*)?|\.\d+)"
    r"(?:(?P<exponent>[eE][+-]?\d+)|(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(value: str | int | float) -> Fraction:
    """Parse a Kubernetes quantity into an exact Fraction of base units."""
    if isinstance(value, bool):
        raise QuantityError(f"invalid quantity {value!r}: a boolean is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"invalid quantity {value!r}: not a finite number")
        return Fraction(value).limit_denominator(10**9)
    if not isinstance(value, str):
        raise QuantityError(f"invalid quantity {value!r}: expected a string or number")
    text = value.strip()
    match = _QUANTITY.match(text)
    if match is None:
        raise QuantityError(
            f"invalid quantity {value!r}: expected a number with an optional suffix "
            "(m, k, M, G, Ki, Mi, Gi, ...) or exponent (e3)"
        )
    number = Fraction(match["number"])
    if match["exponent"]:
        number *= Fraction(10) ** int(match["exponent"][1:])
    else:
        suffix = match["suffix"] or ""
        number *= _BINARY_SUFFIXES.get(suffix) or _DECIMAL_SUFFIXES[suffix]
    return -number if match["sign"] == "-" else number


def parse_milli(value: str | int | float) -> int:
    """Quantity in thousandths, rounded up as the API server does for CPU."""
    scaled = parse_quantity(value) * 1000
    return -((-scaled.numerator) // scaled.denominator)


def parse_integer(value: str | int | float) -> int:
    """Quantity as a whole number of base units (bytes, devices), rounded up."""
    quantity = parse_quantity(value)
    return -((-quantity.numerator) // quantity.denominator)
