"""``bpeek``: a running job's output so far (``-f``: followed until the job ends), wherever it runs: the
controller asks the worker on the job's host, which reads it through the job's own process
(``GET /v1/jobs/{id}/output``).  A job that has ended is read from its output file where this host can
read it (the local cluster, a shared file system), as LSF's bpeek does for a finished job's."""

from __future__ import annotations

import base64
import os
import sys
import time
from typing import Any

from xce.client import ApiError, Client
from xce.lsf._base import EXIT_FAILED, LsfError, LsfParser, client, find_jobs, not_found, run

POLL = 0.5  # seconds between reads of a followed output (and looks at its job's state)
PAGE = 1 << 20  # bytes asked at a time


def output_file(job: dict[str, Any]) -> str:
    path = job.get("stdout")
    if not path or "%" in path:
        raise LsfError(f"Job <{job['display_id']}>: its output file is not known (the job never started)")
    if not os.path.exists(path):
        raise LsfError(f"Job <{job['display_id']}> has ended: its output {path} is on "
                       f"{','.join(job['hosts']) or 'its host'}, not readable here")
    return path


def _finished_output(job: dict[str, Any]) -> int:
    with open(output_file(job), "rb") as fh:
        while chunk := fh.read(1 << 16):
            sys.stdout.buffer.write(chunk)
    sys.stdout.flush()
    return 0


def _read(c: Client, job: dict[str, Any], offset: int) -> dict[str, Any] | None:
    """One page of the running job's output from ``offset`` (None: it is no longer running)."""
    try:
        return c.get(f"/v1/jobs/{job['id']}/output", {"offset": offset, "limit": PAGE})
    except ApiError as e:
        if e.code == "not_running":
            return None
        raise LsfError(f"Job <{job['display_id']}>: {e.message}") from None


def bpeek(argv: list[str]) -> int:
    p = LsfParser(prog="bpeek")
    p.add_argument("-f", dest="follow", action="store_true", help="follow the output until the job ends")
    p.add_argument("id", metavar="job_ID")
    args = p.parse_args(argv)
    c = client()
    jobs = find_jobs(c, args.id)
    if not jobs:
        print(not_found(args.id), file=sys.stderr)
        return EXIT_FAILED
    job = jobs[0]
    if job["state"] in ("PEND", "PSUSP"):
        raise LsfError(f"Job <{job['display_id']}> : Not yet started.")
    print("<< output from stdout >>", flush=True)
    if job["state"] in ("DONE", "EXIT"):
        return _finished_output(job)
    offset = 0
    while True:
        page = _read(c, job, offset)
        if page is None:  # it ended: what it wrote last is in its file
            return 0
        data = base64.b64decode(page["data"])
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
        offset = page["offset"] + len(data)
        if offset < page["size"]:
            continue  # more than a page so far
        if not args.follow:
            return 0
        time.sleep(POLL)


def main(argv: list[str] | None = None) -> int:
    return run("bpeek", lambda: bpeek(sys.argv[1:] if argv is None else argv))
