"""What the providers XCE ships share: refusals, checked request fields, safe names, owner ids,
atomic JSON files, flocks, reply documents, and a copy of a tree that follows no link.

Stdlib only, and nothing else of XCE: a provider is started once per batch, so it stays
import-light, and it speaks the contract from its text (``docs/providers.md``), like any other
provider would.  Messages name the provider (``who``) that refuses.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import stat

_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class Refusal(Exception):
    """This request fails with an error reply (the batch goes on)."""

    def __init__(self, code: str, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.code, self.message, self.retryable = code, message, retryable


class Flock:
    """An exclusive flock on ``path`` for a with-block (created if missing)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> int:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self.fd

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # releases the lock


class ProviderConfig:
    """What every provider's private config has: ``root`` (required, absolute), ``reachable_hosts``,
    ``host_labels`` and ``set_owner``, checked; a provider subclasses it for its own keys (``KEYS``
    names every key it takes: any other refuses the whole batch)."""

    WHO = "provider"
    KEYS: tuple[str, ...] = ("root", "reachable_hosts", "host_labels", "set_owner")

    def __init__(self, raw: object) -> None:
        who = self.WHO
        if not isinstance(raw, dict):
            raise Refusal("INVALID_CONFIG", f"{who}: config must be an object", True)
        unknown = sorted(set(raw) - set(self.KEYS))
        if unknown:
            raise Refusal("INVALID_CONFIG", f"{who}: unknown config keys {', '.join(unknown)}", True)
        root = raw.get("root")
        if not isinstance(root, str) or not os.path.isabs(root):
            raise Refusal("INVALID_CONFIG", f"{who}: config root must be an absolute path", True)
        self.root = os.path.normpath(root)
        hosts = raw.get("reachable_hosts")
        if hosts is not None and (not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts)):
            raise Refusal("INVALID_CONFIG", f"{who}: reachable_hosts must be a list of host names", True)
        self.reachable_hosts: list[str] | None = hosts
        labels = raw.get("host_labels", {})
        if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                                   for k, v in labels.items()):
            raise Refusal("INVALID_CONFIG", f"{who}: host_labels must map strings to strings", True)
        self.host_labels: dict[str, str] = labels
        self.set_owner = raw.get("set_owner", False)
        if not isinstance(self.set_owner, bool):
            raise Refusal("INVALID_CONFIG", f"{who}: set_owner must be true or false", True)

    @property
    def volumes(self) -> str:
        return os.path.join(self.root, "volumes")

    def node_dir(self, host: str) -> str:
        return os.path.join(self.root, "nodes", host)


def derive_handle(claim_id: int, op_id: str, prefix: str = "v") -> str:
    """The handle an object-making op gives: the same op_id always names the same object."""
    return f"{prefix}{claim_id}-{hashlib.sha1(op_id.encode()).hexdigest()[:10]}"


def check_name(value: object, what: str, who: str) -> str:
    """A handle or host name that is safe as one path component (no '/', no '..', no dot names)."""
    if not isinstance(value, str) or not value or len(value) > 200 or value[0] == "." \
            or not set(value) <= _NAME_CHARS:
        raise Refusal("INVALID_ARGUMENT", f"{who}: {what} must be a name of letters, digits, '.', '_' "
                                          f"and '-' not starting with '.', got {value!r}", False)
    return value


def field(req: dict, key: str, kind: type, who: str, default: object = None, required: bool = False) -> object:
    """``req[key]``, of type ``kind`` (a bool is no int), or ``default`` when absent and not required."""
    value = req.get(key, default)
    if value is None and not required:
        return default
    if value is None or isinstance(value, bool) is not (kind is bool) or not isinstance(value, kind):
        raise Refusal("INVALID_ARGUMENT", f"{who}: {req.get('op')} needs {key} ({getattr(kind, '__name__', kind)}),"
                                          f" got {value!r}", False)
    return value


def str_map(req: dict, key: str, who: str) -> dict:
    value = req.get(key) or {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise Refusal("INVALID_ARGUMENT", f"{who}: {key} must map strings to strings", False)
    return value


def owner_ids(set_owner: bool, tags: dict, who: str) -> tuple[int, int] | None:
    """The (uid, gid) an object's data is given to with ``set_owner``: the account named by its
    ``xce.owner`` tag (None: left to the provider's own user)."""
    if not set_owner:
        return None
    import pwd

    name = tags.get("xce.owner")
    try:
        pw = pwd.getpwnam(name) if name else None
    except KeyError:
        pw = None
    if pw is None:
        raise Refusal("NOT_FOUND", f"{who}: the claim's owner {name!r} has no account on this host", False)
    return pw.pw_uid, pw.pw_gid


def read_json(path: str) -> dict | None:
    try:
        with open(path) as fh:
            value = json.load(fh)
    except FileNotFoundError:
        return None
    return value if isinstance(value, dict) else None


def write_json(path: str, value: object) -> None:
    """Atomically: a reader sees the old file or the new one, never half of one (mode 0600: owner
    tags are nobody else's business)."""
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as fh:
        json.dump(value, fh, sort_keys=True)
    os.replace(tmp, path)


def makedirs(path: str) -> None:
    """``path`` and its parents, made passable but not listable by others (whatever the umask)."""
    if not os.path.isdir(path):
        makedirs(os.path.dirname(path))
        try:
            os.mkdir(path, 0o711)
        except FileExistsError:
            return
        os.chmod(path, 0o711)


def ok(op_id: str, **fields: object) -> dict:
    return {"op_id": op_id, "ok": True, **{k: v for k, v in fields.items() if v is not None}}


def error(op_id: str, code: str, message: str, retryable: bool) -> dict:
    return {"op_id": op_id, "ok": False, "error": {"code": code, "message": message, "retryable": retryable}}


MAX_DEPTH = 256  # directories deep that ``copy_tree`` copies a tree


def copy_bytes(fd_in: int, fd_out: int) -> None:
    """Everything left to read from ``fd_in``, written to ``fd_out``."""
    while chunk := os.read(fd_in, 1 << 20):
        view = memoryview(chunk)
        while view:
            view = view[os.write(fd_out, view):]


def copy_tree(src_fd: int, dest_fd: int, owner: tuple[int, int] | None, who: str, depth: int = 0) -> None:
    """The tree in the open directory ``src_fd`` copied into the open directory ``dest_fd`` (modes and
    times kept; given to ``owner`` if any), following nothing.

    A volume's data is written by jobs, whose users may plant links in it and swap them in while a
    snapshot or clone copies it as root: so every entry is opened relative to its parent's
    descriptor with ``O_NOFOLLOW`` and checked by what was opened, never by a name.  Links are
    copied as links, directories and regular files as themselves, anything else (a fifo would hang
    the copy, a device is not data) is left out; an entry swapped for another kind since it was
    listed is left out too."""
    if depth > MAX_DEPTH:
        raise Refusal("INVALID_ARGUMENT", f"{who}: the tree to copy is more than {MAX_DEPTH} directories deep", False)
    with os.scandir(src_fd) as entries:
        names = [e.name for e in entries]
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    for name in names:
        try:
            st = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(name, dir_fd=src_fd), name, dir_fd=dest_fd)
                if owner is not None:
                    os.chown(name, *owner, dir_fd=dest_fd, follow_symlinks=False)
                continue
            if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                continue
            fd_in = os.open(name, flags | (os.O_DIRECTORY if stat.S_ISDIR(st.st_mode) else 0), dir_fd=src_fd)
        except OSError as e:
            if e.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                continue  # gone, or swapped for a link or another kind since it was listed: not followed
            raise
        try:
            st = os.fstat(fd_in)
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(name, 0o700, dir_fd=dest_fd)
                fd_out = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dest_fd)
            elif stat.S_ISREG(st.st_mode):
                fd_out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                                 dir_fd=dest_fd)
            else:
                continue
            try:
                if stat.S_ISDIR(st.st_mode):
                    copy_tree(fd_in, fd_out, owner, who, depth + 1)
                else:
                    copy_bytes(fd_in, fd_out)
                keep_meta(fd_out, st, owner)
            finally:
                os.close(fd_out)
        finally:
            os.close(fd_in)


def keep_meta(fd: int, st: os.stat_result, owner: tuple[int, int] | None) -> None:
    """The mode and times of ``st`` on the copy ``fd``, which is given to ``owner`` (else stays ours):
    set-id bits only if the copy's owner is the source's (a user's set-uid file copied by root must
    not become a set-uid root program)."""
    if owner is not None:
        os.fchown(fd, *owner)
    mode = stat.S_IMODE(st.st_mode)
    if (owner[0] if owner is not None else os.geteuid()) != st.st_uid:
        mode &= ~(stat.S_ISUID | stat.S_ISGID)
    os.fchmod(fd, mode)
    os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
