"""``bpeek``: a job's output so far (``-f``: followed until the job ends), read from the output file
its run writes (the job's ``stdout``), where this host can read it: the local cluster's hosts, or a
file system the execution host shares.  Reading it from a host that shares nothing is not there yet."""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from xce.lsf._base import EXIT_FAILED, LsfError, LsfParser, client, find_jobs, not_found, run

POLL = 0.5  # seconds between looks at a followed file (and at its job's state)


def output_file(job: dict[str, Any]) -> str:
    path = job.get("stdout")
    if not path or "%" in path:
        raise LsfError(f"Job <{job['display_id']}>: its output file is not known yet (the job has not started)")
    if not os.path.exists(path):
        raise LsfError(f"Job <{job['display_id']}>: its output {path} is on {','.join(job['hosts']) or 'its host'}, "
                       "not readable here (bpeek reads it only through a shared file system yet)")
    return path


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
    with open(output_file(job), "rb") as fh:
        while True:
            chunk = fh.read(1 << 16)
            if chunk:
                sys.stdout.buffer.write(chunk)
                sys.stdout.flush()
                continue
            if not args.follow or c.get(f"/v1/jobs/{job['id']}")["state"] in ("DONE", "EXIT"):
                rest = fh.read()
                sys.stdout.buffer.write(rest)
                return 0
            time.sleep(POLL)


def main(argv: list[str] | None = None) -> int:
    return run("bpeek", lambda: bpeek(sys.argv[1:] if argv is None else argv))
