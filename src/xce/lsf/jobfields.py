"""A job in LSF's words: the one place ``bjobs`` (its table, ``-o``, ``-json`` and ``-l``) says what a
field of a job is called and holds.

``FIELDS`` maps LSF's ``-o`` field names (and their aliases) to a column width and a function of the
job's document.  Values are strings; a field with nothing to say is ``""`` (``-json`` prints it so,
as LSF does) and ``-`` in tables.  XCE's states are LSF's, but for STAGE_OUT: the job's process
has ended and its files are being copied out, which LSF's pollers must read as RUN, not finished.
"""

from __future__ import annotations

import re
import time
from typing import Any, Callable, Iterable

from xce.cli.commands_jobs import _command as command_words  # (a command line, a script: as xce job show says)
from xce.lsf._base import LsfError

Job = dict[str, Any]

LSF_STATE = {"STAGE_OUT": "RUN"}  # XCE's states that LSF has no word for, as LSF's clients must read them
_PLAIN_EXIT = re.compile(r"(exit code -?\d+)?")  # an ordinary end: LSF gives no EXIT_REASON for it


def stat(j: Job) -> str:
    return LSF_STATE.get(j["state"], j["state"])


def when(ts: float | None) -> str:
    """A time as LSF's ``-o`` and ``-json`` print it: ``Dec  5 08:40``."""
    return time.strftime("%b %e %H:%M", time.localtime(ts)) if ts else ""


def long_when(ts: float | None) -> str:
    """A time as LSF's long formats print it: ``Sat Dec  5 08:40:43``."""
    return time.strftime("%a %b %e %H:%M:%S", time.localtime(ts)) if ts else ""


def _text(v: Any) -> str:
    return "" if v is None else str(v)


def _finished(j: Job) -> bool:
    return j["state"] in ("DONE", "EXIT")


def exit_code(j: Job) -> str:
    if not _finished(j):
        return ""
    if j.get("signal"):
        return str(128 + int(j["signal"]))
    return _text(j.get("exit_code"))


def exit_reason(j: Job) -> str:
    reason = j.get("exit_reason") or ""
    return "" if j["state"] != "EXIT" or _PLAIN_EXIT.fullmatch(reason) else reason


def kill_reason(j: Job) -> str:
    reason = j.get("exit_reason") or ""
    return reason if j["state"] == "EXIT" and "killed" in reason else ""


def last_reason(j: Job) -> str:
    events = j.get("history") or []
    return _text(events[-1].get("reason")) if events else ""


def suspend_reason(j: Job) -> str:
    return last_reason(j) if j["state"] in ("USUSP", "PSUSP") else ""


def pend_reason(j: Job) -> str:
    return _text(j.get("pending_reason")) if j["state"] in ("PEND", "PSUSP") else ""


def exec_host(j: Job) -> str:
    return ":".join(j.get("hosts") or ())


def run_time(j: Job) -> str:
    start, end = j.get("start_time"), j.get("end_time")
    if not start:
        return ""
    return f"{int((end or time.time()) - start)} second(s)"


def max_mem(j: Job) -> str:
    rss = (j.get("usage") or {}).get("max_rss_bytes")
    return f"{rss / 2**20:.0f} Mbytes" if rss is not None else ""


def cpu_used(j: Job) -> str:
    u = j.get("usage") or {}
    if u.get("cpu_user_s") is None:
        return ""
    return f"{(u.get('cpu_user_s') or 0) + (u.get('cpu_sys_s') or 0):.1f} second(s)"


def _key(name: str) -> Callable[[Job], str]:
    return lambda j: _text(j.get(name))


Getter = Callable[[Job], str]

# name -> (width in tables, the value); aliases share an entry
FIELDS: dict[str, tuple[int, Getter]] = {
    "jobid": (7, lambda j: str(j["display_id"])),
    "stat": (5, stat),
    "user": (7, _key("user")),
    "queue": (10, _key("queue")),
    "job_name": (10, _key("name")),
    "proj_name": (11, _key("project")),
    "from_host": (11, lambda j: ""),
    "exec_host": (11, exec_host),
    "nexec_host": (10, lambda j: str(len(j.get("hosts") or ())) if j.get("hosts") else ""),
    "slots": (5, _key("slots")),
    "exit_code": (9, exit_code),
    "exit_reason": (50, exit_reason),
    "kill_reason": (50, kill_reason),
    "suspend_reason": (50, suspend_reason),
    "pend_reason": (50, pend_reason),
    "submit_time": (15, lambda j: when(j.get("submit_time"))),
    "start_time": (15, lambda j: when(j.get("start_time"))),
    "finish_time": (16, lambda j: when(j.get("end_time"))),
    "command": (15, lambda j: command_words(j)),
    "cwd": (15, _key("cwd")),
    "output_file": (15, _key("stdout")),
    "error_file": (15, _key("stderr")),
    "run_time": (15, run_time),
    "max_mem": (15, max_mem),
    "cpu_used": (10, cpu_used),
    "combined_resreq": (20, _key("resreq")),
}
ALIASES = {"id": "jobid", "name": "job_name", "project": "proj_name", "cmd": "command", "nalloc_slot": "slots",
           "nreq_slot": "slots", "effective_resreq": "combined_resreq", "exit_status": "exit_code"}
DEFAULT = ("jobid", "user", "stat", "queue", "from_host", "exec_host", "job_name", "submit_time")


def field_name(word: str) -> str:
    """An ``-o`` word (``JOBID``, ``stat:5``, ``job_name:-20``) as a field's name; unknown is refused."""
    name = word.split(":", 1)[0].lower()
    name = ALIASES.get(name, name)
    if name not in FIELDS:
        raise LsfError(f"{word}: unknown field for -o (known: {' '.join(sorted(FIELDS))})")
    return name


def parse_format(text: str) -> tuple[list[str], str | None]:
    """``-o "jobid stat delimiter=','"``: the fields and the delimiter (None: aligned columns)."""
    delimiter = None
    m = re.search(r"\bdelimiter\s*=\s*(['\"])(.*?)\1", text)
    if m:
        delimiter = m.group(2)
        text = text[:m.start()] + text[m.end():]
    names = [field_name(w) for w in text.split()]
    if not names:
        raise LsfError("-o names no field")
    return names, delimiter


def row(j: Job, names: Iterable[str]) -> list[str]:
    return [FIELDS[n][1](j) for n in names]


def header(names: Iterable[str]) -> list[str]:
    return [n.upper() for n in names]


def table(jobs: list[Job], names: list[str], delimiter: str | None, with_header: bool) -> str:
    """Rows as LSF's ``bjobs`` prints them: aligned columns (each at least its field's width, an
    empty value as ``-``), or joined by ``delimiter``."""
    rows = ([header(names)] if with_header else []) + [row(j, names) for j in jobs]
    if delimiter is not None:
        return "\n".join(delimiter.join(cells) for cells in rows)
    widths = [FIELDS[n][0] for n in names]
    lines = []
    for cells in rows:
        lines.append(" ".join((c or "-").ljust(w) for c, w in zip(cells, widths)).rstrip())
    return "\n".join(lines)


def record(j: Job, names: Iterable[str]) -> dict[str, str]:
    """One ``-json`` record: upper-case names, string values, ``""`` when there is nothing to say."""
    return dict(zip(header(names), row(j, names)))


def long(j: Job) -> str:
    """``bjobs -l``: LSF's long format, the parts of it XCE has."""
    lines = [f"Job <{j['display_id']}>, Job Name <{j['name']}>, User <{j['user']}>, Project <{j['project']}>, "
             f"Status <{stat(j)}>, Queue <{j['queue']}>, Command <{command_words(j)}>"]
    head = f"{long_when(j.get('submit_time'))}: Submitted from host <{j.get('from_host') or '-'}>"
    if j.get("cwd"):
        head += f", CWD <{j['cwd']}>"
    if j.get("stdout"):
        head += f", Output File <{j['stdout']}>"
    if j.get("stderr"):
        head += f", Error File <{j['stderr']}>"
    lines.append(head + f", {j['slots']} Task(s)" + (f", Requested Resources <{j['resreq']}>" if j.get("resreq")
                                                       else "") + ";")
    if j.get("start_time"):
        lines.append(f"{long_when(j['start_time'])}: Started {j['slots']} Task(s) on Host(s) "
                     f"{''.join(f'<{h}>' for h in j.get('hosts') or ())};")
    if j["state"] in ("PEND", "PSUSP") and j.get("pending_reason"):
        lines += ["", " PENDING REASONS:", f" {j['pending_reason']};"]
    if j.get("dependency"):
        lines += ["", f" Dependency Condition: {j['dependency']}"]
    if j.get("run_limit"):
        lines += ["", " RUNLIMIT", f" {j['run_limit'] / 60:.1f} min"]
    if _finished(j):
        end = long_when(j.get("end_time"))
        lines.append(f"{end}: Done successfully." if j["state"] == "DONE" else
                     f"{end}: Exited with exit code {exit_code(j)}." + (f" {j['exit_reason']}." if exit_reason(j)
                                                                         else ""))
    usage = [u for u in (cpu_used(j) and f"CPU time used is {cpu_used(j)}", max_mem(j) and f"MAX MEM: {max_mem(j)}")
             if u]
    if usage:
        lines += ["", " " + "; ".join(usage) + ";"]
    return "\n".join(lines)
