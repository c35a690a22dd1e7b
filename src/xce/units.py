"""Sizes and amounts: parsing what people type (``500Mi``, ``10Gi``, ``2T``) and printing it back
(``format_size``, the one way XCE writes a byte count).

A module of its own with no XCE imports but the error type, so the CLI, the worker and the
resource requirement parser can use it without loading the model or the scheduler.
"""

from __future__ import annotations

import re
import signal as _signal
from typing import overload

from xce.errors import InvalidRequest

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtpKMGTP][iI]?)?[bB]?\s*$")
_SIZE_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "p": 10**15,
               "ki": 2**10, "mi": 2**20, "gi": 2**30, "ti": 2**40, "pi": 2**50}
MAX_SIZE = 2**63 - 1
_AMOUNT = re.compile(r"(\d+(?:\.\d+)?)([kmgtpKMGTP][iI]?)?")


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
        # (imported here: decimal costs every CLI start ~1 ms, and the CLI only formats sizes)
        from decimal import Decimal

        n = int(Decimal(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()])
    if n > MAX_SIZE:
        raise InvalidRequest(f"invalid {what} {value!r}: too large (at most {MAX_SIZE} bytes, "
                             "just under 8192Pi)")
    if n <= 0:
        raise InvalidRequest(f"invalid {what} {value!r}: must be more than 0 bytes")
    return n


def parse_amount(text: str) -> float | None:
    """A counter amount (``8``, ``500M``, ``100Gi``, ``1.5T``) as a float, or None if it is not one.

    Same units as sizes, but no error and no bounds: ``-R rusage[...]`` and ``xce worker --counter``
    report a malformed amount in their own words, and counters may be fractional or zero.
    """
    m = _AMOUNT.fullmatch(text)
    if not m:
        return None
    return float(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()]


# LSF's units (lsf.conf LSF_UNIT_FOR_LIMITS, bsub -M, rusage[mem=]): powers of 1024, as LSF counts memory
LSF_UNITS = {"KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40, "PB": 2**50, "EB": 2**60}
_LSF_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtpeKMGTPE][bB]?)?\s*$")


def parse_lsf_size(value: str, unit: str = "MB", what: str = "size") -> int:
    """Bytes from a size as LSF reads one: ``100MB``, ``4G``, ``2tb`` (KB MB GB TB PB EB, the B optional,
    any case: powers of 1024), or a bare number in ``unit`` (``LSF_UNIT_FOR_LIMITS``, MB by default)."""
    scale = LSF_UNITS.get(unit.upper())
    if scale is None:
        raise InvalidRequest(f"invalid LSF_UNIT_FOR_LIMITS {unit!r}: one of {', '.join(LSF_UNITS)}")
    m = _LSF_SIZE.match(value)
    if m is None:
        raise InvalidRequest(f"invalid {what} {value!r}: a number (in {unit.upper()}) or one with KB, MB, GB or TB")
    if m.group(2):
        scale = LSF_UNITS[m.group(2)[0].upper() + "B"]
    from decimal import Decimal  # (as parse_size: exact, and only when needed)

    n = int(Decimal(m.group(1)) * scale)
    if not 0 < n <= MAX_SIZE:
        raise InvalidRequest(f"invalid {what} {value!r}: more than 0 bytes and under 8 EB")
    return n


_BINARY_UNITS = (("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


@overload
def format_size(n: float, *, iec: bool = False, decimals: int | None = None) -> str: ...
@overload
def format_size(n: None, *, iec: bool = False, decimals: int | None = None) -> None: ...


def format_size(n: float | None, *, iec: bool = False, decimals: int | None = None) -> str | None:
    """Bytes in binary units, four significant digits: ``10Gi``, ``512Mi``, ``1.5Ti``, ``512B``, as
    people type a size (``parse_size`` reads it back).  None stays None (a table's empty cell).

    ``iec``: with the IEC symbols, for a message: ``64 MiB``, ``1.5 GiB``, ``512 B``.  ``decimals``:
    that many digits after the point instead, for a reading watched as it changes (``1.2 GiB of 4.0
    GiB, 310 MiB/s``: the width stays); bytes are whole."""
    if n is None:
        return None
    for unit, scale in _BINARY_UNITS:
        if n >= scale:
            number = f"{n / scale:.4g}" if decimals is None else f"{n / scale:.{decimals}f}"
            return f"{number} {unit}B" if iec else number + unit
    # under 1Ki too the unit is written (``3B``): a bare ``3`` beside ``1Gi`` in a column reads as 3 of anything
    if decimals is not None:
        return f"{int(n)} B" if iec else f"{int(n)}B"
    return f"{n:g} B" if iec else f"{n:g}B"


_RUN_LIMIT = re.compile(r"^(?:(\d{1,6}):)?(\d{1,7})$")
MAX_RUN_LIMIT = 365 * 86400.0


def format_transfer(done: int, total: int | None, rate: float | None) -> str:
    """A transfer's progress in words: ``1.2 GiB of 4.0 GiB, 310 MiB/s`` (total and rate when known)."""
    text = format_size(done, iec=True, decimals=1)
    if total:
        text += f" of {format_size(total, iec=True, decimals=1)}"
    return text + (f", {format_size(rate, iec=True, decimals=0)}/s" if rate else "")


def parse_run_limit(text: str | int | float, what: str = "run limit") -> float:
    """LSF's ``[HH:]MM`` (``-W 90``, ``-W 1:30``; a number: minutes) -> seconds, at least a minute."""
    if isinstance(text, bool):
        raise ValueError(f"invalid {what} {text!r}")
    m = _RUN_LIMIT.match(str(text).strip()) if not isinstance(text, float) else None
    if m is None:
        raise ValueError(f"invalid {what} {text!r}: expected [HH:]MM, minutes (90) or hours and minutes (1:30)")
    seconds = (int(m.group(1) or 0) * 60 + int(m.group(2))) * 60.0
    if not 60 <= seconds <= MAX_RUN_LIMIT:
        raise ValueError(f"invalid {what} {text!r}: between 1 minute and 365 days")
    return seconds


def format_run_limit(seconds: float) -> str:
    """``3600`` -> ``1:00``, as LSF writes a run limit (hours and minutes)."""
    minutes = int(round(seconds / 60))
    return f"{minutes // 60}:{minutes % 60:02d}"


def parse_begin_time(text: str, now: float) -> float:
    """LSF's ``-b [[[YYYY:]MM:]DD:]hh:mm`` -> seconds since the epoch, in this machine's local time, the
    next such moment after ``now``: a time of day that has passed today is tomorrow's, a day of the
    month that has passed is next month's, a date that has passed is next year's (as LSF reads it).
    ValueError if it names no moment, or a moment in the past (a year given)."""
    import datetime

    words = text.strip().split(":")
    if not 2 <= len(words) <= 5 or not all(w.isdigit() for w in words):
        raise ValueError(f"invalid begin time (-b) {text!r}: expected [[[YYYY:]MM:]DD:]hh:mm")
    numbers = [int(w) for w in words]
    hour, minute = numbers[-2:]
    year, month, day = ([None] * (5 - len(words)) + numbers)[:3]
    start = datetime.datetime.fromtimestamp(now)
    for _ in range(4 * 12 * 31):  # the next moment that matches: at most some years of days ahead
        try:
            at = start.replace(year=year or start.year, month=month or start.month, day=day or start.day,
                               hour=hour, minute=minute, second=0, microsecond=0)
        except ValueError as e:  # hour 25, month 13, February 30th (this year, or ever)
            if hour > 23 or minute > 59 or (month or 1) > 12 or (day or 1) > 31 or year is not None:
                raise ValueError(f"invalid begin time (-b) {text!r}: {e}") from None
            at = None
        if at is not None and at.timestamp() > now:
            return at.timestamp()
        if year is not None:
            raise ValueError(f"invalid begin time (-b) {text!r}: it has passed")
        # roll the unit the user left out: the day, else the month, else the year
        if day is None:
            start = (start.replace(hour=0, minute=0) + datetime.timedelta(days=1))
        elif month is None:
            start = (start.replace(day=1) + datetime.timedelta(days=32)).replace(day=1)
        else:
            start = start.replace(year=start.year + 1, month=1, day=1)
    raise ValueError(f"invalid begin time (-b) {text!r}: no such date")


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?$")
_DURATION_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(value: str | int | float, what: str = "duration") -> float:
    """``90``, ``90s``, ``5m``, ``12h``, ``7d``, ``4w`` (or a number of seconds) -> seconds (>= 0)."""
    if isinstance(value, bool):
        raise ValueError(f"invalid {what} {value!r}")
    if isinstance(value, (int, float)):
        if value < 0 or value != value:
            raise ValueError(f"invalid {what} {value!r}: must be >= 0")
        return float(value)
    m = _DURATION.match(value.strip())
    if m is None:
        raise ValueError(f"invalid {what} {value!r}: use seconds or a number with s, m, h, d or w (5m, 12h, 7d)")
    return float(m.group(1)) * _DURATION_SECONDS[m.group(2) or "s"]


def parse_mem_limit(text: str | None) -> int | None:
    """``-M SIZE`` (``100Mi``, ``2G``, bytes) in bytes; None: no limit asked.  (Here, not in the model:
    the job-spec parser checks -M with it before anything is sent.)"""
    if text is None:
        return None
    amount = parse_amount(text.strip())
    if amount is None or amount != int(amount):
        raise InvalidRequest(f"invalid memory limit {text[:40]!r}: expected a size such as 512Mi or 4G")
    return int(amount)


def parse_signal(text: str) -> int:
    """``USR1``, ``SIGUSR1``, ``sigusr1`` or ``10`` as a signal number (Linux's, where jobs run)."""
    name = text.strip().upper()
    if name.isdigit() and 1 <= int(name) <= 64:
        return int(name)
    name = name if name.startswith("SIG") else f"SIG{name}"
    number = getattr(_signal.Signals, name, None) if name.isidentifier() else None
    if number is None:
        raise InvalidRequest(f"unknown signal {text[:32]!r}: a name such as USR1, SIGTERM, or a number 1-64")
    return int(number)
