"""What every CLI command shares: the argument parser class and the per-invocation context."""

from __future__ import annotations

import argparse
import gettext

from xce.cli.errors import ParseError
from xce.client import Client
from xce.errors import InvalidRequest
from xce.jobspec import positive_int  # noqa: F401  (the commands' type for counts, as submit's -n)

# Start-up time matters for a command people (and scripts) run thousands of times.  argparse asks
# gettext to translate every string it builds (~0.15 ms a lookup, ~15 ms a run) and Python ships
# no translations for it, so those lookups are skipped.  For the same reason the CLI's own classes
# are plain classes, not dataclasses (whose generated methods are compiled at import).  ``_`` is
# argparse's private name for gettext: replaced only while it is that (a later argparse may differ).
if getattr(argparse, "_", None) is gettext.gettext:
    argparse._ = lambda message: message  # type: ignore[attr-defined]


def size_text(text: str) -> str:
    """An argument that is a size (``10Gi``), checked as the controller will read it and sent as given:
    a typo is bad usage (exit 2), not a refusal."""
    from xce.units import parse_size

    try:
        parse_size(text)
    except InvalidRequest as e:
        raise argparse.ArgumentTypeError(e.message) from None
    return text


def name_of(kind: str):
    """An argparse type: a name of ``kind`` (claim, snapshot, user, host), checked as the controller checks
    it (``xce.names``): a typo is bad usage (exit 2) said before anything is sent, and never a path the
    request could not carry (a blank in a URL)."""
    from xce.names import check_name

    def check(text: str) -> str:
        try:
            return check_name(kind, text)
        except InvalidRequest as e:
            raise argparse.ArgumentTypeError(e.message) from None

    check.__name__ = f"{kind} name"  # (argparse names the type so in its message)
    return check


def signal_text(text: str) -> str:
    """An argument that is a signal (``USR1``, ``SIGTERM``, ``10``), checked as the controller reads it."""
    from xce.units import parse_signal

    try:
        parse_signal(text)
    except InvalidRequest as e:
        raise argparse.ArgumentTypeError(e.message) from None
    return text


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, never a traceback (xce.cli.main reports it)
        raise ParseError(self.prog, message)


class Context:
    """What a command needs from the command line besides its own arguments."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self._client: Client | None = None

    @property
    def called(self) -> str | None:
        """The controller this command asked something (None: none yet): what failed to read an answer
        is told apart from the CLI's own failures by it (``xce.cli.main``)."""
        return self._client.url if self._client is not None else None

    @property
    def json(self) -> bool:
        return bool(getattr(self.args, "json", False))

    def client(self) -> Client:
        """The controller client, from ``--url/--token``, the environment or a config file."""
        if self._client is None:
            from xce.cli.config import resolve

            s = resolve(getattr(self.args, "url", None), getattr(self.args, "token", None),
                        getattr(self.args, "config", None))
            # one client per controller and token for the process's life: a warm server's worker
            # (xce.cli.server) keeps its connection between calls (a kept-alive one found closed is
            # retried fresh, xce.client._http)
            key = (s.url, s.token)
            if key not in _CLIENTS:
                _CLIENTS[key] = Client(s.url, s.token)
            self._client = _CLIENTS[key]
        return self._client


_CLIENTS: dict[tuple[str, str], Client] = {}
