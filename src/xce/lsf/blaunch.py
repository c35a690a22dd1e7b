"""``blaunch``: LSF's task launcher, inside a job (``xce launch``'s definition: ``xce.cli.commands_launch``)."""

from __future__ import annotations

import sys

from xce.cli.commands_launch import add_arguments, launch
from xce.lsf._base import LsfParser, run


def blaunch(argv: list[str]) -> int:
    p = LsfParser(prog="blaunch", description="start a task on hosts of the job this runs in")
    add_arguments(p)
    return launch(p.parse_args(argv))


def main(argv: list[str] | None = None) -> int:
    return run("blaunch", lambda: blaunch(sys.argv[1:] if argv is None else argv))
