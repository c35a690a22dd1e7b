"""Paging for list endpoints: ``limit`` and an opaque ``cursor``, the next one in a response header.

A listing stays a JSON list (callers that read one page keep working); when
more records follow, the response carries ``X-Next-Cursor``, which the caller
passes back as ``cursor`` with the same filters to get the next page.  A
cursor names the last record a page showed, so pages neither repeat nor skip
records while new ones arrive.  It is opaque: its form may change.

Every listing that grows with history pages this way, newest first: ``/v1/audit`` by the
trail's sequence number (``api/audit.py``), ``/v1/jobs``, ``/v1/claims`` and ``/v1/snapshots``
by id (``newest_first``), ``/v1/tokens`` by (created, token id), so no answer grows with history.
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import Callable, Reversible, TypeVar

from xce.errors import InvalidRequest

NEXT_CURSOR = "X-Next-Cursor"

T = TypeVar("T")

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


def encode_key_cursor(kind: str, time: float, key: str) -> str:
    """A cursor on a (time, key) order, for lists whose records have no growing id (tokens)."""
    return base64.urlsafe_b64encode(f"{kind}:{time!r}:{key}".encode()).decode().rstrip("=")


def decode_key_cursor(kind: str, cursor: str) -> tuple[float, str]:
    """The (time, key) ``encode_key_cursor(kind, ...)`` put in ``cursor``; ``InvalidRequest`` for anything else."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        prefix, _, rest = text.partition(":")
        time_text, _, key = rest.partition(":")
        value = float(time_text)
        if prefix == kind and key and math.isfinite(value):
            return value, key
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise InvalidRequest(f"invalid cursor {cursor[:64]!r}: pass back the {NEXT_CURSOR} of the previous page")


#: list endpoints over the model (jobs, claims, snapshots): the default and the largest page
LIST_LIMIT = 1000
MAX_LIST_LIMIT = 10_000


def limit_query(what: str):
    from fastapi import Query

    return Query(LIST_LIMIT, ge=1, le=MAX_LIST_LIMIT,
                 description=f"at most this many {what} (one page): the newest that match, by id")


def cursor_query(max_length: int = 64):
    from fastapi import Query

    return Query(None, max_length=max_length, description=f"the {NEXT_CURSOR} of the previous page")


def newest_first(records: Reversible[T], id_of: Callable[[T], int], match: Callable[[T], bool], limit: int,
                 cursor: str | None, kind: str) -> tuple[list[T], dict[str, str] | None]:
    """One page of ``records`` (in ascending id order, as the model keeps them): the newest ``limit``
    that ``match`` below the cursor's id, in id order, and the headers naming the next page.

    New records get higher ids than every existing one, so pages that follow a cursor never show
    one twice or skip one while records arrive: they appear in front of the first page."""
    before = decode_cursor(kind, cursor) if cursor is not None else None
    out: list[T] = []
    more = False
    for r in reversed(records):
        if before is not None and id_of(r) >= before:
            continue
        if not match(r):
            continue
        if len(out) == limit:
            more = True
            break
        out.append(r)
    headers = {NEXT_CURSOR: encode_cursor(kind, id_of(out[-1]))} if more else None
    out.reverse()
    return out, headers
