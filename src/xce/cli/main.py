"""``xce`` entry point: argument parsing, settings, and one place that turns failures into exit codes.

Exit codes: 0 ok, 1 refused by the server (or unreachable), 2 bad usage.  A failure is one line
``xce: <message>`` on stderr; with ``--json`` anywhere before ``--``, it is the API's error shape
``{"error": {"code", "message"}}`` on stdout instead (``xce.cli.errors``), bad usage included.
Every command accepts ``--json`` (and ``--url/--token/--config``) before or
after its name.  Commands live in ``xce.cli.commands_*`` modules, each of
which adds its subparsers in ``register``; a command is a function
``(args, ctx) -> int``.
"""

from __future__ import annotations

import argparse
import sys

import xce
from xce.cli.base import Context, Parser
from xce.cli.errors import EXIT_USAGE, CliError, UsageError, from_client
from xce.cli.output import print_json
from xce.client import ClientError
from xce.jobspec import JobSpecError


def _common() -> argparse.ArgumentParser:
    # SUPPRESS keeps a subcommand's unset option from overwriting the one given before it
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("connection and output")
    g.add_argument("--url", default=argparse.SUPPRESS,
                   help="controller URL, or several sharing a store: URL1,URL2 (or XCE_URL)")
    g.add_argument("--token", default=argparse.SUPPRESS, help="bearer token (or XCE_TOKEN)")
    g.add_argument("--config", default=argparse.SUPPRESS,
                   help="client config file (or XCE_CONFIG; default ~/.config/xce/config.toml)")
    g.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON")
    return common


# which module registers each command: a one-shot ``xce submit`` imports and builds only its own
# module's parsers (tests/cli checks this table against the full parser)
COMMANDS = {
    **dict.fromkeys(("submit", "jobs", "job", "mod", "kill", "requeue", "hold", "release", "stop", "resume", "hist",
                     "usage", "fairshare"), "commands_jobs"),
    **dict.fromkeys(("claim", "claimclass", "orphans", "snapshot"), "commands_claims"),
    **dict.fromkeys(("ping", "controllers", "queues", "apps", "projects", "hosts", "host", "resources", "users", "user",
                     "token", "audit"), "commands_admin"),
    **dict.fromkeys(("controller", "worker", "provisioner", "up", "down"), "commands_daemons"),
    "transfers": "commands_transfers",
    "launch": "commands_launch",
}
_TAKES_VALUE = ("--url", "--token", "--config")


def build_parser(only: str | None = None) -> Parser:
    """The whole command line, or (``only``) just the commands one module registers."""
    import importlib

    common = _common()
    p = Parser(prog="xce", parents=[common], description="XCE workload manager (alias: xcecli)")
    p.add_argument("--version", action="version", version=f"xce {xce.__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    modules = [only] if only else sorted(set(COMMANDS.values()), key=list(COMMANDS.values()).index)
    for name in modules:
        importlib.import_module(f"xce.cli.{name}").register(sub, common)
    return p


def _wants_json(argv: list[str]) -> bool:
    """Is ``--json`` among the options (before a ``--``)?  Known before the command line parses, so
    that a line that does not parse is reported in JSON too."""
    return "--json" in (argv[:argv.index("--")] if "--" in argv else argv)


def _command(argv: list[str]) -> str | None:
    """The command word of ``argv`` (global options may come first), if any."""
    it = iter(argv)
    for word in it:
        if word == "--":
            return None
        if word in _TAKES_VALUE:
            next(it, None)
        elif not word.startswith("-"):
            return word
    return None


def main(argv: list[str] | None = None, *, parser: Parser | None = None) -> int:
    """Run one ``xce`` command line; ``parser``: one ``build_parser`` made for it already (the warm
    server, ``xce.cli.server``, builds them once)."""
    words = sys.argv[1:] if argv is None else argv
    parser = parser or build_parser(COMMANDS.get(_command(words) or ""))
    as_json = _wants_json(words)
    try:
        args = parser.parse_args(words)
    except CliError as e:  # Parser.error: the line does not parse
        return _report(e, as_json)
    func = getattr(args, "func", None)
    if func is None:
        if as_json:
            return _report(UsageError("no command given (xce --help lists them)"), as_json)
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    ctx = Context(args)
    try:
        return func(args, ctx)
    except ClientError as e:  # the boundary: the client's errors become the CLI's exit codes
        return _report(from_client(e), ctx.json)
    except CliError as e:
        return _report(e, ctx.json)
    except JobSpecError as e:  # a submission's arguments that mean nothing: bad usage
        return _report(UsageError(e.message), ctx.json)
    except (LookupError, TypeError, AttributeError, ValueError) as e:
        if ctx.called is None:
            raise  # no controller was asked: a bug of ours, shown as one
        # an answer of a shape no XCE controller sends ([] to a submission, a job without an id...): the
        # URL names something else, or something hostile; a message, not a traceback
        said = f"{type(e).__name__}: {e}"
        return _report(CliError(f"the controller at {ctx.called} sent an answer xce cannot read "
                                f"({said[:200]})"), ctx.json)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `xce jobs | head`
        return 0


def _report(e: CliError, as_json: bool = False) -> int:
    if as_json:
        print_json(e.document())
    else:
        print(e.line(), file=sys.stderr)
    return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
