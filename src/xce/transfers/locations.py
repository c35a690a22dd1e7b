"""Where staged data comes from and goes to: a local path, a URL, or a named remote.

What a user writes (``xce submit --stage-in/--stage-out``)::

    /data/in.csv                 a path on the job's host (the CLI makes relative paths absolute)
    https://host/path/file       a public URL (the site's public_schemes: https, and http if enabled)
    s3://bucket/prefix/          a URL whose scheme a remote serves for the job's project
    lab-s3:bucket/prefix/        a named remote (rclone's NAME:path); ./lab-s3:x is a local path

At submission the controller resolves each one for the job's project
(``resolve``): a ``s3://`` URL becomes the remote that serves it
(``lab-s3:bucket/prefix/``), a remote the project may not use, an unknown
scheme or remote, and a URL with credentials in it (``user:secret@``, or a
query string, where presigned URLs keep theirs) are refused.  What the claim
records, and workers receive, is the canonical form: an absolute path,
``http(s)://host/path``, or ``REMOTE:path``.

Separating DEST: the first ``:`` after the source's own prefix (``scheme://host``,
``REMOTE:``) separates it, so a ``:`` inside a URL's path or a remote path must be
avoided.  A stage-out's SRC (relative to the staging area) holds no ``:``.
"""

from __future__ import annotations

import os
import posixpath
import re
import urllib.parse
from dataclasses import dataclass

from xce.transfers.site import NAME_PATTERN, TransferSite

URL_PREFIX = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]{0,15})://")
REMOTE_PREFIX = re.compile(r"^([a-z0-9][a-z0-9\-_.]{0,62}):")
MAX_LOCATION = 4096


class TransferRefused(ValueError):
    """A location that cannot be used, with a message a person can read (never a credential).
    ``forbidden``: the project may not use it (403), else malformed or unknown (400)."""

    def __init__(self, message: str, forbidden: bool = False) -> None:
        super().__init__(message)
        self.message, self.forbidden = message, forbidden


@dataclass(frozen=True)
class Location:
    """``kind``: ``path`` (``text`` absolute), ``url`` (a public URL: ``scheme``, ``base`` =
    ``scheme://host/``, ``path``) or ``remote`` (``remote`` named, ``path`` inside it)."""

    kind: str
    text: str
    remote: str | None = None
    scheme: str | None = None
    base: str | None = None
    path: str = ""

    @property
    def local(self) -> bool:
        return self.kind == "path"

    @property
    def basename(self) -> str:
        """The last name of the path (a stage-in's default destination)."""
        tail = (self.text if self.local else self.path).rstrip("/")
        return posixpath.basename(tail)


def kind_of(text: str) -> str:
    """``url``, ``remote`` or ``path``, by syntax alone (a canonical location, or the CLI's guess)."""
    if URL_PREFIX.match(text):
        return "url"
    if not text.startswith(("/", ".")) and REMOTE_PREFIX.match(text):
        return "remote"
    return "path"


def _prefix_end(text: str) -> int:
    """Where the source's own prefix ends: after ``scheme://host`` or ``REMOTE:``; 0 for a path."""
    m = URL_PREFIX.match(text)
    if m:
        slash = text.find("/", m.end())
        return len(text) if slash < 0 else slash
    m = REMOTE_PREFIX.match(text) if not text.startswith(("/", ".")) else None
    return m.end() if m else 0


def split_stage_in(text: str) -> tuple[str, str | None]:
    """``SRC[:DEST]`` as (SRC, DEST or None)."""
    start = _prefix_end(text)
    i = text.find(":", start)
    return (text, None) if i < 0 else (text[:i], text[i + 1:])


def split_stage_out(text: str) -> tuple[str, str | None]:
    """``SRC:DEST``: SRC is relative to the staging area and holds no ``:``."""
    src, sep, dest = text.partition(":")
    return src, (dest if sep else None)


def _check_text(text: str, what: str) -> None:
    if not text or len(text) > MAX_LOCATION or any(ch in text for ch in "\0\n\r"):
        raise TransferRefused(f"{what}: an empty, over-long or multi-line location")


def parse_url(text: str, what: str) -> tuple[str, str, str]:
    """(scheme, host, path) of a URL with no credentials, query or fragment in it."""
    try:
        u = urllib.parse.urlsplit(text)
        _ = u.port
    except ValueError:
        raise TransferRefused(f"{what}: not a valid URL") from None
    if "@" in u.netloc:
        # never echo it: the part before @ is a user name and maybe a password or an access key
        raise TransferRefused(f"{what}: a URL with credentials in it (USER:SECRET@) is refused: credentials "
                              "belong in a remote that the site configures (xce transfers list)")
    if u.query or u.fragment or text.endswith(("?", "#")):
        raise TransferRefused(f"{what}: a URL with a query string or fragment is refused (presigned URLs carry "
                              "credentials there): use a remote the site configures (xce transfers list)")
    if not u.hostname:
        raise TransferRefused(f"{what}: the URL names no host or bucket")
    return u.scheme.lower(), u.netloc.lower(), urllib.parse.unquote(u.path)


def resolve(text: str, site: TransferSite, project: str, what: str) -> Location:
    """A location as a job of ``project`` may use it, or ``TransferRefused`` saying why not."""
    _check_text(text, what)
    kind = kind_of(text)
    if kind == "path":
        if not os.path.isabs(text):
            raise TransferRefused(f"{what} {text!r} must be an absolute path, a URL or REMOTE:path")
        return Location("path", os.path.normpath(text))
    if kind == "url":
        scheme, host, path = parse_url(text, what)
        if scheme in site.public_schemes:
            base = f"{scheme}://{host}/"
            return Location("url", base + path.lstrip("/"), scheme=scheme, base=base, path=path.lstrip("/"))
        remote = site.for_scheme(scheme, project)
        if remote is None:
            if scheme in site.schemes():
                raise TransferRefused(f"{what}: project {project} may use no remote for {scheme}:// URLs "
                                      "(xce transfers list)", forbidden=True)
            known = ", ".join(s + "://" for s in site.schemes()) or "none"
            raise TransferRefused(f"{what}: unknown scheme {scheme}:// (this site transfers {known}; "
                                  "xce transfers list)")
        inner = f"{host}/{path.lstrip('/')}".rstrip("/") + ("/" if path.endswith("/") else "")
        return Location("remote", f"{remote.name}:{inner}", remote=remote.name, scheme=scheme, path=inner)
    name, path = text.split(":", 1)
    remote = site.remote(name)
    if remote is None:
        raise TransferRefused(f"{what}: unknown remote {name} (xce transfers list; a local path holding ':' "
                              f"is written ./{name}:...)")
    if not remote.allows(project):
        raise TransferRefused(f"{what}: project {project} may not use remote {name}", forbidden=True)
    if not path.strip("/"):
        raise TransferRefused(f"{what}: give a path inside remote {name} ({name}:bucket/path)")
    return Location("remote", f"{name}:{path}", remote=name, path=path)


def populate_destination(src: Location) -> str:
    """Where a populated claim's source lands, relative to the claim's root: a prefix (``/`` at its end)
    fills the root; an object or a directory lands under its own name.  One rule for every copy that
    populates (the provisioner's of a shared claim, each worker's of its replica)."""
    return "." if src.path.endswith("/") or not src.basename else src.basename


def parse_canonical(text: str) -> Location:
    """A location as a claim records it (resolved at submission): its parts, checked by syntax only
    (a worker still checks the remote against its own configuration)."""
    kind = kind_of(text)
    if kind == "path":
        return Location("path", text)
    if kind == "url":
        scheme, host, path = parse_url(text, "location")
        base = f"{scheme}://{host}/"
        return Location("url", text, scheme=scheme, base=base, path=path.lstrip("/"))
    name, path = text.split(":", 1)
    if not NAME_PATTERN.match(name):
        raise TransferRefused(f"location: bad remote name {name!r}")
    return Location("remote", text, remote=name, path=path)
