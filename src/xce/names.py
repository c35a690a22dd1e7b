"""Validation of names shared by every entity.  Pure; raises ``InvalidRequest``."""

from __future__ import annotations

import re

from xce.errors import InvalidRequest
from xce.wire import JOB_NAME_PATTERN, NAME_PATTERN  # the API checks names with it too
_NAME = re.compile(NAME_PATTERN)
_JOB_NAME = re.compile(JOB_NAME_PATTERN)


def check_name(kind: str, value: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise InvalidRequest(
            f"invalid {kind} name {value!r}: must match [a-z0-9][a-z0-9-_.]{{0,62}}"
        )
    return value


def check_job_name(value: str) -> str:
    """A job's name: freer than other names, as LSF's (``JOB_NAME_PATTERN``)."""
    if not isinstance(value, str) or not _JOB_NAME.match(value):
        raise InvalidRequest(
            f"invalid job name {value[:100]!r}: up to 512 letters, digits and _.+=:@%,()^~#- (no blank, quote, "
            "'/', '$', '*' or '['), starting with a letter, digit or _"
        )
    return value

