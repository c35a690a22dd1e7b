"""The CLI's failures and exit codes, and the one place client errors become them.

    CliError          report ``xce: <message>`` on stderr, exit 1 (refused by the server, unreachable)
    └── UsageError    bad usage found after argument parsing, exit 2

``xce.client`` raises its own errors (no exit codes below the CLI); ``from_client`` maps them at
the CLI's boundary: a bad controller URL or token setting is bad usage (2), everything else a
refusal (1), with the client's message unchanged.
"""

from __future__ import annotations

from xce.client import ClientError, InvalidToken, InvalidURL

EXIT_OK = 0
EXIT_REFUSED = 1  # the server said no, or could not be reached
EXIT_USAGE = 2


class CliError(Exception):
    """A failure to report as ``xce: <message>`` on stderr and exit with ``exit_code``."""

    exit_code = EXIT_REFUSED

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code


class UsageError(CliError):
    """Bad usage found after argument parsing (exit 2)."""

    exit_code = EXIT_USAGE


def from_client(e: ClientError) -> CliError:
    """The CLI's word for a client failure: same message; exit 2 for a bad URL or token, else 1."""
    return UsageError(e.message) if isinstance(e, (InvalidURL, InvalidToken)) else CliError(e.message)
