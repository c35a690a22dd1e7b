"""``bhist`` and ``bacct``: a job's events and what it used, finished or not, from the archive too.

``bhist -l`` prints each state change of a job with its time and reason (XCE keeps them in the job's
``history``); ``bhist`` a line per job of the seconds it spent in each state.  ``bacct -l`` prints a
finished job's accounting (CPU time, wait, turnaround, memory); ``bacct`` their sum.  Jobs are named
by id, else the user's (``-u USER|all``): unfinished ones, and with ``-a`` (``bacct``: always) the
newest finished ones.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from xce.lsf import jobfields
from xce.lsf._base import EXIT_FAILED, LsfParser, add_ids, client, find_jobs, not_found, run

Job = dict[str, Any]
NEWEST = 100  # finished jobs a listing reads (each one's events are a request)
STATES = ("PEND", "PSUSP", "RUN", "USUSP", "SSUSP", "UNKWN")


def _parser(prog: str) -> LsfParser:
    p = LsfParser(prog=prog)
    p.add_argument("-l", dest="long", action="store_true", help="long format")
    p.add_argument("-a", dest="all", action="store_true", help="finished jobs too")
    p.add_argument("-u", dest="user", help="this user's jobs, or all")
    p.add_argument("-d", dest="done", action="store_true", help="finished jobs only")
    add_ids(p)
    return p


def select(prog: str, args: Any, finished: bool) -> tuple[list[Job], list[str]]:
    """The jobs named, or listed; and the ids that named none."""
    c = client()
    if args.ids:
        found, missing = [], []
        for text in args.ids:
            jobs = find_jobs(c, text)
            found += jobs
            if not jobs:
                missing.append(text)
        return found, missing
    everyone = args.user == "all"
    who = [("all", True if everyone else None), ("user", None if everyone else args.user)]
    jobs = [] if args.done else [j for j in c.get("/v1/jobs", [*who, ("limit", 10_000)])
                                 if j["state"] not in ("DONE", "EXIT")]
    if finished or args.done:
        jobs += [c.get(f"/v1/jobs/{h['id']}") for h in c.get("/v1/history/jobs", [*who, ("limit", NEWEST)])]
    return sorted({j["id"]: j for j in jobs}.values(), key=lambda j: j["id"]), []


def spent(j: Job) -> dict[str, float]:
    """Seconds in each state, from the job's events (its current state up to now, or its end)."""
    out = dict.fromkeys(STATES, 0.0)
    events = [("PEND", j["submit_time"]), *((e["state"], e["time"]) for e in j.get("history") or ())]
    end = j.get("end_time") or time.time()
    for (state, since), (_, until) in zip(events, [*events[1:], ("", end)]):
        state = jobfields.LSF_STATE.get(state, state)
        if state in out:
            out[state] += max(0.0, until - since)
    return out


def events(j: Job) -> str:
    """``bhist -l``: the job's head, each event, and the time it spent in each state."""
    lines = [f"Job <{j['display_id']}>, Job Name <{j['name']}>, User <{j['user']}>, Project <{j['project']}>, "
             f"Command <{jobfields.command_words(j)}>",
             f"{jobfields.long_when(j['submit_time'])}: Submitted from host <->, to Queue <{j['queue']}>"
             + (f", CWD <{j['cwd']}>" if j.get("cwd") else "") + ";"]
    for e in j.get("history") or ():
        state = jobfields.LSF_STATE.get(e["state"], e["state"])
        lines.append(f"{jobfields.long_when(e['time'])}: {_event_words(state, e, j)};")
    times = spent(j)
    total = sum(times.values())
    lines += ["", "Summary of time in seconds spent in various states:",
              "  " + "  ".join(f"{s:<6}" for s in (*STATES, "TOTAL")),
              "  " + "  ".join(f"{int(v):<6}" for v in (*times.values(), total))]
    return "\n".join(lines)


def _event_words(state: str, e: dict[str, Any], j: Job) -> str:
    reason = e.get("reason") or ""
    if state == "RUN" and reason.startswith("started"):
        return f"Dispatched to {''.join(f'<{h}>' for h in j.get('hosts') or ())}; Starting ({reason})"
    if state == "DONE":
        return "Done successfully"
    if state == "EXIT":
        return f"Exited with exit code {jobfields.exit_code(j) or '-'} ({reason})"
    return f"{state}: {reason}" if reason else state


def bhist(argv: list[str]) -> int:
    args = _parser("bhist").parse_args(argv)
    jobs, missing = select("bhist", args, finished=args.all)
    for text in missing:
        print(f"bhist: {not_found(text)}", file=sys.stderr)
    if args.long:
        print(("\n" + "-" * 78 + "\n\n").join(events(j) for j in jobs))
    elif jobs:
        print("Summary of time in seconds spent in various states:")
        print(f"{'JOBID':<7} {'USER':<7} {'JOB_NAME':<10} " + " ".join(f"{s:<6}" for s in (*STATES, "TOTAL")))
        for j in jobs:
            times = spent(j)
            print(f"{j['display_id']:<7} {j['user']:<7} {j['name'][:10]:<10} "
                  + " ".join(f"{int(v):<6}" for v in (*times.values(), sum(times.values()))))
    elif not missing:
        print("No matching job found", file=sys.stderr)
    return EXIT_FAILED if missing else 0


def accounting(j: Job) -> str:
    """``bacct -l``: a finished job's events and its accounting line."""
    u = j.get("usage") or {}
    cpu = (u.get("cpu_user_s") or 0) + (u.get("cpu_sys_s") or 0)
    start, end = j.get("start_time"), j.get("end_time")
    wait = (start or end or time.time()) - j["submit_time"]
    turnaround = (end or time.time()) - j["submit_time"]
    run_s = (end - start) if start and end else 0.0
    mem = u.get("max_rss_bytes")
    lines = [f"Job <{j['display_id']}>, User <{j['user']}>, Project <{j['project']}>, Status <{jobfields.stat(j)}>, "
             f"Queue <{j['queue']}>, Command <{jobfields.command_words(j)}>",
             f"{jobfields.long_when(j['submit_time'])}: Submitted from host <->, CWD <{j.get('cwd') or '-'}>;"]
    if start:
        lines.append(f"{jobfields.long_when(start)}: Dispatched to {''.join(f'<{h}>' for h in j.get('hosts') or ())};")
    if end:
        lines.append(f"{jobfields.long_when(end)}: Completed <{j['state'].lower()}>"
                     + (f"; exit code <{jobfields.exit_code(j)}>" if j["state"] == "EXIT" else "") + ".")
    lines += ["", "Accounting information about this job:",
              f"     {'CPU_T':>8} {'WAIT':>8} {'TURNAROUND':>10} {'STATUS':>8} {'HOG_FACTOR':>10} {'MEM':>8}",
              f"     {cpu:>8.2f} {wait:>8.0f} {turnaround:>10.0f} {j['state'].lower():>8} "
              f"{(cpu / run_s if run_s else 0):>10.4f} {(f'{mem / 2**20:.0f}M' if mem is not None else '-'):>8}"]
    return "\n".join(lines)


def bacct(argv: list[str]) -> int:
    args = _parser("bacct").parse_args(argv)
    args.done = True
    jobs, missing = select("bacct", args, finished=True)
    jobs = [j for j in jobs if j["state"] in ("DONE", "EXIT")]
    for text in missing:
        print(f"bacct: {not_found(text)}", file=sys.stderr)
    if args.long:
        print(("\n" + "-" * 78 + "\n\n").join(accounting(j) for j in jobs))
    else:
        cpu = sum((j.get("usage") or {}).get("cpu_user_s") or 0 for j in jobs)
        print("Accounting information about jobs that are:",
              f"  - submitted by {args.user or 'you'},", "  - completed normally or exited,", "",
              "SUMMARY:      ( time unit: second )",
              f" Total number of done jobs: {sum(j['state'] == 'DONE' for j in jobs):>6}"
              f"      Total number of exited jobs: {sum(j['state'] == 'EXIT' for j in jobs):>6}",
              f" Total CPU time consumed: {cpu:>8.1f}", sep="\n")
    return EXIT_FAILED if missing else 0


def bhist_main(argv: list[str] | None = None) -> int:
    return run("bhist", lambda: bhist(sys.argv[1:] if argv is None else argv))


def bacct_main(argv: list[str] | None = None) -> int:
    return run("bacct", lambda: bacct(sys.argv[1:] if argv is None else argv))
