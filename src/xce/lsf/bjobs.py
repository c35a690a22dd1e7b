"""``bjobs``: jobs as LSF lists them, for people and for the tools that poll them.

Without ids: the user's unfinished jobs (``-a``: and those finished within ``CLEAN_PERIOD``, live
or archived), ``-u USER|all``, ``-q``, ``-J``/``-aJ`` with ``*`` wildcards.  With ids: those jobs in
any state, from the archive too, so a poller never sees a finished job vanish; an unknown id is
``Job <N> is not found`` (exit 255, or an ``ERROR`` record with ``-json``).  Formats are
``xce.lsf.jobfields``'.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import sys
import time
from typing import Any

from xce.lsf import jobfields
from xce.lsf._base import EXIT_FAILED, LsfParser, add_ids, client, find_jobs, not_found, run
from xce.lsfsite import CLEAN_PERIOD

PROG = "bjobs"
LIMIT = 10_000


@functools.lru_cache(maxsize=1)
def parser() -> LsfParser:
    """Built once a process: a poller runs bjobs in a loop."""
    p = LsfParser(prog=PROG, description="list jobs (LSF's bjobs)")
    p.add_argument("-a", dest="all", action="store_true", help="also jobs finished recently")
    p.add_argument("-d", dest="done", action="store_true", help="only jobs finished recently")
    p.add_argument("-p", dest="pending", action="store_true", help="only pending jobs")
    p.add_argument("-r", dest="running", action="store_true", help="only running jobs")
    p.add_argument("-s", dest="suspended", action="store_true", help="only suspended jobs")
    p.add_argument("-u", dest="user", help="this user's jobs, or all")
    p.add_argument("-q", dest="queue")
    p.add_argument("-J", dest="name", help="jobs of this name (* matches anything)")
    p.add_argument("-aJ", dest="all_name", help="-a -J NAME")
    p.add_argument("-noheader", action="store_true")
    p.add_argument("-o", dest="format", help="\"field[:width] ... [delimiter='x']\"")
    p.add_argument("-json", action="store_true", help="JSON, as LSF's: {COMMAND, JOBS, RECORDS}")
    p.add_argument("-l", dest="long", action="store_true", help="long format")
    p.add_argument("-w", dest="wide", action="store_true", help="wide (no truncation: XCE never truncates)")
    add_ids(p)
    return p


def listing(c: Any, args: Any) -> list[dict[str, Any]]:
    """The jobs a listing without ids selects, oldest first."""
    everyone = args.user == "all"
    params: list[tuple[str, Any]] = [("all", True if everyone else None),
                                     ("user", None if everyone else args.user), ("queue", args.queue),
                                     ("limit", LIMIT)]
    live = c.get("/v1/jobs", params)
    jobs = [] if args.done else [j for j in live if j["state"] not in ("DONE", "EXIT")]
    if args.all or args.done:
        since = time.time() - CLEAN_PERIOD
        ended = {j["id"]: j for j in live if j["state"] in ("DONE", "EXIT") and (j["end_time"] or 0) >= since}
        finished = c.get_all("/v1/history/jobs", [("all", True if everyone else None),
                                                  ("user", None if everyone else args.user),
                                                  ("since", since)], limit=LIMIT)
        if args.queue:
            finished = [h for h in finished if h.get("queue") == args.queue]
        # the whole document of each (-o may ask any field): archived ones one by one
        jobs += [ended.get(h["id"]) or c.get(f"/v1/jobs/{h['id']}") for h in finished]
    wanted = {s for flag, states in ((args.pending, ("PEND", "PSUSP")), (args.running, ("RUN", "STAGE_OUT")),
                                     (args.suspended, ("USUSP", "PSUSP"))) if flag for s in states}
    if wanted:
        jobs = [j for j in jobs if j["state"] in wanted]
    if args.name:
        jobs = [j for j in jobs if fnmatch.fnmatchcase(j["name"], args.name)]
    return sorted({j["id"]: j for j in jobs}.values(), key=lambda j: j["id"])


def bjobs(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    if args.all_name:
        args.all, args.name = True, args.all_name
    names, delimiter = jobfields.parse_format(args.format) if args.format else (list(jobfields.DEFAULT), None)
    c = client()
    missing: list[str] = []
    if args.ids:
        jobs = []
        for text in args.ids:
            found = find_jobs(c, text)
            jobs += found
            if not found:
                missing.append(text)
    else:
        jobs = listing(c, args)
    if args.json:
        records: list[dict[str, str]] = [jobfields.record(j, names) for j in jobs]
        records += [{"JOBID": text, "ERROR": not_found(text)} for text in missing]
        print(json.dumps({"COMMAND": PROG, "JOBS": len(records), "RECORDS": records}, indent=2))
        return 0
    for text in missing:
        print(not_found(text), file=sys.stderr)
    if jobs:
        if args.long:
            print(("\n" + "-" * 78 + "\n\n").join(jobfields.long(j) for j in jobs))
        else:
            print(jobfields.table(jobs, names, delimiter, not args.noheader))
    elif not missing:
        print("No job found" if args.all or args.done else "No unfinished job found", file=sys.stderr)
    return EXIT_FAILED if missing else 0


def main(argv: list[str] | None = None) -> int:
    return run(PROG, lambda: bjobs(sys.argv[1:] if argv is None else argv))
