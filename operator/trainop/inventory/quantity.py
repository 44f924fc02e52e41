"""Parses Kubernetes resource quantities ("8", "1k", "500m", "1Gi", "1e3") into exact numbers."""

from __future__ import annotations

import functools
import math
import re
from decimal import Decimal, InvalidOperation

# Suffixes of k8s.io/apimachinery/pkg/api/resource: binary SI, decimal SI, decimal exponent.
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY = re.compile(
    r"^(?P<num>[+-]?(?:\d+(?:\.\d*)?|\.\d+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?\d+)?$"
)


def parse_quantity(value: object) -> Decimal:
    """Exact value of a quantity; accepts str, int and float (YAML often leaves `8` unquoted).

    Raises ValueError on anything the API server would reject, so callers choose their fallback.
    """
    if isinstance(value, bool):  # bool is an int subclass; `true` is never a quantity
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"not a quantity: {value!r}")
        return Decimal(repr(value))
    if not isinstance(value, str):
        raise ValueError(f"not a quantity: {value!r}")
    m = _QUANTITY.match(value.strip())
    if not m:
        raise ValueError(f"not a quantity: {value!r}")
    try:
        number = Decimal(m.group("num"))
    except InvalidOperation as exc:  # pragma: no cover - the regex only admits valid decimals
        raise ValueError(f"not a quantity: {value!r}") from exc
    suffix = m.group("suffix") or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return number.scaleb(int(suffix[1:]))  # "e3" / "E-2"


def parse_count(value: object, *, round_up: bool = False, default: int | None = None) -> int:
    """A quantity as a whole count of devices (extended resources are always integers).

    Capacity rounds down (a fraction of a device cannot be used); requests round up like
    Quantity.Value() does. Negative values clamp to 0. A malformed value returns `default`
    when one is given, else raises ValueError.
    """
    if type(value) is str:  # the usual case, and few distinct strings: kept (pure)
        return _string_count(value, round_up, default)
    return _count(value, round_up, default)


@functools.lru_cache(maxsize=4096)
def _string_count(value: str, round_up: bool, default: int | None) -> int:
    # Every pod of every gang in the admission cycle's intake reads its GPU request here;
    # parsing "8" with Decimal each time was a third of a running gang's intake.
    return _count(value, round_up, default)


def _count(value: object, round_up: bool, default: int | None) -> int:
    try:
        exact = parse_quantity(value)
    except ValueError:
        if default is not None:
            return default
        raise
    count = math.ceil(exact) if round_up else math.floor(exact)
    return max(0, int(count))
