"""What every CLI command shares: the argument parser class and the per-invocation context."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from xce.cli.http import EXIT_USAGE, Client


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, never a traceback
        self.exit(EXIT_USAGE, f"{self.prog}: {message}\n")


@dataclass
class Context:
    """What a command needs from the command line besides its own arguments."""

    args: argparse.Namespace
    _client: Client | None = field(default=None, repr=False)

    @property
    def json(self) -> bool:
        return bool(getattr(self.args, "json", False))

    def client(self) -> Client:
        """The controller client, from ``--url/--token``, the environment or a config file."""
        if self._client is None:
            from xce.cli.config import resolve

            s = resolve(getattr(self.args, "url", None), getattr(self.args, "token", None),
                        getattr(self.args, "config", None))
            self._client = Client(s.url, s.token)
        return self._client
