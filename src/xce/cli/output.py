"""How the CLI prints: aligned tables for people, JSON for programs, times and sizes in words."""

from __future__ import annotations

import json
import re
import sys
import time
from typing import Any, Iterable, Sequence

from xce.cli.errors import UsageError
from xce.units import format_size as size  # noqa: F401  (re-exported for commands)


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    """Left-aligned columns separated by two spaces; ``None`` prints as ``-``."""
    cells = [[str(h) for h in headers]]
    for row in rows:
        cells.append(["-" if v is None or v == "" else str(v) for v in row])
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in cells]
    return "\n".join(lines)


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> None:
    print(table(headers, rows))


def fields(pairs: Iterable[tuple[str, Any]]) -> str:
    """``key: value`` lines with the values aligned."""
    pairs = [(k, "-" if v is None or v == "" else str(v)) for k, v in pairs]
    width = max((len(k) for k, _ in pairs), default=0) + 1
    return "\n".join(f"{(k + ':').ljust(width)} {v}" for k, v in pairs)


def when(ts: float | None) -> str | None:
    """A timestamp as local ``Dec 02 18:33:45`` (what bjobs prints)."""
    if ts is None:
        return None
    return time.strftime("%b %d %H:%M:%S", time.localtime(ts))  # (not datetime: ~1 ms of every start-up)


def ago(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    if seconds < 60:
        return f"{seconds:.0f}s ago"
    if seconds < 3600:
        return f"{seconds / 60:.0f}m ago"
    return f"{seconds / 3600:.1f}h ago"


def amount(value: float) -> str:
    return f"{value:g}" if value < 1e6 else size(value)


_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhdw])$")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_until(text: str, now: float | None = None) -> float:
    """``--expires``: a duration ahead of now (``90s``, ``12h``, ``30d``, ``4w``), an ISO time, or epoch seconds."""
    now = time.time() if now is None else now
    m = _DURATION.match(text.strip())
    if m:
        return now + float(m.group(1)) * _SECONDS[m.group(2)]
    return parse_since(text, now)


def parse_since(text: str, now: float | None = None) -> float:
    """``--since``: a duration back from now (``90s``, ``30m``, ``2h``, ``7d``), an ISO time, or epoch seconds."""
    now = time.time() if now is None else now
    t = text.strip()
    m = _DURATION.match(t)
    if m:
        return now - float(m.group(1)) * _SECONDS[m.group(2)]
    try:
        return float(t)
    except ValueError:
        pass
    from datetime import datetime

    try:
        return datetime.fromisoformat(t).timestamp()
    except ValueError:
        raise UsageError(f"invalid time {text!r}: use a duration (30m, 2h, 7d), "
                         "an ISO time (2026-12-02T10:00) or seconds since the epoch") from None
