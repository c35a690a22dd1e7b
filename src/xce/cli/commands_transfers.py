"""``xce transfers list``: the URL schemes and remotes you may stage from and to (``GET /v1/transfers``).

``--stage-in SRC[:DEST]`` and ``--stage-out SRC:DEST`` take, besides paths, a URL of a scheme listed
here (``https://host/path``, ``s3://bucket/prefix/``) or a remote as ``NAME:path``.  No credentials
are ever shown: they live only in the workers' configuration.
"""

from __future__ import annotations

import argparse
import sys

from xce.cli.base import Parser
from xce.cli.errors import EXIT_OK
from xce.cli.output import print_json, print_table


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    t = sub.add_parser("transfers", parents=[common], help="URL schemes and remotes for --stage-in/--stage-out")
    tsub = t.add_subparsers(dest="transfers_command", metavar="ACTION", required=True, parser_class=Parser)
    ls = tsub.add_parser("list", parents=[common], help="schemes and remotes your projects may use")
    ls.set_defaults(func=cmd_list)


def cmd_list(args, ctx) -> int:
    out = ctx.client().get("/v1/transfers")
    if ctx.json:
        print_json(out)
        return EXIT_OK
    print_table(("SCHEME", "VIA", "PROJECTS"),
                ((s["scheme"] + "://", s["via"], ",".join(s["projects"])) for s in out["schemes"]))
    if out["remotes"]:
        print()
        print_table(("REMOTE", "TYPE", "SCHEMES", "PROJECTS", "DESCRIPTION"),
                    ((r["name"], r["type"], ",".join(s + "://" for s in r["schemes"]) or "-",
                      ",".join(r["projects"]), r["description"]) for r in out["remotes"]))
    else:
        print("No remotes for your projects (write them as NAME:path when there are)", file=sys.stderr)
    return EXIT_OK
