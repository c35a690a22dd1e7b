"""``bkill``, ``bstop``, ``bresume``, ``brequeue`` and ``bmod``: acting on jobs, with LSF's words.

Job ids are ``N``, ``N[I]``, or ``0``: every unfinished job of yours.  Each prints ``Job <N> is being
terminated`` (stopped, resumed, requeued) per job, or says why not on
stderr (``No matching job found``, ``Job has already finished``: the words pollers look for), and
exits 255 if any job was refused.  ``bstop`` holds a pending job and suspends a running one, and
``bresume`` undoes either, as LSF's do.  ``bmod`` changes a pending job with bsub's spellings of what
``xce mod`` changes (``-q -n -R -J -W -w -sp``, ``-Wn -wn``; ``-J "%N"`` an array's limit) and says
``Parameters of job <N> are being changed``.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Callable

from xce import jobspec
from xce.client import ApiError, Client
from xce.lsf._base import EXIT_FAILED, LsfError, LsfParser, add_ids, client, find_jobs, not_found, run
from xce.lsfsite import unit_for_limits
from xce.lsf.jobfields import stat

# what each command does to a job in a state: the controller's action, or None (not in that state)
Choose = Callable[[dict[str, Any]], str | None]
_ACTIONS: dict[str, tuple[Choose, str]] = {
    "bkill": (lambda j: "kill", "is being terminated"),
    "bstop": (lambda j: {"PEND": "hold", "RUN": "stop"}.get(j["state"]), "is being stopped"),
    "bresume": (lambda j: {"PSUSP": "release", "USUSP": "resume"}.get(j["state"]), "is being resumed"),
    "brequeue": (lambda j: "requeue", "is being requeued"),
}


def _refusal(job: dict[str, Any], e: ApiError) -> str:
    if job["state"] in ("DONE", "EXIT"):
        return "Job has already finished"
    return e.message


def act(prog: str, argv: list[str]) -> int:
    p = LsfParser(prog=prog)
    if prog == "bkill":
        p.add_argument("-s", dest="signal", help="send this signal only (USR1, TERM, 10)")
    add_ids(p)
    args = p.parse_args(argv)
    if not args.ids:
        raise LsfError("give job ids")
    choose, done = _ACTIONS[prog]
    c = client()
    refused = 0
    for text in args.ids:
        jobs = _unfinished(c) if text == "0" else find_jobs(c, text)
        if not jobs:
            print(f"Job <{text}>: No matching job found" if text != "0" else "No unfinished job found", file=sys.stderr)
            refused += 1
            continue
        for job in jobs:
            refused += not _one(c, prog, job, choose, done, getattr(args, "signal", None))
    return EXIT_FAILED if refused else 0


def _unfinished(c: Client) -> list[dict[str, Any]]:
    """Job id 0: every unfinished job of the caller's, as LSF's ``bkill 0``."""
    return [j for j in c.get("/v1/jobs", {"limit": 10_000}) if j["state"] not in ("DONE", "EXIT")]


def _one(c: Client, prog: str, job: dict[str, Any], choose: Choose, done: str, signal: str | None) -> bool:
    action = "signal" if signal else choose(job)
    if action is None or (job["state"] in ("DONE", "EXIT") and prog != "brequeue"):
        why = "Job has already finished" if job["state"] in ("DONE", "EXIT") else \
            f"Job is {stat(job)}: {prog} does nothing to it"
        print(f"Job <{job['display_id']}>: {why}", file=sys.stderr)
        return False
    try:
        c.post(f"/v1/jobs/{job['id']}/{action}", {"signal": signal} if signal else {})
    except ApiError as e:
        print(f"Job <{job['display_id']}>: {_refusal(job, e)}", file=sys.stderr)
        return False
    print(f"Job <{job['display_id']}> {done}")
    return True


def bmod(argv: list[str]) -> int:
    parser = LsfParser(prog="bmod", usage="bmod [options] job_ID | \"job_ID[index]\"")
    jobspec.add_mod_options(parser, lsf=True)
    parser.add_argument("job", metavar="job_ID", help="a job, an array (every element still pending) or an element")
    args = parser.parse_args(argv)
    body = jobspec.mod_changes(args, lsf_unit=unit_for_limits(os.environ))
    c = client()
    jobs = find_jobs(c, args.job)
    if not jobs:
        raise LsfError(not_found(args.job))
    job = jobs[0]
    whole = "[" not in args.job and job.get("array_parent") == job["id"]
    try:
        c.post(f"/v1/jobs/{job['id']}/modify", {**body, "whole_array": whole})
    except ApiError as e:
        raise LsfError(f"Job <{args.job}>: {e.message}") from None
    print(f"Parameters of job <{args.job}> are being changed")
    return 0


def _main(prog: str) -> Callable[[list[str] | None], int]:
    def main(argv: list[str] | None = None) -> int:
        return run(prog, lambda: act(prog, sys.argv[1:] if argv is None else argv))
    return main


bkill = _main("bkill")
bstop = _main("bstop")
bresume = _main("bresume")
brequeue = _main("brequeue")


def bmod_main(argv: list[str] | None = None) -> int:
    return run("bmod", lambda: bmod(sys.argv[1:] if argv is None else argv))
