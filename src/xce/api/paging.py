"""Paging for list endpoints: ``limit`` and an opaque ``cursor``, the next one in a response header.

A listing stays a JSON list (callers that read one page keep working); when
more records follow, the response carries ``X-Next-Cursor``, which the caller
passes back as ``cursor`` with the same filters to get the next page.  A
cursor names the last record a page showed, so pages neither repeat nor skip
records while new ones arrive.  It is opaque: its form may change.
"""

from __future__ import annotations

import base64
import binascii

from xce.errors import InvalidRequest

NEXT_CURSOR = "X-Next-Cursor"

#: what the OpenAPI document says about the header
NEXT_CURSOR_DOC = {NEXT_CURSOR: {"description": "present when more records follow: pass it back as `cursor` "
                                                "(with the same filters) for the next page",
                                 "schema": {"type": "string"}}}


def encode_cursor(kind: str, value: int) -> str:
    return base64.urlsafe_b64encode(f"{kind}:{value}".encode()).decode().rstrip("=")


def decode_cursor(kind: str, cursor: str) -> int:
    """The value ``encode_cursor(kind, value)`` put in ``cursor``; ``InvalidRequest`` for anything else."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        prefix, _, value = text.partition(":")
        if prefix == kind and value.isdigit() and 0 < int(value) < 2**63:
            return int(value)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise InvalidRequest(f"invalid cursor {cursor[:64]!r}: pass back the {NEXT_CURSOR} of the previous page")
