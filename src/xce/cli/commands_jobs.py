"""Job commands: ``submit``, ``jobs``, ``job show|why``, ``kill`` (``-s SIGNAL``), ``requeue``, ``hold``,
``release``, ``stop``, ``resume``, and history: ``hist`` (``jobs --done``), ``usage`` and ``fairshare``.

Job ids on the command line are ``ID`` or ``ID[INDEX]`` (one element of an
array).  An array's own id (its first element's id, as LSF prints it) means
every element for ``kill``, ``requeue``, ``hold``, ``release`` and ``job show``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any, Callable

from xce import jobspec
from xce.jobspec_gpu import GpuRequest
from xce.cli.base import Parser, positive_int, signal_text
from xce.cli.errors import EXIT_OK, EXIT_REFUSED, UsageError
from xce.client import ApiError, Client
from xce.client.states import JOB_PENDING, JobState
from xce.cli.output import fields, parse_since, print_json, print_table, table, when
from xce.units import format_run_limit, format_size

# GET /v1/jobs's default and largest limit (xce.api.jobs; not imported: the CLI starts fast)
LIST_LIMIT = 1000
MAX_LIST_LIMIT = 10_000
# GET /v1/history/jobs's default (xce.api.history)
HIST_LIMIT = 100

JOB_STATES = tuple(s.value for s in JobState)  # plain words: an enum member would print as its repr in "invalid choice"
_JOB_ID = re.compile(r"^(\d+)(?:\[(\d+)\])?$")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("submit", parents=[common], help="submit a job (like bsub)",
                       usage="xce submit [options] -- CMD [ARGS...]")
    jobspec.add_options(s)  # every submission option is the job-spec parser's
    s.set_defaults(func=cmd_submit)

    j = sub.add_parser("jobs", parents=[common], help="list jobs (like bjobs)")
    j.add_argument("-a", "--all", action="store_true", help="every user's jobs (admins)")
    j.add_argument("-u", "--user", help="this user's jobs (admins)")
    j.add_argument("-q", "--queue")
    j.add_argument("--state", action="append", choices=JOB_STATES, type=str.upper,
                   help="only jobs in this state (repeatable)")
    j.add_argument("--limit", type=positive_int, default=None,
                   help=f"at most this many jobs, the newest (default {LIST_LIMIT}; at most {MAX_LIST_LIMIT} "
                        "unless --all-pages)")
    j.add_argument("--all-pages", action="store_true",
                   help="every job that matches (up to --limit if given), fetched page by page")
    j.add_argument("--done", action="store_true",
                   help="finished jobs, live or archived: xce hist (its options apply: --since, --until...)")
    _history_options(j, with_user=False)
    j.set_defaults(func=cmd_jobs)

    h = sub.add_parser("hist", parents=[common], help="finished jobs, live or archived (like bhist -a / sacct)")
    h.add_argument("-a", "--all", action="store_true", help="every user's jobs (admins)")
    h.add_argument("--state", action="append", choices=("DONE", "EXIT"), type=str.upper,
                   help="only jobs that ended so (repeatable)")
    h.add_argument("--limit", type=positive_int, default=None,
                   help=f"at most this many jobs, the newest (default {HIST_LIMIT}; at most {MAX_LIST_LIMIT} "
                        "unless --all-pages)")
    h.add_argument("--all-pages", action="store_true",
                   help="every job that matches (up to --limit if given), fetched page by page")
    _history_options(h, with_user=True)
    h.set_defaults(func=cmd_hist)

    u = sub.add_parser("usage", parents=[common], help="per-project totals: jobs, slot-hours, claim byte-hours "
                                                       "(like sreport / bacct)")
    u.add_argument("--since", help="from this time: a duration back (12h, 7d), an ISO time, or epoch seconds")
    u.add_argument("--until", help="before this time (same forms)")
    u.add_argument("-a", "--all", action="store_true", help="everyone's (admins)")
    u.add_argument("-u", "--user", help="this user's (admins)")
    u.add_argument("-P", "--project", help="only this project")
    u.add_argument("--by-user", action="store_true",
                   help="each project's total (USER *) followed by a row per user (jobs and claims they own)")
    u.set_defaults(func=cmd_usage)

    fs = sub.add_parser("fairshare", parents=[common],
                        help="fair share: each project's and user's share, decayed usage, running slots and "
                             "priority (like bhpart / sshare)")
    fs.set_defaults(func=cmd_fairshare)

    job = sub.add_parser("job", parents=[common], help="one job: show, why")
    jsub = job.add_subparsers(dest="job_command", metavar="ACTION", required=True, parser_class=Parser)
    show = jsub.add_parser("show", parents=[common], help="every field of a job")
    show.add_argument("ids", nargs="+", metavar="ID")
    show.set_defaults(func=cmd_show)
    why = jsub.add_parser("why", parents=[common], help="why a job is pending, in words")
    why.add_argument("ids", nargs="+", metavar="ID")
    why.set_defaults(func=cmd_why)

    m = sub.add_parser("mod", parents=[common], help="change a pending job (like bmod): its queue, slots, -R, "
                       "name, run limit, dependency or priority; an array's limit (-J %%N)", usage="xce mod [options] ID")
    jobspec.add_mod_options(m)
    m.add_argument("id", metavar="ID", help="a job, an array (every element still pending) or an element ID[INDEX]")
    m.set_defaults(func=cmd_mod)

    for name, path, what in (("kill", "kill", "kill jobs (like bkill): SIGINT and SIGTERM, then SIGKILL after "
                                              "the queue's terminate grace"),
                             ("requeue", "requeue", "requeue jobs (like brequeue)"),
                             ("hold", "hold", "hold pending jobs (like bstop on PEND)"),
                             ("release", "release", "release held jobs (like bresume on PSUSP)"),
                             ("stop", "stop", "suspend running jobs: their processes frozen, USUSP (like bstop)"),
                             ("resume", "resume", "resume stopped jobs (like bresume)")):
        a = sub.add_parser(name, parents=[common], help=what)
        a.add_argument("ids", nargs="+", metavar="ID")
        if name == "kill":
            a.add_argument("-s", "--signal", metavar="SIGNAL", type=signal_text,
                           help="send this one signal (USR1, SIGTERM, 10) to the running jobs' processes, once, "
                                "and nothing else (like bkill -s)")
        a.set_defaults(func=cmd_action, action=path)


def _history_options(p: argparse.ArgumentParser, with_user: bool) -> None:
    p.add_argument("--since", help="ended from this time: a duration back (30m, 2h, 7d), an ISO time, or epoch "
                                   "seconds")
    p.add_argument("--until", help="ended before this time (same forms)")
    if with_user:
        p.add_argument("-u", "--user", help="this user's jobs (admins)")
    p.add_argument("-P", "--project", help="only this project's jobs")
    p.add_argument("--name", help="only jobs of this name (an array's name without its [...])")


# ---------------------------------------------------------------- submit


def cmd_submit(args, ctx) -> int:
    """The job-spec parser makes the submission (xce.jobspec: bad usage raises JobSpecError, exit 2);
    ``Client.submit`` sends it, with the request id that makes a resend safe after a lost answer."""
    def remote_names() -> set[str]:
        try:
            return set(ctx.client().get("/v1/transfers").get("remote_names", []))
        except ApiError:
            return set()  # (a controller without transfers: paths, as before)

    submission = jobspec.submission(args, cwd=os.getcwd(), remote_names=remote_names, environ=os.environ,
                                    stdin=sys.stdin.read)
    job = ctx.client().submit(submission)
    for warning in job.get("warnings") or ():  # submitted all the same (a select[] attribute no host has)
        print(f"xce: warning: {warning}", file=sys.stderr)
    if ctx.json:
        print_json(job)
    else:
        extra = " (job array)" if job["array_parent"] is not None else ""
        print(f"Job <{job['id']}> is submitted to queue <{job['queue']}>{extra}.")
    return EXIT_OK


# ---------------------------------------------------------------- listing and showing


def _hosts(job: dict[str, Any]) -> str:
    return ",".join(job["hosts"]) if job["hosts"] else ""


def cmd_jobs(args, ctx) -> int:
    if args.done:
        if args.queue:
            raise UsageError("xce jobs --done takes no -q (history is by user, project, name and time)")
        if args.state and not set(args.state) <= {"DONE", "EXIT"}:
            raise UsageError("xce jobs --done: --state is DONE or EXIT")
        return cmd_hist(args, ctx)
    for opt in ("since", "until", "project", "name"):
        if getattr(args, opt):
            raise UsageError(f"--{opt} is for finished jobs: xce hist (or xce jobs --done)")
    params: list[tuple[str, Any]] = [("all", args.all or None), ("user", args.user), ("queue", args.queue)]
    params += [("state", s) for s in args.state or ()]
    if not ctx.json:
        params.append(("view", "brief"))  # the table's columns only: --json prints whole documents
    jobs, limit = _fetch_jobs(ctx, args, "/v1/jobs", params, LIST_LIMIT)
    return _show_jobs(ctx, args, jobs, limit, "No jobs found",
                      ("JOBID", "USER", "STAT", "QUEUE", "NAME", "SLOTS", "EXEC_HOST", "SUBMIT_TIME"),
                      lambda j: (j["display_id"], j["user"], j["state"], j["queue"], j["name"], j["slots"],
                                 _hosts(j), when(j["submit_time"])))


def _fetch_jobs(ctx, args, path: str, params: list[tuple[str, Any]],
                default_limit: int) -> tuple[list[dict], int | None]:
    """The newest ``--limit`` jobs of a listing (``default_limit`` if not given), or with ``--all-pages``
    every page; oldest first.  Also the limit asked for (None with ``--all-pages`` and no ``--limit``)."""
    if args.all:
        _only_yours(ctx)
    if args.all_pages:
        jobs = ctx.client().get_all(path, params, limit=args.limit)
        limit = args.limit
    else:
        limit = args.limit or default_limit
        if limit > MAX_LIST_LIMIT:
            raise UsageError(f"--limit is at most {MAX_LIST_LIMIT} (--all-pages for more)")
        jobs = ctx.client().get(path, params + [("limit", limit)])
    return sorted(jobs, key=lambda j: j["id"]), limit


def _only_yours(ctx) -> None:
    """``-a`` from a user who is not an admin: the controller lists their own jobs (users see only theirs),
    so say so on stderr rather than let the listing pass for everyone's."""
    me = ctx.client().get("/v1/ping")
    if me.get("role") != "admin":
        print(f"(-a: only {me.get('user')}'s jobs are shown (every user's: admins only))", file=sys.stderr)


def _task(task: dict) -> str:
    """One task of the run, as job show lists it: "2 on host2: exit code 3"."""
    if not task["ended"]:
        how = "running"
    elif task["signal"] is not None:
        how = f"killed by signal {task['signal']}"
    else:
        how = f"exit code {task['exit_code']}"
    return f"{task['task']} on {task['host']}: {how}" + (f" ({task['reason']})" if task["reason"] else "")


def _show_jobs(ctx, args, jobs: list[dict], limit: int | None, nothing: str, columns: tuple[str, ...],
               row: Callable[[dict], tuple]) -> int:
    """A fetched listing as JSON or a table, saying when ``--limit`` cut it short."""
    if ctx.json:
        print_json(jobs)
        return EXIT_OK
    if not jobs:
        print(nothing, file=sys.stderr)
        return EXIT_OK
    if not args.all_pages and len(jobs) == limit:
        print(f"(the newest {limit} jobs that match: --limit N or --all-pages for more)", file=sys.stderr)
    print_table(columns, (row(j) for j in jobs))
    return EXIT_OK


def cmd_hist(args, ctx) -> int:
    """Finished jobs, live and archived, oldest first like ``sacct`` (the newest ``--limit``)."""
    params: list[tuple[str, Any]] = [
        ("all", args.all or None), ("user", args.user), ("project", args.project), ("name", args.name),
        ("since", parse_since(args.since) if args.since else None),
        ("until", parse_since(args.until) if args.until else None)]
    params += [("state", s) for s in args.state or ()]
    jobs, limit = _fetch_jobs(ctx, args, "/v1/history/jobs", params, HIST_LIMIT)
    return _show_jobs(ctx, args, jobs, limit, "No finished jobs found",
                      ("JOBID", "USER", "PROJECT", "STAT", "NAME", "SLOTS", "EXIT", "SUBMIT_TIME", "END_TIME",
                       "RUN_TIME", "MAX_RSS", "CPU_TIME"),
                      lambda j: (j["display_id"], j["user"], j["project"], j["state"], j["name"], j["slots"],
                                 j["exit_code"] if j["signal"] is None else f"sig {j['signal']}",
                                 when(j["submit_time"]), when(j["end_time"]), _duration(j["run_s"]),
                                 format_size((j.get("usage") or {}).get("max_rss_bytes"), iec=True),
                                 _cpu(j.get("usage"))))


def _cpu(u: dict[str, Any] | None) -> str | None:
    """User + system CPU seconds of a run, as a duration."""
    if not u or u.get("cpu_user_s") is None:
        return None
    return _duration((u.get("cpu_user_s") or 0) + (u.get("cpu_sys_s") or 0))


def _duration(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    s = int(round(seconds))
    return f"{s // 86400}-{s % 86400 // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}" if s >= 86400 \
        else f"{s // 3600:02d}:{s % 3600 // 60:02d}:{s % 60:02d}"


def cmd_usage(args, ctx) -> int:
    params = {"since": parse_since(args.since) if args.since else None,
              "until": parse_since(args.until) if args.until else None,
              "all": args.all or None, "user": args.user, "project": args.project,
              "by": "user" if args.by_user else None}
    rows = ctx.client().get("/v1/usage", params)
    if ctx.json:
        print_json(rows)
        return EXIT_OK
    if not rows:
        print("No usage in that window", file=sys.stderr)
        return EXIT_OK
    columns = ("PROJECT", *(("USER",) if args.by_user else ()), "JOBS", "SLOT_HOURS", "CPU_HOURS", "GPU_HOURS",
               "CLAIMS", "CLAIM_GIB_HOURS")
    print_table(columns, ((u["project"], *((u["user"] or "*",) if args.by_user else ()), u["jobs"],
                           f"{u['slot_hours']:.2f}", f"{u['cpu_hours']:.2f}", f"{u.get('gpu_hours', 0.0):.2f}",
                           u["claims"],
                           f"{u['claim_byte_hours'] / 2**30:.2f}") for u in rows))
    return EXIT_OK


def cmd_fairshare(args, ctx) -> int:
    doc = ctx.client().get("/v1/fairshare")
    if ctx.json:
        print_json(doc)
        return EXIT_OK
    if not doc["enabled"]:
        print("Fair share is off (no [[projects]] table sets shares or user_shares): queues serve the oldest "
              "job first", file=sys.stderr)
    print_table(("PROJECT", "USER", "SHARE", "USAGE", "RUNNING", "PRIORITY"),
                ((r["project"], r["user"] or "*", f"{r['share']:.3f}", f"{r['usage']:.0f}", r["running_slots"],
                  f"{r['priority']:.6f}") for r in doc["rows"]))
    return EXIT_OK


def resolve(client: Client, text: str, *, whole_array: bool = True) -> list[dict[str, Any]]:
    """The jobs ``ID`` or ``ID[INDEX]`` names (every element for an array's id)."""
    m = _JOB_ID.match(text.strip())
    if m is None:
        raise UsageError(f"invalid job id {text!r}: expected ID or ID[INDEX]")
    job_id, index = int(m.group(1)), m.group(2)
    if index is None:
        job = client.get(f"/v1/jobs/{job_id}")
        if not whole_array or job.get("array_parent") != job["id"]:
            return [job]
    elements = client.get("/v1/jobs", {"array": job_id, "limit": MAX_LIST_LIMIT})  # >= max_array_size
    if not elements:  # an array retired into the archive (it retires whole): its elements from there
        elements = [client.get(f"/v1/jobs/{h['id']}")
                    for h in client.get_all("/v1/history/jobs", {"array": job_id}, page_size=MAX_LIST_LIMIT)]
    if index is None:
        return sorted(elements, key=lambda j: j["id"]) or [job]
    found = [j for j in elements if j["array_index"] == int(index)]
    if not found:
        raise ApiError(404, "not_found", f"job {job_id}[{index}] not found")
    return found


def _command(job: dict[str, Any]) -> str:
    """The job's command as ``job show`` prints it: a command line as given, an argument vector joined, a
    script by its first line and its arguments."""
    if job.get("script") is not None:
        first = job["script"].split("\n", 1)[0]
        return " ".join([f"script ({first})" if first.startswith("#!") else "script", *job["command"]])
    return " ".join(job["command"])


def _show_one(job: dict[str, Any]) -> str:
    pending = job["state"] in JOB_PENDING
    out = fields([(k, v) for k, v in [
        ("Job", job["display_id"]), ("Name", job["name"]), ("User", job["user"]),
        ("Project", job["project"]), ("Queue", job["queue"]), ("State", job["state"]),
        ("Pending reason", job["pending_reason"] if pending else "omit"),
        ("Command", _command(job)), ("Slots", job["slots"]),
        ("Resource req", job["resreq"]), ("GPU req", GpuRequest.from_json(job["gpu"]).text(format_size) if job.get("gpu") else "omit"),
        ("Hosts", _hosts(job)), ("GPUs", _gpus(job.get("gpus")) or "omit"), ("Run", job["run"]),
        ("Staging out", job["pending_reason"] if job["state"] == JobState.STAGE_OUT else "omit"),
        ("App profile", job.get("app")),
        ("Rerunnable", "yes" if job["rerunnable"] else "no"),
        ("Priority", job.get("user_priority", "omit")),
        ("Begin time", when(job["begin_time"]) if job.get("begin_time") else "omit"),
        ("Exclusive", "yes (-x)" if job.get("exclusive") else "omit"),
        ("Requeue exit", (job["requeue_exit"] + (f" (requeued {job['requeues']} times)" if job.get("requeues") else ""))
         if job.get("requeue_exit") else "omit"),
        ("Not on hosts", ", ".join(job["avoid_hosts"]) if job.get("avoid_hosts") else "omit"),
        ("Pre-exec", (job["pre_exec"] + (f" (failed {job['pre_exec_failures']} times)"
                                         if job.get("pre_exec_failures") else "")) if job.get("pre_exec") else "omit"),
        ("Post-exec", (job["post_exec"] + (f" (exit code {job['post_exec_exit']})"
                                           if job.get("post_exec_exit") is not None else ""))
         if job.get("post_exec") else "omit"),
        ("Dependency", (job["dependency"] + (" (-ti)" if job.get("terminate_orphan") else ""))
         if job.get("dependency") else "omit"),
        ("Submitted", when(job["submit_time"])),
        ("Allocated", when(job.get("alloc_time")) if job.get("alloc_time") else "omit"),
        ("Started", when(job["start_time"])),
        ("Hosts held", f"{job['held_s']:.1f}s before it started" if job.get("held_s") is not None else "omit"),
        ("Ended", when(job["end_time"])), ("Exit code", job["exit_code"]), ("Signal", job["signal"]),
        ("Exit reason", job["exit_reason"]), ("Memory limit", format_size(job.get("mem_limit"), iec=True)),
        ("Run limit", format_run_limit(job["run_limit"]) if job.get("run_limit") else "omit"),
        ("Usage", _usage(job.get("usage")) or "omit"),
        ("Cwd", job["cwd"]), ("Submitted from", job.get("submit_dir")), ("Note", job.get("note")),
        ("Stdout", job["stdout"]), ("Stderr", job["stderr"]),
        ("Rendezvous", job.get("rendezvous") or "omit"),
        ("Tasks", "; ".join(_task(t) for t in job.get("tasks") or ()) or "omit"),
    ] if v != "omit"])
    if job["claims"]:
        rows = []
        for c in job["claims"]:
            rows.append((c["name"], c["form"], c["class"], c["state"], c["mode"], c.get("env"), c.get("path"),
                         c.get("attempts") or None, c.get("last_error")))
            for a in c.get("attachments") or []:
                rows.append((f"  #{a['id']} on {a['host']}", "attachment", "", a["state"], "", "", a["path"],
                             a.get("attempts") or None, a.get("last_error")))
        sub = table(("CLAIM", "FORM", "CLASS", "STATE", "MODE", "ENV", "PATH", "ATTEMPTS", "LAST ERROR"), rows)
        out += "\nClaims:\n" + "\n".join(f"  {line}" for line in sub.splitlines())
        if job.get("publish") == "symlink":
            out += "\n  (published as symlinks: the worker is not root, so no private mounts)"
    if job.get("history"):
        sub = table(("TIME", "STATE", "RUN", "REASON"),
                    ((when(h["time"]), h["state"], h.get("run") or None, h.get("reason")) for h in job["history"]))
        out += "\nHistory:\n" + "\n".join(f"  {line}" for line in sub.splitlines())
    return out


def _gpus(by_host: dict[str, list[dict[str, Any]]] | None) -> str | None:
    """``host1: 0,1 (GPU-6f1c..., GPU-0b2e...)``: the run's GPUs on each host, by id and UUID."""
    if not by_host:
        return None
    return "; ".join(f"{h}: {','.join(str(g['id']) for g in gs)} ({', '.join(g['uuid'] for g in gs if g['uuid'])})"
                     for h, gs in by_host.items())


def _usage(u: dict[str, Any] | None) -> str | None:
    """``max RSS 212.4 MiB, CPU 1.02s user + 0.03s system`` (the last run's, as its worker measured it)."""
    if not u:
        return None
    parts = []
    if u.get("max_rss_bytes") is not None:
        parts.append(f"max RSS {format_size(u['max_rss_bytes'], iec=True)}")
    if u.get("cpu_user_s") is not None:
        parts.append(f"CPU {u['cpu_user_s']:.2f}s user + {u.get('cpu_sys_s') or 0:.2f}s system")
    return ", ".join(parts) or None


def cmd_show(args, ctx) -> int:
    client = ctx.client()
    jobs = [j for text in args.ids for j in resolve(client, text)]
    if ctx.json:
        print_json(jobs[0] if len(jobs) == 1 else jobs)
    else:
        print("\n\n".join(_show_one(j) for j in jobs))
    return EXIT_OK


def why_text(job: dict[str, Any]) -> str:
    state = job["state"]
    if state in JOB_PENDING:
        return job["pending_reason"] or "waiting for the next scheduling cycle"
    if state == JobState.RUN:
        return f"running on {_hosts(job)}"
    if state == JobState.USUSP:
        return f"stopped on {_hosts(job)} (its processes frozen until xce resume)"
    if state == JobState.STAGE_OUT:
        return job["pending_reason"] or "process ended; staging out"
    if state == JobState.DONE:
        return "done (exit code 0)"
    return job["exit_reason"] or f"exit code {job['exit_code']}"


def cmd_why(args, ctx) -> int:
    client = ctx.client()
    jobs = [j for text in args.ids for j in resolve(client, text)]
    if ctx.json:
        print_json([{"id": j["id"], "display_id": j["display_id"], "state": j["state"], "reason": why_text(j)}
                    for j in jobs])
    else:
        for j in jobs:
            print(f"Job <{j['display_id']}> {j['state']}: {why_text(j)}")
    return EXIT_OK


# ---------------------------------------------------------------- actions


def cmd_mod(args, ctx) -> int:
    """``xce mod``: the changes, checked here as a submission's are (bad usage: exit 2), then sent once
    for the job, or for the whole array when ID is an array's."""
    body = jobspec.mod_changes(args)
    client = ctx.client()
    job = resolve(client, args.id, whole_array=False)[0]
    whole = "[" not in args.id and job.get("array_parent") == job["id"]
    after = client.post(f"/v1/jobs/{job['id']}/modify", {**body, "whole_array": whole})
    if ctx.json:
        print_json(after)
    else:
        print(f"Parameters of job <{args.id.strip()}> are being changed")
    return EXIT_OK


_DONE_WORDS = {"kill": "is being terminated", "requeue": "is requeued", "hold": "is held",
               "release": "is released", "stop": "is stopped", "resume": "is resumed", "signal": "is signalled"}


def cmd_action(args, ctx) -> int:
    """Act on each id; one line per job, and one for a whole array (as LSF's bkill); exit 1 if any was
    refused (the rest still happen).  With ``--json`` one list: each job as it is after the action, and
    each refusal in the API's error shape with the id it was for (``{"job": ID, "error": {code, message}}``),
    in the order given, so a script reads every outcome from stdout."""
    client = ctx.client()
    results: list[dict] = []
    refused = 0

    def refuse(what: str, named: str, e: ApiError) -> None:
        nonlocal refused
        refused += 1
        if ctx.json:
            results.append({"job": what, "error": {"code": e.code, "message": e.message}})
        else:
            print(f"xce: {named}: {e.message}", file=sys.stderr)

    for text in args.ids:
        try:
            targets = resolve(client, text)
        except ApiError as e:
            refuse(text, text, e)
            continue
        signal = getattr(args, "signal", None)
        action, body = ("signal", {"signal": signal}) if signal else (args.action, {})
        done = 0
        for job in targets:
            try:
                after = client.post(f"/v1/jobs/{job['id']}/{action}", body)
            except ApiError as e:
                refuse(job["display_id"], f"job <{job['display_id']}>", e)
                continue
            results.append(after)
            done += 1
            if not ctx.json and len(targets) == 1:
                print(f"Job <{after['display_id']}> {_DONE_WORDS[action]}")
        if not ctx.json and len(targets) > 1 and done:  # a whole array: one line for it
            print(f"Job <{text}> {_DONE_WORDS[action]} ({done} of its {len(targets)} elements)")
    if ctx.json:
        print_json(results)
    return EXIT_REFUSED if refused else EXIT_OK

