"""Sizes in bytes: parsing what people type (``500Mi``, ``10Gi``, ``2T``) and printing it back.

A module of its own with no XCE imports but the error type, so the CLI can use it without
loading the model.
"""

from __future__ import annotations

import re
from decimal import Decimal

from xce.errors import InvalidRequest

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtpKMGTP][iI]?)?[bB]?\s*$")
_SIZE_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15,
               "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50}
MAX_SIZE = 2**63 - 1


def parse_size(value: str | int, what: str = "size") -> int:
    """Bytes from ``500Mi``, ``10Gi``, ``2T`` (K M G T P are powers of 1000, Ki Mi Gi Ti Pi of 1024) or an int."""
    if isinstance(value, bool):
        raise InvalidRequest(f"invalid {what} {value!r}")
    if isinstance(value, int):
        n = value
    else:
        m = _SIZE.match(value) if isinstance(value, str) else None
        if m is None:
            raise InvalidRequest(f"invalid {what} {value!r}: use bytes or a unit, e.g. 500Mi, 10Gi, 2T")
        # exact decimal arithmetic: a float turns 24 digits of Pi into inf or rounds 2**63-1 up
        n = int(Decimal(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()])
    if n > MAX_SIZE:
        raise InvalidRequest(f"invalid {what} {value!r}: too large (at most {MAX_SIZE} bytes, "
                             "just under 8192Pi)")
    if n <= 0:
        raise InvalidRequest(f"invalid {what} {value!r}: must be more than 0 bytes")
    return n


def format_size(n: float | None) -> str | None:
    """Bytes in binary units: ``10Gi``, ``512Mi``, ``1.5Ti``."""
    if n is None:
        return None
    for unit, scale in (("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n >= scale:
            return f"{n / scale:.4g}{unit}"
    return f"{n:g}"
