"""``bsub``: submit a job as LSF's ``bsub`` does, through the one job-spec parser (``xce.jobspec``'s
bsub column), and print ``Job <N> is submitted to queue <Q>.`` and nothing else on stdout.

What it gathers from this host, and only that: the argument vector, the directory it is run in and
the environment (``-env``), the script (stdin when no command is given, or a regular file named as
the only argument: LSF's ``bsub < job.sh`` and ``bsub job.sh``) and ``LSF_UNIT_FOR_LIMITS``
(``xce.lsfsite``).  What each option means is the parser's.
"""

from __future__ import annotations

import os
import sys

from xce import jobspec
from xce.lsf._base import LsfParser, client, run
from xce.lsfsite import unit_for_limits

PROG = "bsub"
PARSER = jobspec.bsub_parser(LsfParser)  # built once a process (a warm server's workers share it)


def read_script(argv: list[str]) -> tuple[str | None, str]:
    """The job's script and where it came from: a regular file given as the only word of the
    command (its path), or stdin when there is no command (``-``); None for a command line."""
    words = PARSER.parse_args(argv).command
    if words and words[0] == "--":
        words = words[1:]
    if len(words) == 1 and os.path.isfile(words[0]):
        with open(words[0], encoding="utf-8", errors="surrogateescape") as fh:
            return fh.read(), words[0]
    if not words:
        return sys.stdin.read(), "-"
    return None, "-"


def submit(argv: list[str]) -> int:
    script, source = read_script(argv)
    values = jobspec.bsub_values(argv, script, source=source, parser=PARSER)
    c = client()

    def remote_names() -> set[str]:
        return set(c.get("/v1/transfers").get("remote_names", []))

    job = c.submit(jobspec.submission(values, cwd=os.getcwd(), remote_names=remote_names, environ=os.environ,
                                      stdin=lambda: script or "", lsf_unit=unit_for_limits(os.environ)))
    print(f"Job <{job['id']}> is submitted to queue <{job['queue']}>.")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run(PROG, lambda: submit(sys.argv[1:] if argv is None else argv))
