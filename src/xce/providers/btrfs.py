"""btrfs: a real storage provider: one btrfs subvolume per claim, its size a qgroup limit.

Run as ``python -m xce.providers.btrfs``: it reads one request document on
stdin and writes one reply document on stdout (docs/providers.md).  Like
simfs it is started once per batch and imports only stdlib modules and none
of XCE.  It changes subvolumes and quota limits with btrfs's ioctls (what
btrfs-progs calls; a process per call cost more than the change), and runs
``btrfs`` (btrfs-progs) only to read quota groups (``qgroup show``: the
check that root is btrfs with quotas on, and used bytes), as child
processes with argument lists and timeouts, never a shell string.

Per document: the btrfs check is made once, each parent is swept once,
consecutive creates and snapshots are made at the same time under one hold
of the lock (``_parallel``), and used bytes for the replies that carry them
are read once at the end (one commit; from ``/sys/fs/btrfs/<fsid>/qgroups``,
or ``qgroup show --sync`` where that is missing).

Layout under the configured ``root`` (a directory on a btrfs filesystem with
quotas enabled)::

    root/.lock                          flock'd around every change (several providers may share a root)
    root/volumes/<handle>/meta.json     {"handle", "kind": "volume", "tags", "size_bytes", "created", "class",
                                         "params", "attachments", "subvol_id", "source_handle", "expanded_by"}
    root/volumes/<handle>/data          the volume: a subvolume whose qgroup limit is size_bytes
    root/snapshots/<handle>/meta.json   the same, "kind": "snapshot", "source_handle": the volume it was taken of
    root/snapshots/<handle>/data        a read-only snapshot of that volume's data
    root/nodes/<host>/<handle>/...      node-local objects (node_prepare), laid out as volumes

Why the data is a subvolume *inside* a plain directory rather than the
directory itself: the metadata must be where the volume's user cannot change
it (a user who owns a directory can rename or delete any file in it, so it
cannot live in the subvolume), a read-only snapshot's metadata cannot be
written into the snapshot, and one ``rename`` of the envelope directory then
makes the whole object (metadata and data) appear at once.  The envelope is
built under a dot name (``.new-<handle>``) and renamed into place, so a crash
leaves nothing or a whole object; release renames it to ``.gone-<handle>``
before deleting.  Dot-named leftovers are swept (their subvolumes deleted)
by later changes.  (A read-only subvolume cannot itself be moved to another
directory, but the envelope that holds it can.)

Ops: create (optionally from ``source_handle``: a writable snapshot of a
snapshot or volume, instant, no copy), create_snapshot (read-only),
delete_snapshot, expand (raise the qgroup limit, online), release, attach,
detach, health (btrfs? quotas? capacity), list (used bytes: qgroup
referenced bytes), node_prepare, node_publish, node_unpublish, capabilities.

Every op is idempotent by op_id: handles are derived from the op_id
(``v<claim>-<sha1>`` volumes, ``s<claim>-<sha1>`` snapshots) and an existing
object is answered as it is; ``expand`` records the op_ids it applied.

Private config: ``root`` (required, absolute), ``reachable_hosts``,
``host_labels``, ``set_owner`` (as simfs: the volume's top directory goes to
the unix account named by the ``xce.owner`` tag).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shutil
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from xce.providers import kit
from xce.providers.kit import Flock as _Flock, Refusal, derive_handle, error, ok
from xce.providers.kit import makedirs as _makedirs, read_json as _read_json, write_json as _write_json

PROVIDER = "btrfs"  # in every refusal message


CONTRACT = 1
CONFIG_KEYS = ("root", "reachable_hosts", "host_labels", "set_owner")
ACCESS_MODES = ["RWO", "ROX", "RWX", "RWOP"]
CAPABILITIES = {"create_snapshot": True, "clone": True, "expand": True, "online_expand": True,
                "access_modes": ACCESS_MODES}
MIN_SIZE_BYTES = 1 << 20  # smaller sizes are rounded up (and the actual size reported)
BTRFS_TIMEOUT = 60.0  # seconds for one btrfs command; the runner's own timeout bounds the whole call
SUBVOLUME_INODE = 256  # the inode number of every subvolume's top directory
EXPANDS_KEPT = 64  # expand op_ids remembered per volume, for idempotent retries


# ---------------------------------------------------------------------------
# Configuration


class Config(kit.ProviderConfig):
    """The request document's ``config``, checked, and what the provider keeps per document:
    ``fs_checked`` (the btrfs check is made once), the parents already swept, the replies that
    wait for their used bytes (read once, after the document's changes), and whether the document
    holds the root's lock for a group of changes made at the same time."""

    WHO = PROVIDER
    KEYS = CONFIG_KEYS

    def __init__(self, raw: object) -> None:
        super().__init__(raw)
        self.fs_checked = False
        self.swept: set[str] = set()
        self.used_wanted: list[tuple[dict, int]] = []
        self.held = False
        self.sysfs: str | None = None  # "" once known to be unusable
        self._mutex = threading.Lock()

    @property
    def snapshots(self) -> str:
        return os.path.join(self.root, "snapshots")

    def lock(self) -> _Flock | _Held:
        """The root's flock; nothing more while the document holds it for a parallel group."""
        return _Held() if self.held else _Flock(os.path.join(self.root, ".lock"))

    def want_used(self, reply: dict, meta: dict) -> dict:
        """``reply`` gets ``used_bytes`` once the document's changes are done (one commit for all)."""
        if reply.get("ok") and isinstance(meta.get("subvol_id"), int):
            with self._mutex:
                self.used_wanted.append((reply, meta["subvol_id"]))
        return reply

    def fill_used(self) -> None:
        """One ``qgroup show --sync`` for every reply that wants used bytes; on failure they go without
        (the field is optional: the next ``list`` reports them)."""
        if not self.used_wanted:
            return
        try:
            used = _referenced(self, {sid for _, sid in self.used_wanted})
        except Refusal as e:
            print(f"btrfs: used bytes not reported: {e.message}", file=sys.stderr)
            return
        for reply, sid in self.used_wanted:
            if sid in used:
                reply["used_bytes"] = used[sid]


class _Held:
    """The lock the document already holds."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# ---------------------------------------------------------------------------
# btrfs commands


def _btrfs(*args: str, what: str) -> str:
    """Run ``btrfs ARGS`` (an argument list, no shell); its stdout, or a Refusal naming ``what`` failed.

    Errors are read from btrfs-progs' stderr: no space is RESOURCE_EXHAUSTED,
    everything else UNAVAILABLE; both retryable (the same op_id comes back).
    """
    try:
        done = subprocess.run(["btrfs", *args], capture_output=True, text=True, timeout=BTRFS_TIMEOUT,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise Refusal("UNAVAILABLE", "btrfs: the btrfs command is not installed (Debian: btrfs-progs)", True) \
            from None
    except subprocess.TimeoutExpired:
        raise Refusal("UNAVAILABLE", f"btrfs: {what}: btrfs {args[0]} {args[1]} took more than "
                                     f"{BTRFS_TIMEOUT:.0f} s", True) from None
    if done.returncode != 0:
        err = " ".join(done.stderr.split()) or f"exit status {done.returncode}"
        if "No space left" in err or "Disk quota exceeded" in err:
            raise Refusal("RESOURCE_EXHAUSTED", f"btrfs: {what}: {err}", True)
        raise Refusal("UNAVAILABLE", f"btrfs: {what}: {err}", True)
    return done.stdout


# ---------------------------------------------------------------------------
# btrfs ioctls: what a change needs, without a process per call (linux/btrfs.h)
#
# A ``btrfs`` command costs a process start per call, more than the change itself; the provider
# makes, snapshots, limits and deletes subvolumes with the ioctls btrfs-progs uses, and runs the
# ``btrfs`` command only to read quota groups (``qgroup show``: the check and used bytes, once per
# document).


def _ioc(direction: int, nr: int, size: int) -> int:
    return (direction << 30) | (size << 16) | (0x94 << 8) | nr


_IOW, _IOR, _IOWR = 1, 2, 3
VOL_ARGS = struct.Struct("q4088s")                 # btrfs_ioctl_vol_args: fd, name
VOL_ARGS_V2 = struct.Struct("qQQ32s4040s")         # btrfs_ioctl_vol_args_v2: fd, transid, flags, (size, inherit), name
INO_LOOKUP = struct.Struct("QQ4080s")              # btrfs_ioctl_ino_lookup_args: treeid, objectid, name
QGROUP_LIMIT = struct.Struct("QQQQQQ")             # btrfs_ioctl_qgroup_limit_args: qgroupid, btrfs_qgroup_limit
QGROUP_CREATE = struct.Struct("QQ")                # btrfs_ioctl_qgroup_create_args: create, qgroupid
IOC_SUBVOL_CREATE = _ioc(_IOW, 14, VOL_ARGS.size)
IOC_SNAP_DESTROY = _ioc(_IOW, 15, VOL_ARGS.size)
IOC_INO_LOOKUP = _ioc(_IOWR, 18, INO_LOOKUP.size)
IOC_SNAP_CREATE_V2 = _ioc(_IOW, 23, VOL_ARGS_V2.size)
IOC_QGROUP_CREATE = _ioc(_IOW, 42, QGROUP_CREATE.size)
IOC_QGROUP_LIMIT = _ioc(_IOR, 43, QGROUP_LIMIT.size)
IOC_FS_INFO = _ioc(_IOR, 31, 1024)                 # btrfs_ioctl_fs_info_args: max_id, num_devices, fsid, ...
IOC_SYNC = _ioc(0, 8, 0)                           # commit the filesystem's transaction (qgroup numbers move)
SYSFS = "/sys/fs/btrfs"
SUBVOL_RDONLY = 1 << 1
QGROUP_LIMIT_MAX_RFER = 1 << 0


def _refusal(e: OSError, what: str) -> Refusal:
    """An ioctl's error, as ``_btrfs`` reads the command's: no space is RESOURCE_EXHAUSTED, else UNAVAILABLE."""
    text = f"btrfs: {what}: {os.strerror(e.errno) if e.errno else e}"
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return Refusal("RESOURCE_EXHAUSTED", text, True)
    return Refusal("UNAVAILABLE", text, True)


def _ioctl(path: str, request: int, arg: bytes, what: str, flags: int = os.O_RDONLY | os.O_DIRECTORY) -> bytes:
    buf = bytearray(arg)  # mutable: fcntl copies an immutable argument only up to 1 KiB
    fd = os.open(path, flags)
    try:
        fcntl.ioctl(fd, request, buf, True)
        return bytes(buf)
    except OSError as e:
        raise _refusal(e, what) from None
    finally:
        os.close(fd)


def _name_arg(path: str) -> tuple[str, bytes]:
    parent, name = os.path.split(path)
    return parent, name.encode()


def _subvolume_create(path: str) -> None:
    parent, name = _name_arg(path)
    _ioctl(parent, IOC_SUBVOL_CREATE, VOL_ARGS.pack(0, name), f"creating subvolume {path}")


def _snapshot_create(source: str, path: str, readonly: bool) -> None:
    """``path`` becomes a snapshot of the subvolume ``source`` (btrfs commits a transaction for it:
    snapshots taken at the same time share the commit)."""
    parent, name = _name_arg(path)
    src = os.open(source, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _ioctl(parent, IOC_SNAP_CREATE_V2, VOL_ARGS_V2.pack(src, 0, SUBVOL_RDONLY if readonly else 0, b"", name),
               f"snapshotting {source}")
    finally:
        os.close(src)


def _subvolume_delete(path: str) -> None:
    parent, name = _name_arg(path)
    _ioctl(parent, IOC_SNAP_DESTROY, VOL_ARGS.pack(0, name), f"deleting subvolume {path}")


def _subvol_id(path: str) -> int:
    out = _ioctl(path, IOC_INO_LOOKUP, INO_LOOKUP.pack(0, SUBVOLUME_INODE, b""),
                 f"reading the subvolume id of {path}")
    return INO_LOOKUP.unpack(out)[0]


def _limit(path: str, size: int) -> None:
    """The subvolume's referenced bytes may not pass ``size``: a write past it fails with EDQUOT."""
    _ioctl(path, IOC_QGROUP_LIMIT, QGROUP_LIMIT.pack(0, QGROUP_LIMIT_MAX_RFER, size, 0, 0, 0),
           f"limiting {path} to {size} bytes")


def _qgroup_destroy(root: str, sid: int) -> None:
    _ioctl(root, IOC_QGROUP_CREATE, QGROUP_CREATE.pack(0, sid), f"destroying qgroup 0/{sid}")


def _sysfs_qgroups(cfg: Config) -> str | None:
    """``/sys/fs/btrfs/<fsid>/qgroups`` of root's filesystem when it is btrfs with quotas on, else None
    (then the ``btrfs`` command says what is wrong).  Cached per document: reading quota groups there
    costs no process."""
    if cfg.sysfs is None:
        cfg.sysfs = ""
        try:
            info = _ioctl(cfg.root, IOC_FS_INFO, bytes(1024), "reading the filesystem's id")
            fsid = info[16:32].hex()
            qgroups = os.path.join(SYSFS, f"{fsid[:8]}-{fsid[8:12]}-{fsid[12:16]}-{fsid[16:20]}-{fsid[20:]}",
                                   "qgroups")
            with open(os.path.join(qgroups, "enabled")) as fh:
                if fh.read().strip() == "1":
                    cfg.sysfs = qgroups
        except (Refusal, OSError):
            pass
    return cfg.sysfs or None


def _referenced(cfg: Config, sids: set[int]) -> dict[int, int]:
    """Referenced bytes of these subvolumes' qgroups, after a commit; from sysfs, else ``qgroup show``."""
    qgroups = _sysfs_qgroups(cfg)
    if qgroups is None:
        return {sid: got[0] for sid, got in _qgroups(cfg, sync=True).items() if sid in sids}
    _ioctl(cfg.root, IOC_SYNC, b"", f"committing the filesystem of {cfg.root}")
    found = {}
    for sid in sids:
        try:
            with open(os.path.join(qgroups, f"0_{sid}", "referenced")) as fh:
                found[sid] = int(fh.read())
        except (OSError, ValueError):
            pass
    return found


def _qgroups(cfg: Config, sync: bool) -> dict[int, tuple[int, int | None]]:
    """Each level-0 qgroup's (referenced bytes, referenced limit or None), by subvolume id.

    Also the check that ``root`` is btrfs with quotas on: a Refusal that says
    which is missing.  ``sync`` commits the filesystem first, so bytes written
    just now are counted (qgroup numbers move at transaction commits).
    """
    if not os.path.isdir(cfg.root):
        raise Refusal("UNAVAILABLE", f"btrfs: root {cfg.root} is not a directory (storage not mounted?)", True)
    try:
        out = _btrfs("qgroup", "show", "--raw", "-r", *(["--sync"] if sync else []), cfg.root,
                     what=f"reading quota groups of {cfg.root}")
    except Refusal as e:
        if "not a btrfs filesystem" in e.message:
            raise Refusal("INVALID_CONFIG", f"btrfs: root {cfg.root} is not on a btrfs filesystem "
                                            f"(is the btrfs filesystem mounted there?)", True) from None
        if "quotas not enabled" in e.message:
            raise Refusal("INVALID_CONFIG", f"btrfs: quotas are not enabled on the filesystem of {cfg.root}, "
                                            f"so sizes cannot be enforced (btrfs quota enable MOUNTPOINT)", True) \
                from None
        raise
    cfg.fs_checked = True
    groups: dict[int, tuple[int, int | None]] = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) < 4 or not cols[0].startswith("0/") or not cols[0][2:].isdigit():
            continue  # the header, its underline, and higher-level qgroups
        limit = int(cols[3]) if cols[3].isdigit() else None
        groups[int(cols[0][2:])] = (int(cols[1]), limit)
    return groups


def _check_fs(cfg: Config) -> None:
    """Refuse clearly, once per document, unless ``root`` is a directory on btrfs with quotas enabled."""
    if not cfg.fs_checked:
        if os.path.isdir(cfg.root) and _sysfs_qgroups(cfg) is not None:
            cfg.fs_checked = True
        else:
            _qgroups(cfg, sync=False)  # the btrfs command says which is missing


def _is_subvolume(path: str) -> bool:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    return st.st_ino == SUBVOLUME_INODE and os.path.isdir(path)


def _delete_subvolume(cfg: Config, path: str) -> None:
    """Delete the subvolume at ``path`` and the ones a user made inside it (btrfs refuses a subvolume
    that still holds another, so those go first, deepest first); then its qgroup, best effort.

    The qgroup cannot be destroyed until btrfs's cleaner has dropped the
    subvolume (EBUSY); recent kernels then remove it themselves.  Where a
    kernel does not, what is left is an empty stale qgroup that
    ``btrfs qgroup clear-stale`` removes: harmless either way.
    """
    sid = _subvol_id(path)
    try:
        _subvolume_delete(path)
    except Refusal as e:
        if os.strerror(errno.ENOTEMPTY) not in e.message:
            raise
        for nested in reversed(_nested_subvolumes(path)):
            _subvolume_delete(nested)
        _subvolume_delete(path)
    try:
        _qgroup_destroy(cfg.root, sid)
    except Refusal:
        pass


def _nested_subvolumes(top: str) -> list[str]:
    """Subvolumes below ``top`` (not ``top``), parents before children.  Only walked when a delete
    was refused, so an ordinary release never reads a user's whole tree."""
    found = []
    for dirpath, dirnames, _ in os.walk(top):
        for d in dirnames:
            p = os.path.join(dirpath, d)
            if not os.path.islink(p) and _is_subvolume(p):
                found.append(p)
    return found


# ---------------------------------------------------------------------------
# Small helpers (the shared ones are in kit: a provider imports nothing else of XCE)


def _name(value: object, what: str) -> str:
    return kit.check_name(value, what, PROVIDER)


def _field(req: dict, key: str, kind: type, default: object = None, required: bool = False) -> object:
    return kit.field(req, key, kind, PROVIDER, default, required)


def _str_map(req: dict, key: str) -> dict:
    return kit.str_map(req, key, PROVIDER)


def _sweep(cfg: Config, parent: str) -> None:
    """Remove dot-named leftovers of crashed runs, subvolumes included; call under the lock.
    Once per parent and document: a change that fails removes its own leftovers.

    ``.new-*`` objects were never answered to anyone and ``.gone-*`` ones were
    being released: neither holds data that anyone still has a claim to.
    """
    if parent in cfg.swept:
        return
    try:
        names = os.listdir(parent)
    except FileNotFoundError:
        return
    cfg.swept.add(parent)
    for n in names:
        if not n.startswith("."):
            continue
        leftover = os.path.join(parent, n)
        if _is_subvolume(os.path.join(leftover, "data")):
            _delete_subvolume(cfg, os.path.join(leftover, "data"))
        if os.path.isdir(leftover) and not os.path.islink(leftover):
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            os.unlink(leftover)


def _metas_in(parent: str) -> list[dict]:
    out = []
    try:
        names = sorted(os.listdir(parent))
    except FileNotFoundError:
        return out
    for n in names:
        if not n.startswith("."):
            meta = _read_json(os.path.join(parent, n, "meta.json"))
            if meta is not None:
                out.append(meta)
    return out


def _find(cfg: Config, handle: str) -> tuple[str, dict] | None:
    """(object directory, meta) of the volume or snapshot ``handle``, or None."""
    for parent in (cfg.volumes, cfg.snapshots):
        meta = _read_json(os.path.join(parent, handle, "meta.json"))
        if meta is not None:
            return os.path.join(parent, handle), meta
    return None


def _volume(cfg: Config, handle: str, doing: str) -> tuple[str, dict]:
    """The volume ``handle`` for an op that needs a writable volume: NOT_FOUND, or a snapshot refused."""
    found = _find(cfg, handle)
    if found is None:
        raise Refusal("NOT_FOUND", f"btrfs: volume {handle} does not exist", False)
    if found[1].get("kind") == "snapshot":
        raise Refusal("INVALID_ARGUMENT", f"btrfs: cannot {doing} {handle}: it is a read-only snapshot "
                                          f"(create a volume from it to use it)", False)
    return found


def _check_reachable(cfg: Config, host: str, handle: str) -> None:
    if cfg.reachable_hosts is not None and host not in cfg.reachable_hosts:
        raise Refusal("NOT_REACHABLE", f"btrfs: {handle} cannot be reached from host {host} "
                                       f"(reachable from {', '.join(cfg.reachable_hosts) or 'no host'})", False)


# ---------------------------------------------------------------------------
# Making objects


def _make(cfg: Config, parent: str, handle: str, meta: dict, build) -> dict:
    """The object ``handle`` under ``parent``: found if it exists, else built and renamed into place.

    ``build(data_path)`` makes the subvolume (and may refuse) and returns what
    it adds to ``meta``; the caller holds the lock.  Whatever fails after the subvolume exists, the half-built
    envelope is removed before the refusal goes out, and a crash leaves only
    a dot name that the next change sweeps.
    """
    final = os.path.join(parent, handle)
    found = _read_json(os.path.join(final, "meta.json"))
    if found is not None:
        return found  # OBSERVATION: this op_id already acted (a retry, maybe after a crash)
    _makedirs(parent)
    _sweep(cfg, parent)
    envelope = os.path.join(parent, f".new-{handle}")
    os.mkdir(envelope, 0o711)
    data = os.path.join(envelope, "data")
    try:
        meta = {**meta, **build(data), "handle": handle, "created": time.time(), "subvol_id": _subvol_id(data)}
        _write_json(os.path.join(envelope, "meta.json"), meta)
        os.rename(envelope, final)
    except BaseException:
        if _is_subvolume(data):
            _delete_subvolume(cfg, data)
        shutil.rmtree(envelope, ignore_errors=True)
        raise
    return meta


def _new_volume(cfg: Config, size: int, tags: dict, source: str | None):
    """The ``build`` for a writable volume: empty, or a writable snapshot of the object ``source``
    (refused unless it exists and fits in ``size``); then its limit."""
    def build(data: str) -> dict:
        owner = kit.owner_ids(cfg.set_owner, tags, PROVIDER)
        if source is None:
            _subvolume_create(data)
        else:
            found = _find(cfg, source)
            if found is None:
                raise Refusal("NOT_FOUND", f"btrfs: the content source {source} does not exist", False)
            if found[1]["size_bytes"] > size:
                raise Refusal("INVALID_ARGUMENT", f"btrfs: a volume made from {source} needs at least "
                                                  f"{found[1]['size_bytes']} bytes (the source's size), "
                                                  f"not {size}", False)
            _snapshot_create(os.path.join(found[0], "data"), data, readonly=False)
        os.chmod(data, 0o700)
        if owner is not None:
            os.chown(data, *owner)
        _limit(data, size)
        return {}
    return build


def _size(req: dict) -> int:
    size = _field(req, "size_bytes", int, 0)
    if size < 0:
        raise Refusal("INVALID_ARGUMENT", f"btrfs: size_bytes must not be negative, got {size}", False)
    return max(size, MIN_SIZE_BYTES)


def _volume_meta(req: dict, size: int, source: str | None) -> dict:
    return {"kind": "volume", "tags": _str_map(req, "tags"), "size_bytes": size,
            "class": req.get("class_name") or "", "params": _str_map(req, "params"), "attachments": [],
            "source_handle": source, "expanded_by": []}


# ---------------------------------------------------------------------------
# Operations: each takes (cfg, request) and returns a reply, or raises Refusal


def op_create(cfg: Config, req: dict) -> dict:
    """A volume of ``size_bytes`` (enforced), empty or, with ``source_handle``, a writable copy of that
    snapshot or volume (a btrfs snapshot: instant, shares its blocks until either side writes)."""
    _check_fs(cfg)
    claim_id = _field(req, "claim_id", int, required=True)
    source = req.get("source_handle")
    if source is not None:
        source = _name(source, "source_handle")
    size = _size(req)
    tags = _str_map(req, "tags")
    handle = derive_handle(claim_id, req["op_id"])
    with cfg.lock():
        meta = _make(cfg, cfg.volumes, handle, _volume_meta(req, size, source),
                     _new_volume(cfg, size, tags, source))
    return cfg.want_used(ok(req["op_id"], handle=handle, size_bytes=meta["size_bytes"],
                            reachable_hosts=cfg.reachable_hosts, host_labels=cfg.host_labels or None,
                            path=os.path.join(cfg.volumes, handle, "data")), meta)


def op_create_snapshot(cfg: Config, req: dict) -> dict:
    """A read-only point-in-time copy of the volume ``handle`` (atomic: crash-consistent, not
    application-consistent); its size is the volume's size when it was taken."""
    _check_fs(cfg)
    claim_id = _field(req, "claim_id", int, required=True)
    source = _name(req.get("handle"), "handle")
    snap = derive_handle(claim_id, req["op_id"], prefix="s")

    def build(data: str) -> dict:
        vol, vmeta = _volume(cfg, source, "snapshot")
        _snapshot_create(os.path.join(vol, "data"), data, readonly=True)
        return {"size_bytes": vmeta["size_bytes"]}

    meta = {"kind": "snapshot", "tags": _str_map(req, "tags"), "size_bytes": 0,
            "class": req.get("class_name") or "", "params": _str_map(req, "params"), "attachments": [],
            "source_handle": source, "expanded_by": []}
    with cfg.lock():
        meta = _make(cfg, cfg.snapshots, snap, meta, build)
    return cfg.want_used(ok(req["op_id"], handle=snap, size_bytes=meta["size_bytes"]), meta)


def op_expand(cfg: Config, req: dict) -> dict:
    """Raise the volume's limit to ``size_bytes`` while it may be in use; never lower it."""
    _check_fs(cfg)
    handle = _name(req.get("handle"), "handle")
    new = _field(req, "size_bytes", int, required=True)
    with cfg.lock():
        vol, meta = _volume(cfg, handle, "expand")
        current = meta["size_bytes"]
        if req["op_id"] not in meta.get("expanded_by", []) and new != current:
            if new < current:
                raise Refusal("INVALID_ARGUMENT", f"btrfs: volume {handle} is {current} bytes and cannot shrink "
                                                  f"to {new}", False)
            _limit(os.path.join(vol, "data"), new)  # before the record: a crash between is re-applied
            meta["size_bytes"] = new
            meta["expanded_by"] = [*meta.get("expanded_by", []), req["op_id"]][-EXPANDS_KEPT:]
            _write_json(os.path.join(vol, "meta.json"), meta)
    return cfg.want_used(ok(req["op_id"], handle=handle, size_bytes=meta["size_bytes"]), meta)


def _remove(cfg: Config, parent: str, handle: str) -> None:
    """Delete the object: gone at once for everyone (renamed to a dot name), then its subvolume."""
    _sweep(cfg, parent)
    target = os.path.join(parent, handle)
    if not os.path.isdir(target):
        return
    trash = os.path.join(parent, f".gone-{handle}")
    os.rename(target, trash)
    if _is_subvolume(os.path.join(trash, "data")):
        _delete_subvolume(cfg, os.path.join(trash, "data"))
    shutil.rmtree(trash)


def op_release(cfg: Config, req: dict) -> dict:
    """Delete the volume or snapshot (or, with a host, that host's node-local object); gone already is
    fine.  A volume with snapshots can go: each snapshot keeps the blocks it shares with it."""
    _check_fs(cfg)
    handle = _name(req.get("handle"), "handle")
    host = req.get("host")
    with cfg.lock():
        if host is not None:
            _remove(cfg, cfg.node_dir(_name(host, "host")), handle)
        else:
            _remove(cfg, cfg.volumes, handle)
            _remove(cfg, cfg.snapshots, handle)
    return ok(req["op_id"])


def op_delete_snapshot(cfg: Config, req: dict) -> dict:
    """Delete the snapshot ``handle``; gone already is fine; a volume's handle is refused (release it)."""
    _check_fs(cfg)
    handle = _name(req.get("handle"), "handle")
    with cfg.lock():
        if os.path.isdir(os.path.join(cfg.volumes, handle)):
            raise Refusal("INVALID_ARGUMENT", f"btrfs: {handle} is a volume, not a snapshot "
                                              f"(release deletes volumes)", False)
        _remove(cfg, cfg.snapshots, handle)
    return ok(req["op_id"])


def op_attach(cfg: Config, req: dict) -> dict:
    _check_fs(cfg)
    handle = _name(req.get("handle"), "handle")
    host = _name(req.get("host"), "host")
    with cfg.lock():
        vol, meta = _volume(cfg, handle, "attach")
        _check_reachable(cfg, host, handle)
        if host not in meta["attachments"]:
            meta["attachments"].append(host)
            _write_json(os.path.join(vol, "meta.json"), meta)
    return ok(req["op_id"], path=os.path.join(vol, "data"))


def op_detach(cfg: Config, req: dict) -> dict:
    _check_fs(cfg)
    handle = _name(req.get("handle"), "handle")
    host = _name(req.get("host"), "host")
    with cfg.lock():
        vol = os.path.join(cfg.volumes, handle)
        meta = _read_json(os.path.join(vol, "meta.json"))
        if meta is not None and host in meta["attachments"]:
            meta["attachments"].remove(host)
            _write_json(os.path.join(vol, "meta.json"), meta)
    return ok(req["op_id"])


def op_health(cfg: Config, req: dict) -> dict:
    """Healthy when root is a writable directory on btrfs with quotas on; capacity from statvfs."""
    try:
        _qgroups(cfg, sync=False)
    except Refusal as e:
        return ok(req["op_id"], healthy=False, message=e.message)
    if not os.access(cfg.root, os.W_OK | os.X_OK):
        return ok(req["op_id"], healthy=False, message=f"btrfs: root {cfg.root} is not writable")
    st = os.statvfs(cfg.root)
    return ok(req["op_id"], healthy=True, capacity_bytes=st.f_blocks * st.f_frsize,
              available_bytes=st.f_bavail * st.f_frsize,
              message=f"root {cfg.root} is on btrfs with quotas enabled")


def _listed(meta: dict, groups: dict[int, tuple[int, int | None]]) -> dict:
    got = groups.get(meta.get("subvol_id", -1))
    item = {"handle": meta["handle"], "tags": meta["tags"], "size_bytes": meta["size_bytes"],
            "created": meta["created"], "used_bytes": got[0] if got else None, "kind": meta["kind"]}
    if meta.get("source_handle"):
        item["source_handle"] = meta["source_handle"]
    return item


def op_list(cfg: Config, req: dict) -> dict:
    """Every volume and snapshot (or with a host, that host's node-local objects), with used bytes."""
    groups = _qgroups(cfg, sync=True)
    host = req.get("host")
    parents = [cfg.node_dir(_name(host, "host"))] if host is not None else [cfg.volumes, cfg.snapshots]
    return ok(req["op_id"], objects=[_listed(m, groups) for p in parents for m in _metas_in(p)])


def op_node_prepare(cfg: Config, req: dict) -> dict:
    _check_fs(cfg)
    host = _name(req.get("host"), "host")
    if req.get("handle") is not None:
        handle = _name(req["handle"], "handle")
    else:
        handle = derive_handle(_field(req, "claim_id", int, required=True), req["op_id"])
    _check_reachable(cfg, host, handle)
    size = _size(req)
    parent = cfg.node_dir(host)
    with cfg.lock():
        meta = _make(cfg, parent, handle, _volume_meta(req, size, None),
                     _new_volume(cfg, size, _str_map(req, "tags"), None))
    return ok(req["op_id"], handle=handle, size_bytes=meta["size_bytes"],
              path=os.path.join(parent, handle, "data"))


def op_node_publish(cfg: Config, req: dict) -> dict:
    """Where the data is for the caller's bind mount: the node-local object, or a volume attached to the host."""
    _check_fs(cfg)
    handle = _name(req.get("handle"), "handle")
    host = _name(req.get("host"), "host")
    target = _field(req, "target_path", str, required=True)
    if not target.startswith("/"):
        raise Refusal("INVALID_ARGUMENT", f"btrfs: target_path must be absolute, got {target!r}", False)
    _field(req, "readonly", bool, False)
    _check_reachable(cfg, host, handle)
    node = os.path.join(cfg.node_dir(host), handle)
    if os.path.isfile(os.path.join(node, "meta.json")):
        return ok(req["op_id"], path=os.path.join(node, "data"))
    found = _find(cfg, handle)
    if found is not None and found[1]["kind"] == "volume" and host in found[1]["attachments"]:
        return ok(req["op_id"], path=os.path.join(found[0], "data"))
    if found is not None:
        raise Refusal("NOT_FOUND", f"btrfs: {found[1]['kind']} {handle} is not attached to host {host}", False)
    raise Refusal("NOT_FOUND", f"btrfs: {handle} is not prepared on host {host}", False)


def op_node_unpublish(cfg: Config, req: dict) -> dict:
    _name(req.get("handle"), "handle")
    _name(req.get("host"), "host")
    return ok(req["op_id"])  # the caller unmounts; nothing is kept per publish


def op_capabilities(cfg: Config, req: dict) -> dict:
    return ok(req["op_id"], capabilities=CAPABILITIES)


OPERATIONS = {"create": op_create, "create_snapshot": op_create_snapshot, "delete_snapshot": op_delete_snapshot,
              "expand": op_expand, "attach": op_attach, "detach": op_detach, "release": op_release,
              "health": op_health, "list": op_list, "node_prepare": op_node_prepare,
              "node_publish": op_node_publish, "node_unpublish": op_node_unpublish,
              "capabilities": op_capabilities}
OPS = tuple(OPERATIONS)


# ---------------------------------------------------------------------------
# The provider


def handle(cfg: Config | Refusal, req: dict) -> dict:
    """One request -> one reply; nothing a request does costs the batch's other replies."""
    op_id, op = req["op_id"], req.get("op")
    try:
        if isinstance(cfg, Refusal):
            raise cfg
        fn = OPERATIONS.get(op) if isinstance(op, str) else None
        if fn is None:
            raise Refusal("UNSUPPORTED", f"btrfs: unknown op {op!r}", False)
        return fn(cfg, req)
    except Refusal as e:
        return error(op_id, e.code, e.message, e.retryable)
    except OSError as e:
        return error(op_id, "UNAVAILABLE", f"btrfs: {op} failed: {e}", True)
    except Exception as e:  # a bug here must not cost the batch's other replies
        return error(op_id, "INTERNAL", f"btrfs: {op} failed: {type(e).__name__}: {e}", True)


PARALLEL_OPS = ("create", "create_snapshot")  # each makes its own object from its own op_id's handle
PARALLEL = 16  # threads for a group of them: btrfs commits a transaction per snapshot, and shares it


def _makes(req: dict) -> str | None:
    """The handle a create or a snapshot makes (None if the request is malformed: it will be refused)."""
    try:
        return derive_handle(req["claim_id"], req["op_id"], prefix="s" if req["op"] == "create_snapshot" else "v")
    except (KeyError, TypeError, ValueError):
        return None


def _reads(req: dict) -> object:
    """The object a create (its content source) or a snapshot (its volume) reads: a run made at once
    ends before a request that reads what an earlier one of the run makes."""
    read = req.get("handle") if req.get("op") == "create_snapshot" else req.get("source_handle")
    return read if isinstance(read, str) else object()


def _parallel(cfg: Config, reqs: list[dict]) -> list[dict]:
    """Consecutive creates and snapshots at the same time, under one hold of the root's lock.

    Each makes a different object (its handle comes from its op_id, unique in the document) and
    reads its source only, never one the run makes (``handle_document`` ends a run there), so
    they cannot meet; what they share (the check, the sweep of the
    parents) is done before.  Snapshots started together share btrfs's transaction commit,
    which is most of a snapshot's time.
    """
    with _Flock(os.path.join(cfg.root, ".lock")) if os.path.isdir(cfg.root) else _Held():
        try:
            _check_fs(cfg)
            for parent in (cfg.volumes, cfg.snapshots):
                _makedirs(parent)
                _sweep(cfg, parent)
        except (Refusal, OSError):
            return [handle(cfg, r) for r in reqs]  # each reply says what is wrong
        cfg.held = True
        try:
            with ThreadPoolExecutor(min(PARALLEL, len(reqs))) as pool:
                return list(pool.map(lambda r: handle(cfg, r), reqs))
        finally:
            cfg.held = False


def handle_document(doc: dict) -> dict:
    """A request document -> the reply document.  Runs of creates and snapshots are made at the same
    time (``_parallel``); used bytes are read once at the end, after one commit."""
    try:
        cfg: Config | Refusal = Config(doc.get("config", {}))
    except Refusal as e:
        cfg = e
    reqs: list[dict] = []
    for req in doc["requests"]:
        if not isinstance(req, dict) or not isinstance(req.get("op_id"), str) or not req["op_id"]:
            print(f"btrfs: skipping a request without an op_id: {str(req)[:80]}", file=sys.stderr)
            continue
        reqs.append(req)
    replies: list[dict] = []
    i = 0
    while i < len(reqs):
        j, made = i, set()
        while j < len(reqs) and reqs[j].get("op") in PARALLEL_OPS and _reads(reqs[j]) not in made:
            made.add(_makes(reqs[j]))
            j += 1
        if isinstance(cfg, Config) and j - i > 1:
            replies += _parallel(cfg, reqs[i:j])
            i = j
        else:
            replies.append(handle(cfg, reqs[i]))
            i += 1
    if isinstance(cfg, Config):
        cfg.fill_used()
    return {"contract": CONTRACT, "replies": replies}


def serve(stdin, stdout) -> int:
    """The provider: the request document from ``stdin``, the reply document to ``stdout``."""
    try:
        doc = json.loads(stdin.read())
    except ValueError as e:
        print(f"btrfs: the request document is not JSON: {e}", file=sys.stderr)
        return 2
    if not isinstance(doc, dict) or doc.get("contract") != CONTRACT or not isinstance(doc.get("requests"), list):
        print(f"btrfs: not a contract {CONTRACT} request document", file=sys.stderr)
        return 2
    stdout.write(json.dumps(handle_document(doc)))
    stdout.flush()
    return 0


def command() -> list[str]:
    """How to run the btrfs provider from this interpreter."""
    return [sys.executable, "-m", "xce.providers.btrfs"]


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv:
        print(f"btrfs: unknown arguments {' '.join(argv)} (the request document comes on stdin)", file=sys.stderr)
        return 2
    return serve(sys.stdin.buffer, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
