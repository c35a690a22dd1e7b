"""simfs: the simulated storage provider shipped with XCE, and the contract's reference provider.

Run as ``python -m xce.providers.simfs``: it reads one request document on
stdin and writes one reply document on stdout (docs/providers.md).  It is
started once per batch, so it imports nothing but a few stdlib modules and ``xce.providers.kit``
(the helpers XCE's providers share, stdlib only): it speaks the contract from
its text, like any provider.

Layout under the configured ``root``::

    root/.lock                        flock'd around every change (several simfs may run at once)
    root/faults.json                  fault injection, read and updated under its own flock
    root/volumes/<handle>/meta.json   {"handle", "tags", "size_bytes", "created", "class", "params", "attachments"}
    root/volumes/<handle>/data/       the volume's data
    root/snapshots/<handle>/...       snapshots (create_snapshot), laid out the same way, meta "kind": "snapshot"
    root/nodes/<host>/<handle>/...    node-local objects (node_prepare), laid out the same way

A volume exists once its directory is in place: it is built under a dot
name and renamed into place, so a crash leaves either nothing or a whole
volume, and ``create`` again with the same op_id finds it (one object, never
two).  Dot-named entries are never listed and are swept by later changes.

Private config: ``root`` (required, absolute, must exist), ``capacity_bytes``,
``reachable_hosts``, ``host_labels``, ``latency``, ``min_size_bytes``, ``set_owner``.

Modes: the directories simfs makes are ``0711`` (passable, not listable),
``meta.json`` is ``0600``, and each object's ``data/`` is ``0700``.  With
``set_owner = true`` (simfs running as root for jobs that run as their
users), ``data/`` belongs to the unix account named by the object's
``xce.owner`` tag, so only that user (and root) can read it.

Command line (for tests and people)::

    python -m xce.providers.simfs inject --root R [--fail-next K] [--code C] [--permanent] ...
    python -m xce.providers.simfs list --root R [--host H] [--json]
"""

from __future__ import annotations

import fcntl
import json
import os
import random
import shutil
import sys
import time

from xce.providers import kit
from xce.providers.kit import Flock as _Flock, Refusal, derive_handle, error, ok
from xce.providers.kit import makedirs as _makedirs, read_json as _read_json, write_json as _write_json

PROVIDER = "simfs"  # in every refusal message


CONTRACT = 1
OPS = ("create", "attach", "detach", "release", "health", "list",
       "node_prepare", "node_publish", "node_unpublish", "capabilities", "expand", "create_snapshot",
       "delete_snapshot")
# simfs volumes are plain directories.  A snapshot is a copy of one (made file by file: a simulator's,
# not crash-consistent), and a clone a copy of a snapshot or a volume.  Sizes are records checked
# against ``capacity_bytes``, so growing one is a new record, whether the volume is in use or not.
CAPABILITIES = {"create_snapshot": True, "clone": True, "expand": True, "online_expand": True,
                "access_modes": ["RWO", "ROX", "RWX", "RWOP"]}
EXPANDS_KEPT = 16  # op_ids of the latest expands a volume remembers (a retry of one answers ok)
CONFIG_KEYS = ("root", "capacity_bytes", "reachable_hosts", "host_labels", "latency", "min_size_bytes", "set_owner")
FAULT_KEYS = ("fail_next", "fail_code", "fail_retryable", "fail_message", "fail_ops", "fail_probability",
              "hang_next", "hang_seconds", "crash_after_act_next", "hang_after_act_next", "garbage_next")
CRASH_STATUS = 137


# ---------------------------------------------------------------------------
# Configuration


class Config(kit.ProviderConfig):
    WHO = PROVIDER
    KEYS = CONFIG_KEYS

    def __init__(self, raw: object) -> None:
        super().__init__(raw)
        self.capacity = _cfg_int(raw, "capacity_bytes", None)
        self.min_size = _cfg_int(raw, "min_size_bytes", 0)
        latency = raw.get("latency", 0.0)
        if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not 0 <= latency < 3600:
            raise Refusal("INVALID_CONFIG", "simfs: latency must be a number of seconds", True)
        self.latency = float(latency)


def _cfg_int(raw: dict, key: str, default: int | None) -> int | None:
    value = raw.get(key, default)
    if value is not None and (type(value) is not int or value < 0):
        raise Refusal("INVALID_CONFIG", f"simfs: {key} must be a non-negative integer", True)
    return value


# ---------------------------------------------------------------------------
# Small helpers


def _name(value: object, what: str) -> str:
    return kit.check_name(value, what, PROVIDER)


def _field(req: dict, key: str, kind: type, default: object = None, required: bool = False) -> object:
    return kit.field(req, key, kind, PROVIDER, default, required)


def _str_map(req: dict, key: str) -> dict:
    return kit.str_map(req, key, PROVIDER)


def _sweep(parent: str) -> None:
    """Remove dot-named leftovers (half-built or half-removed objects of crashed runs); call under the lock."""
    try:
        names = os.listdir(parent)
    except FileNotFoundError:
        return
    for n in names:
        if n.startswith("."):
            shutil.rmtree(os.path.join(parent, n), ignore_errors=True)


def _objects_in(parent: str) -> list[dict]:
    out = []
    try:
        names = sorted(os.listdir(parent))
    except FileNotFoundError:
        return out
    for n in names:
        if n.startswith("."):
            continue
        meta = _read_json(os.path.join(parent, n, "meta.json"))
        if meta is not None:
            out.append(meta)
    return out


def _check_reachable(cfg: Config, host: str, handle: str) -> None:
    if cfg.reachable_hosts is not None and host not in cfg.reachable_hosts:
        raise Refusal("NOT_REACHABLE", f"simfs: {handle} cannot be reached from host {host} "
                                       f"(reachable from {', '.join(cfg.reachable_hosts) or 'no host'})", False)


def _check_root(cfg: Config) -> None:
    if not os.path.isdir(cfg.root):
        raise Refusal("UNAVAILABLE", f"simfs: root {cfg.root} is not a directory (storage not mounted?)", True)


# ---------------------------------------------------------------------------
# Operations: each takes (cfg, request) and returns a reply, or raises Refusal


def _make(cfg: Config, parent: str, handle: str, req: dict, content: str | None = None,
          extra: dict | None = None) -> dict:
    """The object ``handle`` under ``parent``: found if it exists, else built and renamed into place.
    ``content``: a data directory (of a snapshot or volume) whose tree the new object starts as a
    copy of; ``extra``: more meta (kind, source_handle)."""
    size = _field(req, "size_bytes", int, 0)
    if size < 0:
        raise Refusal("INVALID_ARGUMENT", f"simfs: size_bytes must not be negative, got {size}", False)
    tags = _str_map(req, "tags")
    params = _str_map(req, "params")
    final = os.path.join(parent, handle)
    with _Flock(os.path.join(cfg.root, ".lock")):
        meta = _read_json(os.path.join(final, "meta.json"))
        if meta is not None:
            return meta  # OBSERVATION: this op_id already acted (a retry, maybe after a crash)
        _makedirs(parent)
        _sweep(parent)
        actual = max(size, cfg.min_size)
        if cfg.capacity is not None and parent == cfg.volumes:
            used = sum(m.get("size_bytes") or 0 for m in _objects_in(parent))
            if used + actual > cfg.capacity:
                raise Refusal("RESOURCE_EXHAUSTED", f"simfs: no room for {actual} bytes: {used} of "
                                                    f"{cfg.capacity} bytes are in use", True)
        meta = {"handle": handle, "tags": tags, "size_bytes": actual, "created": time.time(),
                "class": req.get("class_name") or "", "params": params, "attachments": [], **(extra or {})}
        owner = kit.owner_ids(cfg.set_owner, tags, PROVIDER)
        build = os.path.join(parent, f".new-{handle}")
        os.mkdir(build, 0o711)
        os.mkdir(os.path.join(build, "data"), 0o700)
        if owner is not None:
            os.chown(os.path.join(build, "data"), *owner)
        if content is not None:  # a job may have written the source: nothing in it is followed (kit.copy_tree)
            dirs = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
            src_fd, dest_fd = os.open(content, dirs), os.open(os.path.join(build, "data"), dirs)
            try:
                kit.copy_tree(src_fd, dest_fd, owner, PROVIDER)
            finally:
                os.close(src_fd)
                os.close(dest_fd)
        _write_json(os.path.join(build, "meta.json"), meta)
        os.rename(build, final)
        return meta


def _source(cfg: Config, source: str) -> dict:
    """The snapshot's or volume's meta named ``source`` (a clone's content source)."""
    for parent in (_snapshots(cfg), cfg.volumes):
        meta = _read_json(os.path.join(parent, source, "meta.json"))
        if meta is not None:
            return meta | {"data": os.path.join(parent, source, "data")}
    raise Refusal("NOT_FOUND", f"simfs: no snapshot or volume {source} to make a volume from", False)


def op_create(cfg: Config, req: dict) -> dict:
    """A volume: empty, or with a ``source_handle`` a copy of that snapshot's or volume's data tree."""
    _check_root(cfg)
    claim_id = _field(req, "claim_id", int, required=True)
    handle = derive_handle(claim_id, req["op_id"])
    content, extra = None, None
    if req.get("source_handle") is not None and _read_json(os.path.join(cfg.volumes, handle, "meta.json")) is None:
        source = _name(req["source_handle"], "source_handle")
        smeta = _source(cfg, source)
        size = _field(req, "size_bytes", int, 0)
        if size < smeta["size_bytes"]:
            raise Refusal("INVALID_ARGUMENT", f"simfs: a volume made from {source} needs at least its size, "
                                              f"{smeta['size_bytes']} bytes; {size} asked", False)
        content, extra = smeta["data"], {"source_handle": source}
    meta = _make(cfg, cfg.volumes, handle, req, content, extra)
    return ok(req["op_id"], handle=handle, size_bytes=meta["size_bytes"], reachable_hosts=cfg.reachable_hosts,
              host_labels=cfg.host_labels or None, path=os.path.join(cfg.volumes, handle, "data"))


def _volume(cfg: Config, req: dict) -> tuple[str, str]:
    handle = _name(req.get("handle"), "handle")
    return handle, os.path.join(cfg.volumes, handle)


def op_attach(cfg: Config, req: dict) -> dict:
    _check_root(cfg)
    handle, vol = _volume(cfg, req)
    host = _name(req.get("host"), "host")
    with _Flock(os.path.join(cfg.root, ".lock")):
        meta = _read_json(os.path.join(vol, "meta.json"))
        if meta is None:
            raise Refusal("NOT_FOUND", f"simfs: volume {handle} does not exist", False)
        _check_reachable(cfg, host, handle)
        if host not in meta["attachments"]:
            meta["attachments"].append(host)
            _write_json(os.path.join(vol, "meta.json"), meta)
    return ok(req["op_id"], path=os.path.join(vol, "data"))


def op_detach(cfg: Config, req: dict) -> dict:
    _check_root(cfg)
    handle, vol = _volume(cfg, req)
    host = _name(req.get("host"), "host")
    with _Flock(os.path.join(cfg.root, ".lock")):
        meta = _read_json(os.path.join(vol, "meta.json"))
        if meta is not None and host in meta["attachments"]:
            meta["attachments"].remove(host)
            _write_json(os.path.join(vol, "meta.json"), meta)
    return ok(req["op_id"])


def _remove(cfg: Config, parent: str, handle: str) -> None:
    with _Flock(os.path.join(cfg.root, ".lock")):
        _sweep(parent)
        target = os.path.join(parent, handle)
        if os.path.isdir(target):
            trash = os.path.join(parent, f".gone-{handle}")
            os.rename(target, trash)  # gone at once for everyone; a crash mid-rmtree leaves only a dot-name
            shutil.rmtree(trash)


def op_release(cfg: Config, req: dict) -> dict:
    """Remove the volume (or, with a host, that host's node-local object), or a snapshot by its
    handle (orphan scans release whatever they list); gone already is fine.  A volume's snapshots
    are copies: they stay."""
    _check_root(cfg)
    handle = _name(req.get("handle"), "handle")
    host = req.get("host")
    if host is None and os.path.isdir(os.path.join(_snapshots(cfg), handle)):
        _remove(cfg, _snapshots(cfg), handle)
        return ok(req["op_id"])
    _remove(cfg, cfg.node_dir(_name(host, "host")) if host is not None else cfg.volumes, handle)
    return ok(req["op_id"])


def _snapshots(cfg: Config) -> str:
    return os.path.join(cfg.root, "snapshots")


def op_create_snapshot(cfg: Config, req: dict) -> dict:
    """A copy of the volume ``handle``'s data tree, file by file: simfs is a simulator, so unlike a
    real provider's this copy is not atomic (a job writing meanwhile may leave a mix in it)."""
    _check_root(cfg)
    claim_id = _field(req, "claim_id", int, required=True)
    source, vol = _volume(cfg, req)
    snap = derive_handle(claim_id, req["op_id"], prefix="s")
    meta = _read_json(os.path.join(_snapshots(cfg), snap, "meta.json"))
    if meta is None:  # not made by an earlier try of this op_id
        vmeta = _read_json(os.path.join(vol, "meta.json"))
        if vmeta is None:
            raise Refusal("NOT_FOUND", f"simfs: volume {source} does not exist", False)
        meta = _make(cfg, _snapshots(cfg), snap, dict(req, size_bytes=vmeta["size_bytes"]),
                     os.path.join(vol, "data"), {"kind": "snapshot", "source_handle": source})
    return ok(req["op_id"], handle=snap, size_bytes=meta["size_bytes"])


def op_delete_snapshot(cfg: Config, req: dict) -> dict:
    _check_root(cfg)
    handle = _name(req.get("handle"), "handle")
    if os.path.isdir(os.path.join(cfg.volumes, handle)):
        raise Refusal("INVALID_ARGUMENT", f"simfs: {handle} is a volume, not a snapshot", False)
    _remove(cfg, _snapshots(cfg), handle)
    return ok(req["op_id"])


def op_expand(cfg: Config, req: dict) -> dict:
    """Grow the volume's size (attached or not: a size is a record here) within ``capacity_bytes``;
    never shrink it.  The op_ids applied are kept, so a retry after a later, larger expand is ok."""
    _check_root(cfg)
    handle, vol = _volume(cfg, req)
    new = _field(req, "size_bytes", int, required=True)
    if new <= 0:
        raise Refusal("INVALID_ARGUMENT", f"simfs: expand needs the new size_bytes, got {new}", False)
    with _Flock(os.path.join(cfg.root, ".lock")):
        meta = _read_json(os.path.join(vol, "meta.json"))
        if meta is None:
            raise Refusal("NOT_FOUND", f"simfs: volume {handle} does not exist", False)
        current = meta["size_bytes"]
        if req["op_id"] not in meta.get("expanded_by", []) and new != current:
            if new < current:
                raise Refusal("INVALID_ARGUMENT", f"simfs: volume {handle} is {current} bytes and cannot shrink "
                                                  f"to {new}", False)
            if cfg.capacity is not None:
                used = sum(m.get("size_bytes") or 0 for m in _objects_in(cfg.volumes))
                if used - current + new > cfg.capacity:
                    raise Refusal("RESOURCE_EXHAUSTED", f"simfs: no room to grow {handle} by {new - current} "
                                                        f"bytes: {used} of {cfg.capacity} bytes are in use", True)
            meta["size_bytes"] = new
            meta["expanded_by"] = [*meta.get("expanded_by", []), req["op_id"]][-EXPANDS_KEPT:]
            _write_json(os.path.join(vol, "meta.json"), meta)
    return ok(req["op_id"], handle=handle, size_bytes=meta["size_bytes"], used_bytes=_used(os.path.join(vol, "data")))


def _used(data: str) -> int:
    """The bytes the files under ``data`` hold (their sizes: simfs limits nothing on disk)."""
    total = 0
    for top, dirs, files in os.walk(data):
        for name in files:
            try:
                st = os.lstat(os.path.join(top, name))
            except OSError:
                continue  # removed while we walked
            total += st.st_size
    return total


def op_health(cfg: Config, req: dict) -> dict:
    """Healthy when root is a writable directory; with ``capacity_bytes``, what is not yet given to volumes."""
    writable = os.path.isdir(cfg.root) and os.access(cfg.root, os.W_OK | os.X_OK)
    available = None
    if writable and cfg.capacity is not None:
        available = max(0, cfg.capacity - sum(m.get("size_bytes") or 0 for m in _objects_in(cfg.volumes)))
    return ok(req["op_id"], healthy=writable, capacity_bytes=cfg.capacity, available_bytes=available,
              message=f"root {cfg.root} is {'' if writable else 'not '}a writable directory")


def op_list(cfg: Config, req: dict) -> dict:
    """Every volume, or with a host every node-local object of that host."""
    _check_root(cfg)
    host = req.get("host")
    parents = [cfg.node_dir(_name(host, "host"))] if host is not None else [cfg.volumes, _snapshots(cfg)]
    objects = [{"handle": m["handle"], "tags": m["tags"], "size_bytes": m["size_bytes"], "created": m["created"],
                "used_bytes": _used(os.path.join(parent, m["handle"], "data")), "kind": m.get("kind", "volume")}
               | ({"source_handle": m["source_handle"]} if m.get("source_handle") else {})
               for parent in parents for m in _objects_in(parent)]
    return ok(req["op_id"], objects=objects)


def op_node_prepare(cfg: Config, req: dict) -> dict:
    _check_root(cfg)
    host = _name(req.get("host"), "host")
    if req.get("handle") is not None:
        handle = _name(req["handle"], "handle")
    else:
        handle = derive_handle(_field(req, "claim_id", int, required=True), req["op_id"])
    _check_reachable(cfg, host, handle)
    meta = _make(cfg, cfg.node_dir(host), handle, req)
    return ok(req["op_id"], handle=handle, size_bytes=meta["size_bytes"],
              path=os.path.join(cfg.node_dir(host), handle, "data"))


def op_node_publish(cfg: Config, req: dict) -> dict:
    """Where the data is for the caller's bind mount: the node-local object, or a volume attached to the host."""
    _check_root(cfg)
    handle = _name(req.get("handle"), "handle")
    host = _name(req.get("host"), "host")
    target = _field(req, "target_path", str, required=True)
    if not target.startswith("/"):
        raise Refusal("INVALID_ARGUMENT", f"simfs: target_path must be absolute, got {target!r}", False)
    _field(req, "readonly", bool, False)
    _check_reachable(cfg, host, handle)
    node = os.path.join(cfg.node_dir(host), handle)
    if os.path.isfile(os.path.join(node, "meta.json")):
        return ok(req["op_id"], path=os.path.join(node, "data"))
    meta = _read_json(os.path.join(cfg.volumes, handle, "meta.json"))
    if meta is not None and host in meta["attachments"]:
        return ok(req["op_id"], path=os.path.join(cfg.volumes, handle, "data"))
    if meta is not None:
        raise Refusal("NOT_FOUND", f"simfs: volume {handle} is not attached to host {host}", False)
    raise Refusal("NOT_FOUND", f"simfs: {handle} is not prepared on host {host}", False)


def op_capabilities(cfg: Config, req: dict) -> dict:
    return ok(req["op_id"], capabilities=CAPABILITIES)


def op_node_unpublish(cfg: Config, req: dict) -> dict:
    _name(req.get("handle"), "handle")
    _name(req.get("host"), "host")
    return ok(req["op_id"])  # the caller unmounts; simfs keeps no publish state


OPERATIONS = {"create": op_create, "attach": op_attach, "detach": op_detach, "release": op_release,
              "health": op_health, "list": op_list, "node_prepare": op_node_prepare,
              "node_publish": op_node_publish, "node_unpublish": op_node_unpublish,
              "capabilities": op_capabilities, "expand": op_expand, "create_snapshot": op_create_snapshot,
              "delete_snapshot": op_delete_snapshot}
ACTS = ("create", "release", "expand", "create_snapshot", "delete_snapshot")  # what crash/hang_after_act apply to


# ---------------------------------------------------------------------------
# Fault injection


def take_fault(root: str, op: str) -> dict:
    """Consume the faults that apply to this request from root/faults.json; {} when none.

    Returns {"hang": seconds} and/or one of {"garbage": True}, {"fail": (code,
    message, retryable)}, {"crash": True}.  ``fail_ops`` scopes every kind.
    """
    path = os.path.join(root, "faults.json")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        faults = _read_faults(fd)
        ops = faults.get("fail_ops")
        if not faults or (isinstance(ops, list) and op not in ops):
            return {}
        got: dict = {}
        if _take(faults, "hang_next"):
            got["hang"] = faults.get("hang_seconds", 3600)
        if _take(faults, "garbage_next"):
            got["garbage"] = True
        elif _take(faults, "fail_next") or random.random() < float(faults.get("fail_probability") or 0):
            code = faults.get("fail_code") or "UNAVAILABLE"
            got["fail"] = (code, faults.get("fail_message") or f"simfs: injected fault {code}",
                           bool(faults.get("fail_retryable", True)))
        elif op in ACTS and _take(faults, "crash_after_act_next"):
            got["crash"] = True
        elif op in ACTS and _take(faults, "hang_after_act_next"):
            got["hang_after"] = faults.get("hang_seconds", 3600)
        if got:
            _rewrite(fd, faults)
        return got
    finally:
        os.close(fd)


def _take(faults: dict, key: str) -> bool:
    n = faults.get(key) or 0
    if isinstance(n, int) and n > 0:
        faults[key] = n - 1
        return True
    return False


def _read_faults(fd: int) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 65536):
        chunks.append(chunk)
    text = b"".join(chunks).strip()
    if not text:
        return {}
    try:
        faults = json.loads(text)
    except ValueError:
        print("simfs: faults.json is not JSON; ignoring it", file=sys.stderr)
        return {}
    return faults if isinstance(faults, dict) else {}


def _rewrite(fd: int, faults: dict) -> None:
    data = json.dumps(faults, sort_keys=True).encode()
    os.lseek(fd, 0, os.SEEK_SET)
    os.ftruncate(fd, 0)
    os.write(fd, data)


def inject(root: str, clear: bool = False, **changes: object) -> dict:
    """Change root/faults.json (under its lock): ``clear`` first, then set the given keys; returns the result.

    ``inject(root, fail_next=2, fail_code="RESOURCE_EXHAUSTED", fail_ops=["create"])``
    """
    unknown = sorted(set(changes) - set(FAULT_KEYS))
    if unknown:
        raise ValueError(f"unknown fault keys: {', '.join(unknown)} (known: {', '.join(FAULT_KEYS)})")
    os.makedirs(root, exist_ok=True)
    with _Flock(os.path.join(root, "faults.json")) as fd:
        faults = {} if clear else _read_faults(fd)
        faults.update({k: v for k, v in changes.items() if v is not None})
        _rewrite(fd, faults)
    return faults


# ---------------------------------------------------------------------------
# The provider


class InProcessExit(Exception):
    """An injected garbage/crash fault, run inside its caller's process: the caller's process must
    not exit, so the fault surfaces as this (``status`` is what the provider process would exit with)."""

    def __init__(self, status: int) -> None:
        super().__init__(f"simfs exited with {status} without a reply (injected fault)")
        self.status = status


def _exit_process(status: int) -> None:
    os._exit(status)


def _raise_exit(status: int) -> None:
    raise InProcessExit(status)


def handle(cfg: Config | Refusal, req: dict, exit=_exit_process) -> dict:
    """One request -> one reply (or, as injected, a hang, garbage and exit, or a crash)."""
    op_id, op = req["op_id"], req.get("op")
    try:
        if isinstance(cfg, Refusal):
            raise cfg
        fault = take_fault(cfg.root, op) if isinstance(op, str) else {}
        if "hang" in fault:
            time.sleep(fault["hang"])
        if fault.get("garbage"):
            if exit is _exit_process:
                sys.stdout.write("simfs: this is not JSON {\n")
                sys.stdout.flush()
            exit(0)
        if cfg.latency:
            time.sleep(cfg.latency)
        if "fail" in fault:
            raise Refusal(*fault["fail"])
        fn = OPERATIONS.get(op) if isinstance(op, str) else None
        if fn is None:
            raise Refusal("UNSUPPORTED", f"simfs: unknown op {op!r}", False)
        reply = fn(cfg, req)
        if fault.get("crash"):
            exit(CRASH_STATUS)  # acted, never replies: the caller must retry with the same op_id
        if "hang_after" in fault:
            time.sleep(fault["hang_after"])  # acted; the reply is late (or never comes, if the caller dies)
        return reply
    except Refusal as e:
        return error(op_id, e.code, e.message, e.retryable)
    except OSError as e:
        return error(op_id, "UNAVAILABLE", f"simfs: {op} failed: {e}", True)
    except Exception as e:  # a bug here must not cost the batch's other replies
        return error(op_id, "INTERNAL", f"simfs: {op} failed: {type(e).__name__}: {e}", True)


def serve(stdin, stdout) -> int:
    """The provider: the request document from ``stdin``, the reply document to ``stdout``."""
    try:
        doc = json.loads(stdin.read())
    except ValueError as e:
        print(f"simfs: the request document is not JSON: {e}", file=sys.stderr)
        return 2
    if not isinstance(doc, dict) or doc.get("contract") != CONTRACT or not isinstance(doc.get("requests"), list):
        print(f"simfs: not a contract {CONTRACT} request document", file=sys.stderr)
        return 2
    stdout.write(json.dumps(handle_document(doc)))
    stdout.flush()
    return 0


def handle_document(doc: dict, in_process: bool = False) -> dict:
    """A request document -> the reply document.  ``in_process``: the caller runs simfs inside its
    own process (no spawn); an injected crash or garbage then raises ``InProcessExit``."""
    try:
        cfg: Config | Refusal = Config(doc.get("config", {}))
    except Refusal as e:
        cfg = e
    replies = []
    for req in doc["requests"]:
        if not isinstance(req, dict) or not isinstance(req.get("op_id"), str) or not req["op_id"]:
            print(f"simfs: skipping a request without an op_id: {str(req)[:80]}", file=sys.stderr)
            continue
        replies.append(handle(cfg, req, _raise_exit if in_process else _exit_process))
    return {"contract": CONTRACT, "replies": replies}


def command() -> list[str]:
    """How to run simfs as a provider from this interpreter."""
    return [sys.executable, "-m", "xce.providers.simfs"]


# ---------------------------------------------------------------------------
# Command line


def _cli(argv: list[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m xce.providers.simfs",
                                description="simfs: inspect volumes and inject faults (no subcommand: "
                                            "act as the provider on stdin/stdout)")
    sub = p.add_subparsers(dest="cmd", required=True)
    i = sub.add_parser("inject", help="change root/faults.json")
    i.add_argument("--root", required=True)
    i.add_argument("--clear", action="store_true", help="remove every fault first")
    i.add_argument("--fail-next", type=int, metavar="K", help="the next K requests fail")
    i.add_argument("--code", help="their error code (default UNAVAILABLE)")
    i.add_argument("--message", help="their error message")
    i.add_argument("--permanent", action="store_true", help="failures are not retryable")
    i.add_argument("--retryable", action="store_true", help="failures are retryable (the default)")
    i.add_argument("--probability", type=float, metavar="P", help="each request also fails with probability P")
    i.add_argument("--ops", help="comma-separated ops every fault applies to (default: all)")
    i.add_argument("--hang-next", type=int, metavar="K", help="the next K requests hang first")
    i.add_argument("--hang-seconds", type=float, metavar="S", help="for how long (default 3600)")
    i.add_argument("--crash-after-act-next", type=int, metavar="K",
                   help="the next K create/release/expand requests act, then exit 137 without replying")
    i.add_argument("--hang-after-act-next", type=int, metavar="K",
                   help="the next K create/release/expand requests act, then hang (--hang-seconds) before replying")
    i.add_argument("--garbage-next", type=int, metavar="K", help="the next K requests print garbage and exit 0")
    ls = sub.add_parser("list", help="print the volumes (or a host's node-local objects)")
    ls.add_argument("--root", required=True)
    ls.add_argument("--host")
    ls.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    root = os.path.abspath(a.root)
    if a.cmd == "inject":
        retryable = False if a.permanent else (True if a.retryable else None)
        ops = [o for o in a.ops.split(",") if o] if a.ops is not None else None
        faults = inject(root, clear=a.clear, fail_next=a.fail_next, fail_code=a.code, fail_message=a.message,
                        fail_retryable=retryable, fail_probability=a.probability, fail_ops=ops,
                        hang_next=a.hang_next, hang_seconds=a.hang_seconds,
                        crash_after_act_next=a.crash_after_act_next,
                        hang_after_act_next=a.hang_after_act_next, garbage_next=a.garbage_next)
        print(json.dumps(faults, sort_keys=True))
        return 0
    parent = os.path.join(root, "nodes", a.host) if a.host else os.path.join(root, "volumes")
    metas = _objects_in(parent)
    if a.json:
        print(json.dumps(metas, sort_keys=True))
        return 0
    print(f"{'HANDLE':<24} {'SIZE':>14} {'ATTACHED':<16} TAGS")
    for m in metas:
        tags = ",".join(f"{k}={v}" for k, v in sorted(m.get("tags", {}).items()))
        print(f"{m['handle']:<24} {m.get('size_bytes', 0):>14} {','.join(m.get('attachments', [])) or '-':<16} {tags}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("inject", "list", "-h", "--help"):
        return _cli(argv)
    if argv:
        print(f"simfs: unknown arguments {' '.join(argv)} (subcommands: inject, list)", file=sys.stderr)
        return 2
    return serve(sys.stdin.buffer, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
