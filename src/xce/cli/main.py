"""``xce`` entry point: argument parsing and dispatch to subcommands."""

from __future__ import annotations

import argparse
import sys


class UsageError(Exception):
    """Bad usage detected after parsing (exit code 2)."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, never a traceback
        self.exit(2, f"xce: {message}\n")


def build_parser() -> Parser:
    p = Parser(prog="xce", description="XCE workload manager")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    c = sub.add_parser("controller", help="run the controller")
    c.add_argument("--state-dir", required=True)
    c.add_argument("--listen", default="127.0.0.1:7600")
    c.add_argument("--config")
    c.add_argument("--store", help="postgresql://... (default: SQLite in the state dir)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "controller":
        from xce.controller.config import ConfigError
        from xce.controller.server import run_controller
        from xce.store import StoreError

        try:
            return run_controller(args.state_dir, args.listen, args.config, args.store)
        except (ConfigError, StoreError, ValueError, OSError) as e:
            print(f"xce controller: {e}", file=sys.stderr)
            return 1
    build_parser().print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
