"""The CLI's failures and exit codes, and the one place client errors become them.

    CliError          report ``xce: <message>`` on stderr, exit 1 (refused by the server, unreachable)
    └── UsageError    bad usage, exit 2
        └── ParseError  the command line does not parse (argparse's words, its own prefix: ``xce jobs: ...``)

With ``--json`` the same failure is ``{"error": {"code", "message"}}`` on stdout (the API's shape;
``code`` the server's word for a refusal, else ``usage`` or ``failed``), with the same exit code.

``xce.client`` raises its own errors (no exit codes below the CLI); ``from_client`` maps them at
the CLI's boundary: a bad controller URL or token setting is bad usage (2), everything else a
refusal (1), with the client's message unchanged.
"""

from __future__ import annotations

from xce.client import ApiError, ClientError, InvalidToken, InvalidURL, Unreachable

EXIT_OK = 0
EXIT_REFUSED = 1  # the server said no, or could not be reached
EXIT_USAGE = 2


class CliError(Exception):
    """A failure to report as ``xce: <message>`` on stderr and exit with ``exit_code``; ``code``: the
    word ``--json`` gives it (the controller's for a refusal)."""

    exit_code = EXIT_REFUSED
    code = "failed"

    def __init__(self, message: str, exit_code: int | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        if exit_code is not None:
            self.exit_code = exit_code
        if code is not None:
            self.code = code

    def line(self) -> str:
        """The one line on stderr."""
        return f"xce: {self.message}"

    def document(self) -> dict[str, dict[str, str]]:
        """What ``--json`` prints on stdout instead: the API's error shape."""
        return {"error": {"code": self.code, "message": self.message}}


class UsageError(CliError):
    """Bad usage (exit 2)."""

    exit_code = EXIT_USAGE
    code = "usage"


class ParseError(UsageError):
    """A command line that does not parse, in argparse's words after the command's name (``prog``)."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(f"{prog}: {message}")

    def line(self) -> str:
        return self.message


def from_client(e: ClientError) -> CliError:
    """The CLI's word for a client failure: same message; exit 2 for a bad URL or token, else 1."""
    if isinstance(e, (InvalidURL, InvalidToken)):
        return UsageError(e.message)
    return CliError(e.message, code=e.code if isinstance(e, ApiError) else "unreachable" if isinstance(e, Unreachable)
                    else None)
