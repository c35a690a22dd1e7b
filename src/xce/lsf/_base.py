"""What every LSF command shares: the controller client, job ids, and one place that turns failures
into LSF's exit status (255, as LSF's commands exit when they fail)."""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Callable

from xce.cli.base import Context, Parser
from xce.cli.errors import CliError, from_client
from xce.client import ApiError, Client, ClientError
from xce.jobspec import JobSpecError

EXIT_FAILED = 255
_JOB_ID = re.compile(r"^(\d+)(?:\[(\d+)\])?$")


class LsfError(Exception):
    """A failure to report as ``prog: message`` on stderr, exit 255."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class LsfParser(Parser):
    """argparse with LSF's single-dash long options (``-noheader``, ``-json``) and LSF's exit status."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        kw.setdefault("allow_abbrev", False)
        super().__init__(*args, **kw)

    def error(self, message: str):  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_FAILED, f"{self.prog}: {message}\n")


def client() -> Client:
    """The controller the client settings name, as ``xce`` finds it (``XCE_URL``, ``XCE_TOKEN``,
    ``XCE_CONFIG``, the default config file), one per process for the settings, as ``xce``'s: a warm
    server's worker keeps its connection between calls."""
    return Context(argparse.Namespace()).client()


def run(prog: str, body: Callable[[], int]) -> int:
    """Run a command's body; a failure is one line on stderr and exit 255."""
    try:
        return body()
    except JobSpecError as e:
        return _report(prog, e.message)
    except ClientError as e:
        return _report(prog, from_client(e).message)
    except (CliError, LsfError) as e:
        return _report(prog, e.message)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


def _report(prog: str, message: str) -> int:
    print(f"{prog}: {message}", file=sys.stderr)
    return EXIT_FAILED


def parse_id(text: str) -> tuple[int, int | None]:
    """``ID`` or ``ID[INDEX]``."""
    m = _JOB_ID.match(text.strip())
    if m is None:
        raise LsfError(f"{text}: Illegal job ID")
    return int(m.group(1)), int(m.group(2)) if m.group(2) else None


def find_jobs(c: Client, text: str) -> list[dict[str, Any]]:
    """The jobs ``ID`` or ``ID[INDEX]`` names, in any state, live or archived (an array's id: every
    element); [] if there is none."""
    from xce.cli.commands_jobs import resolve as resolve_ids

    parse_id(text)
    try:
        return resolve_ids(c, text)
    except ApiError as e:
        if e.status == 404:
            return []
        raise


def not_found(text: str) -> str:
    return f"Job <{text}> is not found"


def add_ids(p: argparse.ArgumentParser) -> None:
    p.add_argument("ids", nargs="*", metavar="job_ID", help="job ids: ID or ID[INDEX]")
