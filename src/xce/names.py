"""Validation of names shared by every entity.  Pure; raises ``InvalidRequest``."""

from __future__ import annotations

import re

from xce.errors import InvalidRequest
from xce.wire import NAME_PATTERN  # the API checks names with it too
_NAME = re.compile(NAME_PATTERN)


def check_name(kind: str, value: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise InvalidRequest(
            f"invalid {kind} name {value!r}: must match [a-z0-9][a-z0-9-_.]{{0,62}}"
        )
    return value

